"""Drafters: who proposes the draft tokens d_1..d_k of a speculative step.

- `ModelDrafter`: a small model with the target's tokenizer, greedy or sampled (then it
  returns the logits rows q was built from, so acceptance uses the same q).
- `NoDrafter`: proposes nothing: plain decoding (γ = 0) through the same loop, so
  speedups are measured against the same code path.
- `PromptLookupDrafter` (ngram.py): continuations found in the context, no q.

A drafter with a KV cache of its own exposes it as `kv_cache`; after every step the engine
drops its rejected drafts together with the target's (engine/cache.rollback).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from localspec.engine import cache
from localspec.engine.backend import KVCache, ModelBackend
from localspec.kernels.reference import probs_from_logits, sample_from_weights
from localspec.types import MAX_GAMMA, SamplingParams


@dataclass(frozen=True)
class DraftProposal:
    """Draft tokens of one step and, for sampled model drafts, their logits rows."""

    tokens: tuple[int, ...]
    logits: npt.NDArray[np.float32] | None = None
    """[k, V] raw drafter logits the drafts were sampled from, or None (greedy / no q)."""
    drafter: str = "none"


EMPTY = DraftProposal(())


class Drafter(Protocol):
    """Proposes draft tokens and follows the committed context."""

    name: str

    @property
    def kv_cache(self) -> KVCache | None:
        """The drafter's own KV cache, rolled back by the engine after every step; None if it has none."""
        ...

    def begin(self, context: Sequence[int]) -> None:
        """A new request starts with `context` (prompt tokens; the last one not yet evaluated)."""
        ...

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> DraftProposal:
        """Up to `k` draft tokens continuing `context` (all committed tokens)."""
        ...

    def observe(self, context: Sequence[int]) -> None:
        """The step committed; `context` is the new committed sequence (its KV cache, if
        any, has already been rolled back to it)."""
        ...


class NoDrafter:
    """Plain decoding: never drafts."""

    name = "none"
    kv_cache: KVCache | None = None

    def begin(self, context: Sequence[int]) -> None:
        """Nothing to prepare."""

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> DraftProposal:
        """Always the empty draft."""
        return EMPTY

    def observe(self, context: Sequence[int]) -> None:
        """Nothing to follow."""


class ModelDrafter:
    """Drafts with a small model sharing the target's tokenizer.

    Cache rule: the drafter's KV holds a prefix of the committed context. `propose` first
    evaluates what it has not seen (at least the last committed token), then one token per
    further draft; so after a step it lags the target by at most two tokens, which the next
    `propose` evaluates in one batch.
    """

    name = "model"

    def __init__(self, backend: ModelBackend, n_vocab: int | None = None) -> None:
        self.backend = backend
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
        t0 = self.backend.t_decode_s
        n = len(context) - 1 - cache.prefill(self.backend, context)
        if n > 0:
            self.decode_log.append((n, self.backend.t_decode_s - t0))

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> DraftProposal:
        """Greedy or sampled drafts; stops early when its own probability < p_min."""
        if k <= 0:
            return EMPTY
        k = min(k, MAX_GAMMA)
        b = self.backend
        log = self.decode_log
        log.clear()
        if b.n_past >= len(context):
            b.truncate(len(context) - 1)
        t0 = b.t_decode_s
        pending = context[b.n_past :]
        row = b.decode(pending)[-1, : self.n_vocab]  # [V] view
        log.append((len(pending), b.t_decode_s - t0))
        tokens: list[int] = []
        for i in range(k):
            if params.greedy:
                tok = int(np.argmax(row))
                if p_min > 0.0:
                    z = row.astype(np.float64)
                    prob = 1.0 / float(np.exp(z - z[tok]).sum())
                    if prob < p_min:
                        break
            else:
                q = probs_from_logits(row, params)  # [V] float64
                tok = sample_from_weights(q, float(rng.random()))
                if p_min > 0.0 and q[tok] < p_min:
                    break
                self._rows[i] = row  # the one copy: the next decode overwrites `row`
            tokens.append(tok)
            if i + 1 < k:
                t0 = b.t_decode_s
                row = b.decode([tok])[-1, : self.n_vocab]
                log.append((1, b.t_decode_s - t0))
        logits = None if params.greedy or not tokens else self._rows[: len(tokens)]
        return DraftProposal(tuple(tokens), logits, self.name)

    def observe(self, context: Sequence[int]) -> None:
        """Nothing to do: the engine has already dropped the rejected drafts from its cache."""
