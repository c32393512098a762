"""`Engine`: the speculative decoding loop, the one API every front end uses.

    engine = Engine(ModelSpec(target_path), ModelSpec(draft_path))
    for event in engine.generate(GenerationRequest(prompt="def fib(n):", max_tokens=64)):
        print(event.text, end="")
    engine.stats()  # SpecStats of the last generation

Each step reads draft -> verify -> accept -> commit/rollback, one call into each phase's
module. Synchronous; a lock serializes generations (llama contexts are not reentrant).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from localspec.engine import cache
from localspec.engine.acceptance import Acceptor
from localspec.engine.adaptive import AdaptivePolicy, PolicyState
from localspec.engine.backend import ModelBackend
from localspec.engine.chat import render_chat
from localspec.engine.drafting import MAX_GAMMA, Drafter, ModelDrafter, NoDrafter
from localspec.engine.metrics import SpecStats
from localspec.engine.ngram import PromptLookupDrafter
from localspec.engine.policy import DraftPolicy, FixedPolicy
from localspec.engine.request import Prepared, prepare
from localspec.engine.text import IncrementalDetokenizer, StopMatcher
from localspec.errors import EngineBusyError, InvalidRequestError
from localspec.kernels import get_backend
from localspec.types import ChatMessage, GenerationRequest, ModelSpec, SamplingParams, TokenEvent, TokenSource

log = logging.getLogger(__name__)

DEFAULT_GAMMA = 4


@dataclass(frozen=True)
class EngineInfo:
    """What the engine runs, for display."""

    target: str
    draft: str | None
    n_ctx: int
    n_vocab: int
    kernel: str
    default_gamma: int


def _load(spec: ModelSpec) -> ModelBackend:
    from localspec.engine.llama_backend import LlamaCppBackend

    return LlamaCppBackend(spec)


class Engine:
    """A target model, an optional drafter model, and the speculative loop over them."""

    def __init__(
        self,
        target: ModelSpec | ModelBackend,
        draft: ModelSpec | ModelBackend | None = None,
        *,
        kernel: str | None = None,
        gamma: int = DEFAULT_GAMMA,
        check_invariants: bool = False,
    ) -> None:
        if isinstance(target, ModelSpec) and isinstance(draft, ModelSpec):
            from localspec.compat import check_files

            check_files(target.path, draft.path)  # before any weights load
        self.target: ModelBackend = _load(target) if isinstance(target, ModelSpec) else target
        try:
            self.draft: ModelBackend | None = _load(draft) if isinstance(draft, ModelSpec) else draft
        except BaseException:
            self.target.close()
            raise
        n_vocab = self.target.n_vocab if self.draft is None else min(self.target.n_vocab, self.draft.n_vocab)
        self._acceptor = Acceptor(get_backend(kernel), n_vocab)
        self._model_drafter = ModelDrafter(self.draft, n_vocab) if self.draft is not None else None
        self._ngram = PromptLookupDrafter()
        self.default_gamma = gamma
        self.check_invariants = check_invariants or bool(os.environ.get("LOCALSPEC_CHECK_INVARIANTS"))
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._stats = SpecStats(kernel=self._acceptor.name)
        self._totals = SpecStats(kernel=self._acceptor.name)
        self._policy_states: dict[bool, PolicyState] = {}
        """Adaptive policy memory (costs, acceptance) per sampling mode (greedy or not)."""

    # -- public API -----------------------------------------------------------------
    @property
    def info(self) -> EngineInfo:
        """Model names, context, vocabulary and kernel."""
        return EngineInfo(
            target=self.target.name,
            draft=self.draft.name if self.draft is not None else None,
            n_ctx=self.target.n_ctx,
            n_vocab=self._acceptor.n_vocab,
            kernel=self._acceptor.name,
            default_gamma=self.default_gamma,
        )

    def render_chat(self, messages: tuple[ChatMessage, ...] | list[ChatMessage], add_generation_prompt: bool = True) -> str:
        """The target's chat template applied to `messages`."""
        t = self.target
        return render_chat(
            t.chat_template, messages, bos_token=t.bos_token, eos_token=t.eos_token,
            add_generation_prompt=add_generation_prompt,
        )

    def tokenize(self, text: str) -> list[int]:
        """Token ids of `text` under the target's tokenizer (special tokens parsed)."""
        return self.target.tokenize(text, add_special=True, parse_special=True)

    def generate(self, request: GenerationRequest, *, wait: bool = True) -> Iterator[TokenEvent]:
        """Validate `request` now (raising InvalidRequestError / ContextOverflowError), then
        return an iterator of TokenEvents; the last has `finish_reason` set. With
        `wait=False` a busy engine raises EngineBusyError instead of waiting."""
        prepared = prepare(self, request)
        if not wait and self._lock.locked():
            raise EngineBusyError("the engine is generating for another request")
        return self._run(prepared, wait)

    def cancel(self) -> None:
        """Stop the running generation at the next step boundary (its last event says 'cancelled')."""
        self._cancel.set()

    def stats(self) -> SpecStats:
        """A snapshot of the current (or last) generation's stats."""
        return self._stats.snapshot()

    def total_stats(self) -> SpecStats:
        """A snapshot of the running totals over every finished generation."""
        return self._totals.snapshot()

    @property
    def busy(self) -> bool:
        """True while a generation runs."""
        return self._lock.locked()

    def close(self) -> None:
        """Free both models."""
        with self._lock:
            self.target.close()
            if self.draft is not None:
                self.draft.close()

    # -- the loop -------------------------------------------------------------------
    def _policy(self, p: Prepared) -> DraftPolicy:
        kind, gamma = p.drafter, p.gamma
        if kind == "model":
            if self._model_drafter is None:
                raise InvalidRequestError("drafter 'model' needs a draft model (-md)", param="drafter")
            return FixedPolicy(self._model_drafter, gamma)
        if kind == "ngram":
            return FixedPolicy(self._ngram, gamma)
        if kind == "adaptive":
            state = self._policy_states.setdefault(p.params.greedy, PolicyState())
            return AdaptivePolicy(self._model_drafter, self._ngram, gamma, p.params, state)
        return FixedPolicy(NoDrafter(), 0)

    def _run(self, p: Prepared, wait: bool) -> Iterator[TokenEvent]:
        if not self._lock.acquire(blocking=wait):
            raise EngineBusyError("the engine is generating for another request")
        try:
            self._cancel.clear()
            yield from self._loop(p)
        finally:
            self._totals.merge(self._stats)
            self._lock.release()

    def _loop(self, p: Prepared) -> Iterator[TokenEvent]:
        target, params, rng = self.target, p.params, np.random.default_rng(p.seed)
        policy = self._policy(p)
        stats = self._stats = SpecStats(kernel=self._acceptor.name, drafter=policy.name, num_requests=1,
                                        numerics=target.numerics)
        context = list(p.prompt_tokens)
        stats.num_prompt_tokens = len(context)
        t0 = time.perf_counter()
        stats.num_cached_prompt_tokens = cache.prefill(target, context)
        drafters: list[Drafter] = policy.drafters
        for d in drafters:
            d.begin(context)
        policy.bind(context)
        t_start = time.perf_counter()
        stats.t_prefill_s = t_start - t0
        dec_t0 = target.t_decode_s
        dec_d0 = self.draft.t_decode_s if self.draft is not None else 0.0
        detok, stops = IncrementalDetokenizer(), StopMatcher(p.stop)
        generated, step = 0, 0

        def finish(reason: str, source: TokenSource = TokenSource.PLAIN) -> TokenEvent:
            stats.finish_reason = reason
            stats.kernel = self._acceptor.name  # auto names its choice after the first step
            stats.t_generate_s = time.perf_counter() - t_start
            stats.t_decode_target_s = target.t_decode_s - dec_t0
            if self.draft is not None:
                stats.t_decode_draft_s = self.draft.t_decode_s - dec_d0
            return TokenEvent(-1, stops.flush() + detok.flush(), source, step, reason)

        while True:
            if self._cancel.is_set():
                yield finish("cancelled")
                return
            room = target.n_ctx - len(context)  # positions left after the pending token
            if room < 0:
                yield finish("length")
                return
            k_cap = min(room, p.max_tokens - generated - 1, MAX_GAMMA)
            drafter, k = policy.choose(k_cap)
            n_past = target.n_past
            # 1. draft: up to k tokens (and q rows when sampling)
            ts = time.perf_counter()
            proposal = drafter.propose(context, k, params, rng, p.p_min) if k > 0 else _EMPTY
            # 2. verify: one target forward over [last, d_1..d_k], logits for every row
            tv = time.perf_counter()
            logits = target.decode([context[-1], *proposal.tokens], all_logits=True)  # [k+1, V]
            # 3. accept: the rule of kernels/reference.py, on the chosen backend
            ta = time.perf_counter()
            result = self._acceptor.accept(logits, proposal, params, rng)
            te = time.perf_counter()
            # 4. commit/rollback: keep last + accepted drafts in both caches
            cache.commit(target, n_past, result.num_accepted)
            context.extend(result.tokens)
            for d in drafters:
                d.observe(context)
            k_used = len(proposal.tokens)
            stats.observe_step(k_used, result.num_accepted, tv - ts, ta - tv, te - ta, proposal.drafter if k_used else "none")
            policy.observe(proposal.drafter if k_used else "none", k_used, result.num_accepted, tv - ts, ta - tv)
            policy.observe_overhead(time.perf_counter() - ta)
            if self.check_invariants:
                cache.check_invariants(
                    target, self._model_drafter if self._model_drafter in drafters else NoDrafter(), context,
                    drafted=proposal.drafter == "model", full=True,
                )
            step += 1
            if step == 1:
                stats.kernel = self._acceptor.name
            # emit: accepted drafts first, then the recovered / bonus / plain token
            for i, tok in enumerate(result.tokens):
                source = TokenSource.ACCEPTED if i < result.num_accepted else result.last_source
                if target.is_eog(tok):
                    yield finish("stop", source)
                    return
                text, hit = stops.push(detok.feed(target.token_bytes(tok)))
                generated += 1
                stats.num_generated_tokens = generated
                if hit:
                    stats.finish_reason = "stop"
                    yield TokenEvent(tok, text, source, step - 1)
                    yield finish("stop", source)
                    return
                if generated >= p.max_tokens:
                    yield TokenEvent(tok, text, source, step - 1)
                    yield finish("length", source)
                    return
                yield TokenEvent(tok, text, source, step - 1)
            stats.t_generate_s = time.perf_counter() - t_start


from localspec.engine.drafting import EMPTY as _EMPTY  # noqa: E402

__all__ = ["Engine", "EngineInfo", "DEFAULT_GAMMA", "SamplingParams"]
