"""Prompt-lookup (n-gram) drafting: propose what followed the latest earlier occurrence of
the context's last n tokens. Costs microseconds per step; drafts carry no q, so acceptance
uses the one-hot rule. The index grows incrementally with the context (no rescans)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.engine.backend import KVCache
from localspec.engine.drafters import EMPTY, DraftProposal
from localspec.types import SamplingParams


class PromptLookupDrafter:
    """Longest n-gram match first (n from n_max down to n_min), most recent occurrence."""

    name = "ngram"
    kv_cache: KVCache | None = None
    """None: prompt lookup keeps no KV cache."""
    prior_acceptance = 0.5
    sequential = False

    def __init__(self, n_min: int = 2, n_max: int = 4) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"need 1 <= n_min <= n_max, got {n_min}, {n_max}")
        self.n_min, self.n_max = n_min, n_max
        self._index: dict[tuple[int, ...], int] = {}
        """n-gram -> end position j of its latest occurrence with a known continuation."""
        self._tokens: list[int] = []
        self._indexed = 0
        """Ends j < _indexed are in the index."""
        self.last_match = 0
        """Matched suffix length of the last proposal."""
        self.decode_log: list[tuple[int, float]] = []
        """Always empty: prompt lookup decodes nothing."""

    def begin(self, context: Sequence[int]) -> None:
        """Start a new request: index its prompt."""
        self._index.clear()
        self._tokens = list(context)
        self._indexed = 0
        self._catch_up()

    def _catch_up(self) -> None:
        toks = self._tokens
        # index every n-gram ending at j whose continuation toks[j] exists (j <= len-1)
        for j in range(max(self._indexed, 1), len(toks)):
            for n in range(self.n_min, self.n_max + 1):
                if j - n >= 0:
                    self._index[tuple(toks[j - n : j])] = j
        self._indexed = max(self._indexed, len(toks))

    def observe(self, context: Sequence[int]) -> None:
        """Append the newly committed tokens to the index."""
        n_old = len(self._tokens)
        if len(context) < n_old or list(context[: min(n_old, 8)]) != self._tokens[: min(n_old, 8)]:
            self.begin(context)
            return
        self._tokens.extend(context[n_old:])
        self._indexed = max(0, min(self._indexed, len(self._tokens) - 1))
        self._catch_up()

    def lookup(self, context: Sequence[int], k: int) -> tuple[int, ...]:
        """The continuation (<= k tokens) of the longest matching suffix, or ()."""
        return self.match(context, k)[0]

    def match(self, context: Sequence[int], k: int) -> tuple[tuple[int, ...], int]:
        """(continuation of <= k tokens, length n of the matched suffix); ((), 0) if none.
        Longer matches predict better, so the adaptive policy keeps statistics per n."""
        L = len(context)
        for n in range(min(self.n_max, L), self.n_min - 1, -1):
            j = self._index.get(tuple(context[L - n :]))
            if j is not None and j < L:
                return tuple(context[j : min(j + k, L)]), n
        return (), 0

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> DraftProposal:
        """Draft tokens copied from the context; no q rows."""
        if k <= 0:
            return EMPTY
        if len(context) != len(self._tokens):
            self.observe(context)
        tokens, n = self.match(context, k)
        self.last_match = n
        return DraftProposal(tokens, None, self.name) if tokens else EMPTY

    def pending(self, context: Sequence[int]) -> int:
        """Nothing to evaluate: the index follows the context in `observe`."""
        return 0
