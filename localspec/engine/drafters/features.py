"""What the drafters that read the target's hidden states (eagle3.py, dflash.py) need from
their native driver (engine/llama/hidden.py), and the token choice they share.

The driver is also the drafter's KV cache: `tokens` are the target tokens whose features it
holds, and `truncate` drops features and draft KV entries together, so the engine's
rollback (engine/cache.rollback) treats it like a draft model's cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from localspec.engine.backend import KVCache
from localspec.types import SamplingParams


class FeatureDraftModel(KVCache, Protocol):
    """A drafter model fed with the target's hidden states (one loaded GGUF and its context)."""

    name: str
    n_vocab: int
    log: list[tuple[int, float]]
    """(tokens, seconds) of each call into the draft context since it was last cleared."""

    def pending_rows(self) -> int:
        """Captured target feature rows not yet fed to the draft context."""
        ...

    def eagle3_start(self, context: Sequence[int]) -> npt.NDArray[np.float32]:
        """EAGLE-3: feed what is pending; the logits row of the first draft token (a view)."""
        ...

    def eagle3_next(self, token: int) -> npt.NDArray[np.float32]:
        """EAGLE-3: feed a drafted token; the next logits row (a view)."""
        ...

    def end_draft(self) -> None:
        """Drop the drafting positions from the draft KV."""
        ...

    def max_block(self) -> int:
        """DFlash/DSpark: the most draft tokens one block gives."""
        ...

    def dflash_block(
        self, context: Sequence[int], k: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32] | None]:
        """DFlash/DSpark: feed what is pending, decode one block; ([k, V] logits, DSpark confidences)."""
        ...

    def close(self) -> None:
        """Free the drafter's model and context."""
        ...


def fit_row(row: npt.NDArray[np.float32], n_vocab: int) -> npt.NDArray[np.float32]:
    """`row` cut or padded (with -inf: never proposed) to the `n_vocab` columns acceptance uses."""
    if row.shape[-1] >= n_vocab:
        return row[..., :n_vocab]
    pad = np.full(row.shape[:-1] + (n_vocab - row.shape[-1],), -np.inf, dtype=np.float32)
    return np.concatenate([row, pad], axis=-1)
