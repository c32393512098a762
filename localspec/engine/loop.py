"""The speculative loop of one generation: prefill, then steps until the emitter says stop.

Each step reads draft -> verify -> accept -> commit/rollback, one call into each phase's
module; the `Emitter` then turns the committed tokens into events. `run()` drives one
generation alone; `plan()` (draft) and `complete()` (accept, commit, events) are the same
step split around the verify, so a driver can verify several generations in one batch
(engine/batch.py). The loop knows
drafters only through the `Drafter` protocol and the policy that picks one per step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import cast

import numpy as np
import numpy.typing as npt

from localspec.engine import cache
from localspec.engine.acceptance import Acceptor
from localspec.engine.backend import KVCache, ModelBackend
from localspec.engine.constraint import GrammarCursor, GuidedDrafter
from localspec.engine.drafters import EMPTY, Drafter, DraftProposal
from localspec.engine.emitter import Emitter
from localspec.engine.metrics import SpecStats
from localspec.engine.policy import DraftPolicy
from localspec.kernels import AcceptItem
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
        self._pending: tuple[Drafter, int, DraftProposal, int, float] | None = None
        """The planned step: (drafter, k, proposal, target n_past before it, drafting seconds)."""
        self._t_prefill = self._t_start = 0.0
        self._dec_t0 = self._dec_d0 = 0.0

    def run(self) -> Iterator[TokenEvent]:
        """Events until the generation ends; the last one has finish_reason set. Closing
        the iterator early records the generation as cancelled."""
        try:
            self._prefill()
            while True:
                k_cap = self.next_k()
                if isinstance(k_cap, TokenEvent):
                    yield k_cap
                    return
                tokens = self.plan(k_cap)
                t0 = time.perf_counter()
                logits = self.target.decode(tokens, all_logits=True)  # [k+1, V]
                yield from self.complete_lazily(logits, time.perf_counter() - t0)
                if self.finished:
                    return
        except GeneratorExit:
            if self.stats.finish_reason is None:
                self._finish("cancelled")
            raise

    # -- the phases, for a driver that batches several loops (engine/batch.py) ---------
    @property
    def finished(self) -> bool:
        """True once the last event was produced."""
        return self.stats.finish_reason is not None

    def _prefill(self) -> None:
        """Put the prompt in the target's cache (reusing the cached prefix) and start the drafters."""
        rest = self.prefill_begin()
        if rest:
            self.target.decode(rest)
        self.prefill_end()

    def prefill_begin(self) -> list[int]:
        """Keep the target's cached prefix of the prompt; returns the tokens it must still
        evaluate (the prompt but its last token, from the kept prefix on)."""
        s, target, policy = self.stats, self.target, self.policy
        s.drafter, s.numerics, s.kernel = policy.name, target.numerics, self.acceptor.name
        s.num_prompt_tokens = len(self.context)
        self._t_prefill = time.perf_counter()
        keep = cache.keep_prefix(target, self.context)
        s.num_cached_prompt_tokens = keep
        return self.context[keep:-1]

    def prefill_end(self) -> None:
        """The target holds the prompt: start the drafters and the clock."""
        s, target, policy = self.stats, self.target, self.policy
        for d in policy.drafters:
            d.begin(self.context)
        policy.bind(self.context)
        self._t_start = time.perf_counter()
        s.t_prefill_s = self._t_start - self._t_prefill
        self._dec_t0 = target.t_decode_s
        self._dec_d0 = self._draft_model.t_decode_s if self._draft_model is not None else 0.0

    def next_k(self) -> int | TokenEvent:
        """The most draft tokens the next step may take, or the last event when the
        generation ends before it (cancelled, or no room left in the context)."""
        if self._cancel.is_set():
            return self._finish("cancelled")
        room = self.target.n_ctx - len(self.context)  # positions left after the pending token
        if room < 0:
            return self._finish("length")
        return min(room, self.request.max_tokens - self.emitter.num_generated - 1, MAX_GAMMA)

    def plan(self, k_cap: int, *, batch_rows: int = 0, batch_tokens: float = 0.0) -> list[int]:
        """Phases 1 of a step: choose a drafter and γ (`batch_rows`/`batch_tokens`: the rows
        and expected tokens of the other sequences verified in the same batch), draft, and
        return the rows to verify: [last, d_1..d_k]."""
        context, r, rng = self.context, self.request, self._rng
        drafter, k = self.policy.choose(k_cap, batch_rows=batch_rows, batch_tokens=batch_tokens)
        n_past = self.target.n_past
        ts = time.perf_counter()
        guide = self.guide
        guided = k > 0 and guide is not None and getattr(drafter, "guided", False)
        if guided:  # the drafter samples from masked rows: its q is the constrained q
            proposal = cast(GuidedDrafter, drafter).propose(context, k, r.params, rng, r.p_min, guide=guide)
        else:
            proposal = drafter.propose(context, k, r.params, rng, r.p_min) if k > 0 else EMPTY
        if guide is not None:  # drafts the grammar refuses are cut before the verify
            proposal = guide.follow(proposal, guided)
        self._pending = (drafter, k, proposal, n_past, time.perf_counter() - ts)
        return [context[-1], *proposal.tokens]

    def accept_item(self, logits: npt.NDArray[np.float32]) -> AcceptItem:
        """Phase 3's inputs for the planned step, given its verify `logits` [k+1, V]: the
        rows under the grammar's mask, this generation's uniforms. A batch driver accepts
        several generations' items in one backend call and hands each result to `complete`."""
        assert self._pending is not None, "accept_item() without plan()"
        proposal = self._pending[2]
        if self.guide is not None:  # p_i := the target's distribution under the mask after d_1..d_i
            logits = self.guide.mask_rows(logits[:, : self.acceptor.n_vocab])
        return self.acceptor.item(logits, proposal, self.request.params, self._rng)

    def complete(self, logits: npt.NDArray[np.float32], t_verify_s: float, *,
                 batch_rows: int | None = None, batch: int = 1,
                 accepted: tuple[AcceptResult, float] | None = None) -> list[TokenEvent]:
        """Phases 2-4 of the planned step, given its verify `logits` [k+1, V] (taking
        `t_verify_s`; `batch_rows`: the rows of the whole verify batch, 0 when another
        sequence of the batch reports its cost; `batch`: the sequences verified in it;
        `accepted`: the result of its `accept_item` and the seconds it took, when a driver
        accepted it already): the step's events, the last one final when the generation ends."""
        return list(self.complete_lazily(logits, t_verify_s, batch_rows=batch_rows, batch=batch, accepted=accepted))

    def complete_lazily(self, logits: npt.NDArray[np.float32], t_verify_s: float, *,
                        batch_rows: int | None = None, batch: int = 1,
                        accepted: tuple[AcceptResult, float] | None = None) -> Iterator[TokenEvent]:
        """`complete`, its events counted in the stats as they are taken (live stats)."""
        result = self._step_end(logits, t_verify_s, batch_rows, batch, accepted)
        yield from self.emitter.emit(result, self.num_steps - 1)
        if self.emitter.finish_reason is not None:
            yield self._finish(self.emitter.finish_reason, self.emitter.last_source)
        else:
            self.stats.t_generate_s = time.perf_counter() - self._t_start

    def _step_end(self, logits: npt.NDArray[np.float32], t_verify_s: float, batch_rows: int | None,
                  batch: int = 1, accepted: tuple[AcceptResult, float] | None = None) -> AcceptResult:
        """Accept (unless a driver did), commit, roll the caches back, learn."""
        assert self._pending is not None, "complete() without plan()"
        # 3. accept: the rule of kernels/reference.py, on the chosen backend
        if accepted is None:
            ta = time.perf_counter()
            result = self.acceptor.accept_one(self.accept_item(logits))
            te = time.perf_counter()
        else:
            result, t_accept = accepted
            te = time.perf_counter()
            ta = te - t_accept
        drafter, k, proposal, n_past, t_draft = self._pending
        self._pending = None
        context, target, guide = self.context, self.target, self.guide
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
        self.stats.observe_step(k_used, result.num_accepted, t_draft, t_verify_s, te - ta, name, batch)
        self.policy.observe(name, k_used, result.num_accepted, t_draft, t_verify_s, batch_rows=batch_rows,
                           batch=batch)
        self.policy.observe_overhead(time.perf_counter() - ta)
        if self._check:
            cache.check_invariants(target, context, caches, full=True)
        self.num_steps += 1
        if self.num_steps == 1:
            self.stats.kernel = self.acceptor.name  # auto names its choice after the first step
        return result

    def finish_now(self, reason: str) -> TokenEvent:
        """End the generation here (e.g. cancelled while its prompt was being evaluated)."""
        return self._finish(reason)

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
