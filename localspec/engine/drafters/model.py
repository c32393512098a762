"""`ModelDrafter`: a small model with the target's tokenizer drafts, greedy or sampled (then
it returns the logits rows q was built from, so acceptance uses the same q)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.engine import cache
from localspec.engine.backend import KVCache, ModelBackend
from localspec.engine.constraint import Guide
from localspec.engine.drafters.base import EMPTY, DraftProposal, pick_token
from localspec.types import MAX_GAMMA, SamplingParams


class ModelDrafter:
    """Drafts with a small model sharing the target's tokenizer.

    Cache rule: the drafter's KV holds a prefix of the committed context. `propose` first
    evaluates what it has not seen (at least the last committed token), then one token per
    further draft; so after a step it lags the target by at most two tokens, which the next
    `propose` evaluates in one batch.
    """

    name = "model"
    prior_acceptance = 0.7
    sequential = True
    """One decode call per draft token after the first."""

    def __init__(self, backend: ModelBackend, n_vocab: int | None = None, *, lazy_begin: bool = False) -> None:
        self.backend = backend
        self.lazy_begin = lazy_begin
        """`begin` keeps the cached prefix only; the first proposal evaluates the rest of the
        prompt (engines use this: an adaptive policy may never pick the model for a request,
        an eager prefill would then be time lost — in a batch, time every sequence waits for —
        and `pending` lets the policy price the catch-up)."""
        self.n_vocab = n_vocab or backend.n_vocab
        """Columns shared with the target (ids beyond are padding and never proposed)."""
        self._rows = np.empty((MAX_GAMMA, self.n_vocab), dtype=np.float32)
        self.decode_log: list[tuple[int, float]] = []
        """(tokens, seconds) of each decode call of the last proposal (for cost models)."""

    @property
    def kv_cache(self) -> KVCache:
        """The draft model's KV cache (the engine drops the rejected drafts from it)."""
        return self.backend

    def begin(self, context: Sequence[int]) -> None:
        """Reuse the cached prefix and evaluate the rest of the prompt but its last token
        (timed in `decode_log`, for cost models)."""
        self.decode_log.clear()
        if self.lazy_begin:
            cache.keep_prefix(self.backend, context)
            return
        t0 = self.backend.t_decode_s
        n = len(context) - 1 - cache.prefill(self.backend, context)
        if n > 0:
            self.decode_log.append((n, self.backend.t_decode_s - t0))

    guided = True
    """`propose` takes `guide=` (engine/constraint.py): drafts from grammar-masked rows."""

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0,
        *, guide: Guide | None = None,
    ) -> DraftProposal:
        """Greedy or sampled drafts; stops early when its own probability < p_min. With a
        `guide`, every row is masked by the grammar first (so q is the constrained q) and each
        draft advances the guide; drafting stops where the guide refuses (end of the grammar)."""
        if k <= 0:
            return EMPTY
        k = min(k, MAX_GAMMA)
        b = self.backend
        log = self.decode_log
        log.clear()
        if b.n_past >= len(context):
            b.truncate(len(context) - 1)
        pending = context[b.n_past :]
        if len(pending) > 2:
            # a prompt's catch-up (lazy begin): its rows go in one batch, the last token alone,
            # as plain decoding evaluates it — in the drafter's fast numerics a large batch's
            # last row differs from a one-row call, and the first draft should not
            t0 = b.t_decode_s
            b.decode(pending[:-1])
            log.append((len(pending) - 1, b.t_decode_s - t0))
            pending = pending[-1:]
        t0 = b.t_decode_s
        row = b.decode(pending)[-1, : self.n_vocab]  # [V] view
        log.append((len(pending), b.t_decode_s - t0))
        tokens: list[int] = []
        for i in range(k):
            if guide is not None:
                row = guide.mask_row(row)
            tok = pick_token(row, params, rng, p_min)
            if tok is None:
                break
            if not params.greedy:
                self._rows[i] = row  # the one copy: the next decode overwrites `row`
            if guide is not None and not guide.push(tok):
                break
            tokens.append(tok)
            if i + 1 < k:
                t0 = b.t_decode_s
                row = b.decode([tok])[-1, : self.n_vocab]
                log.append((1, b.t_decode_s - t0))
        logits = None if params.greedy or not tokens else self._rows[: len(tokens)]
        return DraftProposal(tuple(tokens), logits, self.name)

    def observe(self, context: Sequence[int]) -> None:
        """Nothing to do: the engine has already dropped the rejected drafts from its cache."""

    def pending(self, context: Sequence[int]) -> int:
        """Committed tokens its cache lacks (at least the last one, which each proposal evaluates)."""
        return max(1, len(context) - self.backend.n_past)
