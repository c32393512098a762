"""The `Drafter` interface every drafting mechanism implements, its `DraftProposal`, and
`NoDrafter` (plain decoding, γ = 0, through the same loop so speedups are measured against
the same code path).

A drafter with a KV cache of its own exposes it as `kv_cache`; after every step the engine
drops its rejected drafts together with the target's (engine/cache.rollback).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from localspec.engine.backend import KVCache
from localspec.kernels.reference import probs_from_logits, sample_from_weights
from localspec.types import SamplingParams


@dataclass(frozen=True)
class DraftProposal:
    """Draft tokens of one step and, for sampled model drafts, their logits rows."""

    tokens: tuple[int, ...]
    logits: npt.NDArray[np.float32] | None = None
    """[k, V] raw drafter logits the drafts were sampled from, or None (greedy / no q)."""
    drafter: str = "none"


EMPTY = DraftProposal(())


class Drafter(Protocol):
    """Proposes draft tokens and follows the committed context.

    Besides drafting, a drafter tells the adaptive policy what it costs: `decode_log` holds
    (tokens, seconds) of each decode call of its last `begin`/`propose`; `pending(context)` how
    many tokens it must evaluate before it can draft; `sequential` whether every draft token
    after the first costs one more call (chain drafting) or the whole block comes from one
    call; `prior_acceptance` the per-position acceptance to assume before any is measured.
    """

    name: str
    """The mechanism, as stats and `--drafter` name it ("model", "ngram", ...)."""
    prior_acceptance: float
    sequential: bool
    decode_log: list[tuple[int, float]]

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

    def pending(self, context: Sequence[int]) -> int:
        """Tokens of `context` it must evaluate before it can draft the next token."""
        ...


class NoDrafter:
    """Plain decoding: never drafts."""

    name = "none"
    kv_cache: KVCache | None = None
    prior_acceptance = 0.0
    sequential = False

    def __init__(self) -> None:
        self.decode_log: list[tuple[int, float]] = []

    def begin(self, context: Sequence[int]) -> None:
        """Nothing to prepare."""

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> DraftProposal:
        """Always the empty draft."""
        return EMPTY

    def observe(self, context: Sequence[int]) -> None:
        """Nothing to follow."""

    def pending(self, context: Sequence[int]) -> int:
        """Nothing to evaluate."""
        return 0


def pick_token(
    row: npt.NDArray[np.float32], params: SamplingParams, rng: np.random.Generator, p_min: float
) -> int | None:
    """The draft token for one logits row (greedy argmax or a sample from q, the distribution
    acceptance will rebuild from the same row), or None when its probability is below p_min."""
    if params.greedy:
        tok = int(np.argmax(row))
        if p_min > 0.0:
            z = row.astype(np.float64)
            if 1.0 / float(np.exp(z - z[tok]).sum()) < p_min:
                return None
        return tok
    q = probs_from_logits(row, params)
    tok = sample_from_weights(q, float(rng.random()))
    if p_min > 0.0 and q[tok] < p_min:
        return None
    return tok
