"""The speculative loop of one generation: prefill, then steps until the emitter says stop.

Each `_step()` reads draft -> verify -> accept -> commit/rollback, one call into each
phase's module; the `Emitter` then turns the committed tokens into events. The loop knows
drafters only through the `Drafter` protocol and the policy that picks one per step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import cast

import numpy as np

from localspec.engine import cache
from localspec.engine.acceptance import Acceptor
from localspec.engine.backend import KVCache, ModelBackend
from localspec.engine.constraint import GrammarCursor, GuidedDrafter
from localspec.engine.drafters import EMPTY
from localspec.engine.emitter import Emitter
from localspec.engine.metrics import SpecStats
from localspec.engine.policy import DraftPolicy
from localspec.engine.request import PreparedRequest
from localspec.types import MAX_GAMMA, AcceptResult, TokenEvent, TokenSource


class StepLoop:
    """Runs one prepared request on the target (and its policy's drafters), filling `stats`."""

    def __init__(
        self,
        target: ModelBackend,
        acceptor: Acceptor,
        policy: DraftPolicy,
        request: PreparedRequest,
        stats: SpecStats,
        cancel: threading.Event,
        *,
        draft_model: ModelBackend | None = None,
        check_invariants: bool = False,
        guide: GrammarCursor | None = None,
    ) -> None:
        self.target, self.acceptor, self.policy, self.request = target, acceptor, policy, request
        self.stats = stats
        self._cancel = cancel
        self._draft_model = draft_model
        """Whose decode seconds count as drafting (stats.t_decode_draft_s)."""
        self._check = check_invariants
        self.guide = guide
        """The output grammar's cursor (engine/constraint.py), or None for free text."""
        self._rng = np.random.default_rng(request.seed)
        self.context = list(request.prompt_tokens)
        """Every committed token: prompt + output."""
        self.emitter = Emitter(target, request.stop, request.max_tokens, stats)
        self.num_steps = 0
        self._t_start = 0.0
        self._dec_t0 = self._dec_d0 = 0.0

    def run(self) -> Iterator[TokenEvent]:
        """Events until the generation ends; the last one has finish_reason set. Closing
        the iterator early records the generation as cancelled."""
        try:
            self._prefill()
            while True:
                if self._cancel.is_set():
                    yield self._finish("cancelled")
                    return
                room = self.target.n_ctx - len(self.context)  # positions left after the pending token
                if room < 0:
                    yield self._finish("length")
                    return
                k_cap = min(room, self.request.max_tokens - self.emitter.num_generated - 1, MAX_GAMMA)
                result = self._step(k_cap)
                yield from self.emitter.emit(result, self.num_steps - 1)
                if self.emitter.finish_reason is not None:
                    yield self._finish(self.emitter.finish_reason, self.emitter.last_source)
                    return
                self.stats.t_generate_s = time.perf_counter() - self._t_start
        except GeneratorExit:
            if self.stats.finish_reason is None:
                self._finish("cancelled")
            raise

    def _prefill(self) -> None:
        """Put the prompt in the target's cache (reusing the cached prefix) and start the drafters."""
        s, target, policy = self.stats, self.target, self.policy
        s.drafter, s.numerics, s.kernel = policy.name, target.numerics, self.acceptor.name
        s.num_prompt_tokens = len(self.context)
        t0 = time.perf_counter()
        s.num_cached_prompt_tokens = cache.prefill(target, self.context)
        for d in policy.drafters:
            d.begin(self.context)
        policy.bind(self.context)
        self._t_start = time.perf_counter()
        s.t_prefill_s = self._t_start - t0
        self._dec_t0 = target.t_decode_s
        self._dec_d0 = self._draft_model.t_decode_s if self._draft_model is not None else 0.0

    def _step(self, k_cap: int) -> AcceptResult:
        """One speculative step; returns the committed tokens (accepted drafts + one more)."""
        target, context, r, rng = self.target, self.context, self.request, self._rng
        drafter, k = self.policy.choose(k_cap)
        n_past = target.n_past
        # 1. draft: up to k tokens (and q rows when sampling)
        ts = time.perf_counter()
        guide = self.guide
        guided = k > 0 and guide is not None and getattr(drafter, "guided", False)
        if guided:  # the drafter samples from masked rows: its q is the constrained q
            proposal = cast(GuidedDrafter, drafter).propose(context, k, r.params, rng, r.p_min, guide=guide)
        else:
            proposal = drafter.propose(context, k, r.params, rng, r.p_min) if k > 0 else EMPTY
        if guide is not None:  # drafts the grammar refuses are cut before the verify
            proposal = guide.follow(proposal, guided)
        # 2. verify: one target forward over [last, d_1..d_k], logits for every row
        tv = time.perf_counter()
        logits = target.decode([context[-1], *proposal.tokens], all_logits=True)  # [k+1, V]
        if guide is not None:  # p_i := the target's distribution under the mask after d_1..d_i
            logits = guide.mask_rows(logits[:, : self.acceptor.n_vocab])
        # 3. accept: the rule of kernels/reference.py, on the chosen backend
        ta = time.perf_counter()
        result = self.acceptor.accept(logits, proposal, r.params, rng)
        te = time.perf_counter()
        # 4. commit, and roll both caches (and the grammar) back to the committed tokens
        context.extend(result.tokens)
        if guide is not None:
            guide.commit(result.num_accepted, result.tokens[-1])
        caches: list[tuple[KVCache, bool]] = [
            (d.kv_cache, d is drafter and k > 0) for d in self.policy.drafters if d.kv_cache is not None
        ]
        cache.rollback(target, n_past, result.num_accepted, (kv for kv, _ in caches), context)
        for d in self.policy.drafters:
            d.observe(context)
        k_used = len(proposal.tokens)
        name = proposal.drafter if k_used else "none"
        self.stats.observe_step(k_used, result.num_accepted, tv - ts, ta - tv, te - ta, name)
        self.policy.observe(name, k_used, result.num_accepted, tv - ts, ta - tv)
        self.policy.observe_overhead(time.perf_counter() - ta)
        if self._check:
            cache.check_invariants(target, context, caches, full=True)
        self.num_steps += 1
        if self.num_steps == 1:
            self.stats.kernel = self.acceptor.name  # auto names its choice after the first step
        return result

    def _finish(self, reason: str, source: TokenSource = TokenSource.PLAIN) -> TokenEvent:
        """Record the end (reason, timings) and build the last event."""
        s = self.stats
        s.finish_reason = reason
        s.kernel = self.acceptor.name
        if self._t_start:  # else closed before the prompt was in: nothing was timed
            s.t_generate_s = time.perf_counter() - self._t_start
            s.t_decode_target_s = self.target.t_decode_s - self._dec_t0
            if self._draft_model is not None:
                s.t_decode_draft_s = self._draft_model.t_decode_s - self._dec_d0
        if self.guide is not None:
            s.t_mask_s, s.num_masks = self.guide.mask_seconds, self.guide.num_masks
        return self.emitter.final(reason, source, self.num_steps)
