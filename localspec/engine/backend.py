"""The model backend protocol the speculative loop runs on (llama.cpp in production,
`FakeBackend` in unit tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt


class KVCache(Protocol):
    """A KV cache as rollback sees it: which tokens it holds, and a way to drop a suffix.

    `tokens` is exactly what the cache holds, positions 0..n_past-1.
    """

    tokens: list[int]

    @property
    def n_past(self) -> int:
        """Number of positions in the KV cache."""
        ...

    def truncate(self, n_past: int) -> None:
        """Drop KV positions >= n_past (rollback)."""
        ...


class Tokenizer(Protocol):
    """The target's tokenizer and chat template: what validating a request needs."""

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text to token ids."""
        ...

    @property
    def chat_template(self) -> str | None:
        """The GGUF's Jinja chat template, if any."""
        ...

    @property
    def bos_token(self) -> str:
        """Text of the BOS token ("" if none)."""
        ...

    @property
    def eos_token(self) -> str:
        """Text of the EOS token ("" if none)."""
        ...


class ModelBackend(KVCache, Tokenizer, Protocol):
    """One loaded model with one KV cache (sequence 0) and its tokenizer.

    `decode` appends at n_past; `truncate` drops everything from a position on. The logits
    returned by `decode` are a view valid only until the next `decode` (consume or copy first).
    """

    name: str
    n_vocab: int
    n_ctx: int
    numerics: str
    """The numerics mode this model really runs in (`exact` or `fast`, types.NUMERICS_MODES)."""
    t_decode_s: float
    """Cumulative seconds spent inside the model's decode call (for overhead accounting)."""

    def decode(self, tokens: Sequence[int], all_logits: bool = False) -> npt.NDArray[np.float32]:
        """Evaluate `tokens` at positions n_past..; return logits rows: [len(tokens), V] when
        `all_logits`, else [1, V] for the last token."""
        ...

    def token_bytes(self, token: int) -> bytes:
        """The raw bytes of one token's piece (special tokens render as b"")."""
        ...

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, ...)."""
        ...

    def close(self) -> None:
        """Free the model and context."""
        ...


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):  # the common case (same conversation) at C speed
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
