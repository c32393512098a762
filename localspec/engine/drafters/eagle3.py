"""`Eagle3Drafter`: EAGLE-3, a one-layer head that drafts from three of the target's hidden
layers (fused into g), chained one token per call on its own small KV cache.

Costs: the first call of a proposal feeds the target features captured since the last one
(encoder + the committed (token, g) pairs), each further draft token one more call
(`sequential`). Sampled drafts return the logits rows q was built from.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.engine.backend import KVCache, common_prefix_len
from localspec.engine.drafters.base import EMPTY, DraftProposal, pick_token
from localspec.engine.drafters.features import FeatureDraftModel, fit_row
from localspec.types import MAX_GAMMA, SamplingParams


class Eagle3Drafter:
    """Chain drafting with an EAGLE-3 head (see the module doc)."""

    name = "eagle3"
    prior_acceptance = 0.6
    sequential = True
    """One call per draft token after the first."""

    def __init__(self, model: FeatureDraftModel, n_vocab: int) -> None:
        self.model = model
        self.n_vocab = n_vocab
        """Columns acceptance uses (the target's vocabulary)."""
        self._rows = np.empty((MAX_GAMMA, n_vocab), dtype=np.float32)
        self.decode_log: list[tuple[int, float]] = []

    @property
    def kv_cache(self) -> KVCache:
        """The head's feature record and KV cache (the engine drops rejected positions)."""
        return self.model

    def begin(self, context: Sequence[int]) -> None:
        """Keep only the features of the prompt prefix the target still holds."""
        self.model.truncate(common_prefix_len(self.model.tokens, context[:-1]))
        self.decode_log.clear()

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> DraftProposal:
        """Up to k chained drafts, greedy or sampled; stops early below p_min."""
        if k <= 0:
            return EMPTY
        k = min(k, MAX_GAMMA)
        m = self.model
        m.log.clear()
        tokens: list[int] = []
        try:
            row = fit_row(m.eagle3_start(context), self.n_vocab)
            for i in range(k):
                tok = pick_token(row, params, rng, p_min)
                if tok is None:
                    break
                if not params.greedy:
                    self._rows[i] = row
                tokens.append(tok)
                if i + 1 < k:
                    row = fit_row(m.eagle3_next(tok), self.n_vocab)
        finally:
            m.end_draft()
            self.decode_log = list(m.log)
        logits = None if params.greedy or not tokens else self._rows[: len(tokens)]
        return DraftProposal(tuple(tokens), logits, self.name)

    def observe(self, context: Sequence[int]) -> None:
        """Nothing to do: the rollback already dropped the rejected positions' features."""

    def close(self) -> None:
        """Free its native model and context (the engine calls it before freeing the target)."""
        self.model.close()

    def pending(self, context: Sequence[int]) -> int:
        """Captured positions the head has not encoded yet (at least the seed position)."""
        return max(1, self.model.pending_rows())
