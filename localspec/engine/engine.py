"""`Engine`: a target, an optional drafter model and what they share; the one API every front
end uses.

    engine = Engine(ModelSpec(target_path), ModelSpec(draft_path))
    with engine.generate(GenerationRequest(prompt="def fib(n):", max_tokens=64)) as gen:
        for event in gen:
            print(event.text, end="")
    gen.stats  # SpecStats of this generation

`generate` validates and tokenizes at once, then returns a `Generation` handle; its
iteration runs the step loop (loop.py). With `parallel=1` one generation runs at a time
(the llama contexts are not reentrant, so a lock serializes them) in the iterating thread.
With `parallel=N` the contexts hold N sequences and a driver thread (batch.py) steps up to N
generations together, verifying all of them in one target call per step; the handles are
the same.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from localspec.engine.acceptance import Acceptor
from localspec.engine.constraint import GrammarCursor, grammar_tokenizer
from localspec.engine.adaptive import AdaptivePolicy, PolicyState
from localspec.engine.backend import ModelBackend
from localspec.engine.batch import PREFILL_CHUNK, BatchRunner, BatchStats, MultiSequenceBackend
from localspec.engine.drafters import Drafter, FeatureDraftModel, NoDrafter, offered
from localspec.engine.generation import Generation
from localspec.engine.loop import StepLoop
from localspec.engine.metrics import SpecStats
from localspec.engine.policy import DraftPolicy, FixedPolicy
from localspec.engine.request import Limits, PreparedRequest, chat_text, prepare
from localspec.errors import EngineBusyError, InvalidRequestError
from localspec.kernels import get_backend
from localspec.types import DEFAULT_GAMMA, ChatMessage, GenerationRequest, ModelSpec, TokenEvent


@dataclass(frozen=True)
class EngineInfo:
    """What the engine runs, for display."""

    target: str
    draft: str | None
    n_ctx: int
    n_vocab: int
    kernel: str
    default_gamma: int
    numerics: str = "exact"
    """The numerics mode the target runs in (types.NUMERICS_MODES)."""


def _load(spec: ModelSpec, n_seq: int = 1, kv_unified: bool | None = None) -> ModelBackend:
    from localspec.engine.llama.backend import LlamaCppBackend

    return LlamaCppBackend(spec, n_seq=n_seq, kv_unified=kv_unified)


def _load_features(spec: ModelSpec, target: ModelBackend) -> FeatureDraftModel:
    """An EAGLE-3/DFlash/DSpark drafter bound to the loaded llama.cpp `target`."""
    from localspec.engine.llama.backend import LlamaCppBackend
    from localspec.engine.llama.hidden import HiddenStateDraft

    if not isinstance(target, LlamaCppBackend):
        raise InvalidRequestError("a hidden-state drafter needs a llama.cpp target", param="draft")
    return HiddenStateDraft(spec.path, target, n_threads=spec.n_threads)


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
        parallel: int = 1,
        prefill_chunk: int = PREFILL_CHUNK,
    ) -> None:
        if parallel < 1:
            raise InvalidRequestError(f"parallel must be at least 1, got {parallel}", param="parallel")
        self.parallel = parallel
        """Sequences generated together (continuous batching when > 1)."""
        hidden: tuple[str, ModelSpec] | None = None
        """(kind, spec) of an EAGLE-3/DFlash/DSpark drafter: it runs on the target's hidden states."""
        if isinstance(target, ModelSpec) and isinstance(draft, ModelSpec):
            from localspec.compat import check_files, check_hidden_files

            kind = check_hidden_files(target.path, draft.path)  # before any weights load
            if kind is None:
                check_files(target.path, draft.path)
            else:
                hidden, draft = (kind, draft), None
                if parallel > 1:
                    raise InvalidRequestError(
                        f"a {kind} drafter reads the target's hidden states of one sequence; "
                        "run it with --parallel 1", param="parallel")
        if isinstance(draft, ModelSpec):
            # the drafter's numerics change only what it proposes, never the output (the
            # target's verify decides every token): its fastest kernels are free speed
            draft = replace(draft, numerics="fast")
        self.target: ModelBackend = _load(target, parallel) if isinstance(target, ModelSpec) else target
        self._features: FeatureDraftModel | None = None
        try:
            # the draft model decodes one sequence per call: a KV stream of its own per sequence
            # costs nothing and keeps its drafts (so a seeded request's output) independent of
            # the other sequences in the batch
            self.draft: ModelBackend | None = (
                _load(draft, parallel, kv_unified=False) if isinstance(draft, ModelSpec) else draft)
            if hidden is not None:
                self._features = _load_features(hidden[1], self.target)
        except BaseException:
            self.target.close()
            raise
        n_vocab = self.target.n_vocab if self.draft is None else min(self.target.n_vocab, self.draft.n_vocab)
        self._acceptor = Acceptor(get_backend(kernel), n_vocab)
        features = (hidden[0], self._features) if hidden is not None and self._features is not None else None
        try:
            # the draft model evaluates a prompt when it first drafts: the adaptive policy
            # may never pick it for a request, and then its prefill would be time lost
            self.drafters: dict[str, Drafter] = offered(self.target, self.draft, n_vocab, features, mtp=parallel == 1,
                                                       lazy_begin=True)
        except BaseException:
            if self._features is not None:
                self._features.close()
            self.target.close()
            if self.draft is not None:
                self.draft.close()
            raise
        """The drafters this engine offers, by name (`GenerationRequest.drafter`)."""
        self.default_gamma = gamma
        self.check_invariants = check_invariants or bool(os.environ.get("LOCALSPEC_CHECK_INVARIANTS"))
        self._lock = threading.Lock()
        self._last_stats = SpecStats(kernel=self._acceptor.name)
        """Live stats of the running (or last) generation, for `stats()`."""
        self._running_cancel: threading.Event | None = None
        self._totals = SpecStats(kernel=self._acceptor.name)
        self._grammar_tokenizer: Any = None
        """llguidance's view of the target's vocabulary, built by the first constrained request."""
        self._policy_states: dict[bool, PolicyState] = {}
        """Adaptive policy memory per sampling mode (greedy or not): acceptance of its own,
        verify and drafter cost models shared."""
        self._runner: BatchRunner | None = None
        self._slot_drafters: dict[int, dict[str, Drafter]] = {0: self.drafters}
        if parallel > 1:
            try:
                self._runner = BatchRunner(self._multi(self.target), self._make_loop, prefill_chunk=prefill_chunk,
                                           on_finish=self._totals.merge)
            except BaseException:
                self.target.close()
                if self.draft is not None:
                    self.draft.close()
                raise

    # -- public API -----------------------------------------------------------------
    @property
    def info(self) -> EngineInfo:
        """Model names, context, vocabulary, kernel and numerics."""
        return EngineInfo(
            target=self.target.name,
            draft=self.draft.name if self.draft is not None else (
                self._features.name if self._features is not None else None),
            n_ctx=self.target.n_ctx,
            n_vocab=self._acceptor.n_vocab,
            kernel=self._acceptor.name,
            default_gamma=self.default_gamma,
            numerics=self.target.numerics,
        )

    @property
    def limits(self) -> Limits:
        """What requests are checked against (context, default γ, whether a drafter model exists)."""
        return Limits(n_ctx=self.target.n_ctx, default_gamma=self.default_gamma,
                      drafters=frozenset(self.drafters), target_name=self.target.name)

    def render_chat(self, messages: tuple[ChatMessage, ...] | list[ChatMessage], add_generation_prompt: bool = True,
                    tools: list[dict[str, Any]] | None = None) -> str:
        """The target's chat template applied to `messages` (and `tools`)."""
        return chat_text(self.target, messages, add_generation_prompt, tools)

    @property
    def chat_template(self) -> str | None:
        """The target's GGUF chat template (None: ChatML is used)."""
        return self.target.chat_template

    def tokenize(self, text: str) -> list[int]:
        """Token ids of `text` under the target's tokenizer (special tokens parsed)."""
        return self.target.tokenize(text, add_special=True, parse_special=True)

    def generate(self, request: GenerationRequest, *, wait: bool = True) -> Generation:
        """Validate `request` now (raising InvalidRequestError / ContextOverflowError) and
        return its `Generation`, which runs while it is iterated. With `wait=False` a busy
        engine raises EngineBusyError instead of waiting."""
        prepared = prepare(request, self.target, self.limits)
        if self._runner is not None:
            if not wait and self._runner.full:
                raise EngineBusyError(f"the engine is generating for {self.parallel} requests already")
            return Generation(prepared, threading.Lock(), partial(self._runner.events, prepared),
                              kernel=self._acceptor.name)
        if not wait and self._lock.locked():
            raise EngineBusyError("the engine is generating for another request")
        return Generation(prepared, self._lock, partial(self._run, prepared), wait=wait, kernel=self._acceptor.name)

    def cancel(self) -> None:
        """Cancel the running generation, if any (a convenience for code that does not hold
        its `Generation`, which has its own `cancel()`)."""
        if self._runner is not None:
            self._runner.cancel_all()
        cancel = self._running_cancel
        if cancel is not None:
            cancel.set()

    def stats(self) -> SpecStats:
        """A snapshot of the running (or last) generation's stats; `Generation.stats` is the
        same for one generation."""
        if self._runner is not None and self._runner.last_stats is not None:
            return self._runner.last_stats.snapshot()
        return self._last_stats.snapshot()

    def total_stats(self) -> SpecStats:
        """A snapshot of the running totals over every generation that ran."""
        return self._totals.snapshot()

    @property
    def busy(self) -> bool:
        """True while a generation runs (or, with parallel > 1, waits)."""
        return self._runner.busy if self._runner is not None else self._lock.locked()

    @property
    def batch_stats(self) -> BatchStats | None:
        """What the batch driver did (parallel > 1), else None."""
        return self._runner.stats if self._runner is not None else None

    def warm_up(self) -> bool:
        """Before the first request: page the weights in and measure the target's verify
        costs and the draft model's decode costs for the adaptive policy (engine/calibrate.py;
        a second or two on a CPU). False (nothing done) once a request has run or while one runs."""
        from localspec.engine.calibrate import calibrate

        if self._policy_states or self.busy:
            return False
        with self._lock:
            state = PolicyState()
            draft = self.draft if "model" in self.drafters else None
            calibrate(self.target, draft, state, self.default_gamma + 1)
            self._policy_states[True] = state
        return True

    def close(self) -> None:
        """Free both models (waits for a running generation to end)."""
        if self._runner is not None:
            self._runner.close()
        with self._lock:
            for d in self.drafters.values():
                close = getattr(d, "close", None)  # drafters holding a context on the target (mtp)
                if close is not None:
                    close()
            self.target.close()
            if self.draft is not None:
                self.draft.close()

    # -- one generation (with the lock held) ----------------------------------------
    def _run(self, request: PreparedRequest, stats: SpecStats, cancel: threading.Event) -> Iterator[TokenEvent]:
        self._last_stats, self._running_cancel = stats, cancel
        try:
            loop = StepLoop(self.target, self._acceptor, self._policy(request, self.drafters), request, stats, cancel,
                            draft_model=self.draft, check_invariants=self.check_invariants, guide=self._guide(request))
            yield from loop.run()
        finally:
            self._running_cancel = None
            self._totals.merge(stats)

    def _guide(self, request: PreparedRequest) -> GrammarCursor | None:
        if request.grammar is None:
            return None
        if self._grammar_tokenizer is None:
            self._grammar_tokenizer = grammar_tokenizer(self.target)
        return GrammarCursor(self._grammar_tokenizer, request.grammar, self._acceptor.n_vocab)

    @staticmethod
    def _multi(model: ModelBackend) -> MultiSequenceBackend:
        if not hasattr(model, "sequence") or not hasattr(model, "decode_many"):
            raise InvalidRequestError(f"{model.name} cannot hold several sequences; use parallel=1", param="parallel")
        return model  # type: ignore[return-value]

    def _make_loop(self, slot: int, request: PreparedRequest, stats: SpecStats, cancel: threading.Event) -> StepLoop:
        """The loop of a batched generation on sequence `slot` of both models (driver thread)."""
        target = self._multi(self.target).sequence(slot)
        draft = self._multi(self.draft).sequence(slot) if self.draft is not None else None
        drafters = self._slot_drafters.get(slot)
        if drafters is None:
            drafters = offered(target, draft, self._acceptor.n_vocab, None, mtp=False, lazy_begin=True)
            self._slot_drafters[slot] = drafters
        policy = self._policy(request, drafters)
        if isinstance(policy, AdaptivePolicy):
            policy.split_batches = not getattr(self.target, "kv_unified", False)
        return StepLoop(target, self._acceptor, policy, request, stats, cancel,
                        draft_model=draft, check_invariants=self.check_invariants, guide=self._guide(request))

    def _policy(self, request: PreparedRequest, drafters: dict[str, Drafter]) -> DraftPolicy:
        kind, gamma = request.drafter, request.gamma
        if kind == "adaptive":
            state = self._policy_states.get(request.params.greedy)
            if state is None:
                # acceptance differs between greedy and sampled decoding; the costs are the hardware's
                other = next(iter(self._policy_states.values()), None)
                state = PolicyState(verify=other.verify, drafts=other.drafts) if other else PolicyState()
                self._policy_states[request.params.greedy] = state
            return AdaptivePolicy(list(drafters.values()), gamma, request.params, state)
        if kind == "none":
            return FixedPolicy(NoDrafter(), 0)
        drafter = drafters.get(kind)
        if drafter is None:  # prepare() checked it against the same drafters
            raise InvalidRequestError(f"drafter {kind!r} is not available for the loaded models", param="drafter")
        return FixedPolicy(drafter, gamma)
