"""`DFlashDrafter`: DFlash block drafting, and DSpark (DFlash with a Markov head and a
confidence head) under the name "dspark".

The target's features of every evaluated position are injected into the drafter's KV cache;
a proposal is then one non-causal decode of [last, mask, ...] whose rows give every draft
position at once (`sequential` False). DSpark's Markov head conditions each position on the
previous one inside the same call, and its confidence head cuts the draft where the
predicted acceptance falls below p_min. Each position is drawn from its own row, so sampled
drafts carry q rows like any model drafter.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.engine.backend import KVCache, common_prefix_len
from localspec.engine.drafters.base import EMPTY, DraftProposal, pick_token
from localspec.engine.drafters.features import FeatureDraftModel, fit_row
from localspec.types import MAX_GAMMA, SamplingParams


class DFlashDrafter:
    """Block drafting with a DFlash or DSpark drafter (see the module doc)."""

    prior_acceptance = 0.5
    sequential = False
    """The whole block comes from one call."""

    def __init__(self, model: FeatureDraftModel, n_vocab: int, *, dspark: bool = False) -> None:
        self.model = model
        self.n_vocab = n_vocab
        """Columns acceptance uses (the target's vocabulary)."""
        self.name = "dspark" if dspark else "dflash"
        self.decode_log: list[tuple[int, float]] = []
        self.last_confidence: tuple[float, ...] = ()
        """DSpark: the confidence head's per-position acceptance estimates of the last block."""
        self._last_k = 4

    @property
    def kv_cache(self) -> KVCache:
        """The drafter's feature record and KV cache (the engine drops rejected positions)."""
        return self.model

    def begin(self, context: Sequence[int]) -> None:
        """Keep only the features of the prompt prefix the target still holds."""
        self.model.truncate(common_prefix_len(self.model.tokens, context[:-1]))
        self.decode_log.clear()

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> DraftProposal:
        """Up to k drafts from one block; greedy or sampled per position; cut below p_min
        (DSpark: where the confidence head says so)."""
        if k <= 0:
            return EMPTY
        m = self.model
        k = min(k, MAX_GAMMA, m.max_block())
        m.log.clear()
        try:
            rows, conf = m.dflash_block(context, k)
        finally:
            self.decode_log = list(m.log)
        rows = fit_row(rows, self.n_vocab)
        self.last_confidence = tuple(float(c) for c in conf) if conf is not None else ()
        tokens: list[int] = []
        dspark = self.name == "dspark"
        for i in range(len(rows)):
            if dspark and conf is not None and p_min > 0.0 and conf[i] < p_min:
                break
            tok = pick_token(rows[i], params, rng, 0.0 if dspark else p_min)
            if tok is None:
                break
            tokens.append(tok)
        self._last_k = max(1, len(tokens))
        logits = None if params.greedy or not tokens else np.ascontiguousarray(rows[: len(tokens)])
        return DraftProposal(tuple(tokens), logits, self.name)

    def observe(self, context: Sequence[int]) -> None:
        """Nothing to do: the rollback already dropped the rejected positions' features."""

    def close(self) -> None:
        """Free its native model and context (the engine calls it before freeing the target)."""
        self.model.close()

    def pending(self, context: Sequence[int]) -> int:
        """Feature rows to inject plus the block of the last proposal (its one decode)."""
        return self.model.pending_rows() + self._last_k + 1
