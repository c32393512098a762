"""`FakeBackend`: a tiny deterministic "model" for fast tests of the loop and front ends.

Tokens are bytes (id = byte value) plus special ids: 256 = EOS, 257 = BOS. The model
continues a script: after the context's longest suffix found in `script`, it puts a
large logit on the script's next byte (EOS at its end), over seeded noise. A drafter
fake with `error_rate` > 0 predicts a wrong byte at some positions, so acceptance < 1.
Every decode/truncate call is recorded so rollback can be checked exactly.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

EOS_ID = 256
BOS_ID = 257
N_VOCAB = 260


class FakeBackend:
    """Implements `ModelBackend` without weights."""

    def __init__(
        self,
        script: str = "Hello! I am a fake model. I repeat my script and then stop.",
        *,
        name: str = "fake",
        n_ctx: int = 2048,
        error_rate: float = 0.0,
        confidence: float = 12.0,
        noise: float = 1.0,
        seed: int = 0,
        decode_delay_s: float = 0.0,
        row_delay_s: float = 0.0,
        chat_template: str | None = None,
        n_seq: int = 1,
    ) -> None:
        self.name = name
        self.n_vocab = N_VOCAB
        self.n_ctx = n_ctx
        self.numerics = "exact"  # a lookup table: every row is computed the same way
        self.script = script.encode("utf-8")
        self.error_rate = error_rate
        self.confidence = confidence
        self.decode_delay_s = decode_delay_s
        self.row_delay_s = row_delay_s
        """Extra seconds per row of a call (a CPU's cost per verify row)."""
        self.n_seq = n_seq
        self._views: dict[int, FakeBackend] = {0: self}
        self.batches: list[list[tuple[int, int]]] = []
        """Per `decode_many` call: (sequence, rows) of each part."""
        self.seq_id = 0
        self._noise = np.random.default_rng(seed).normal(0.0, noise, size=(997, N_VOCAB)).astype(np.float32)
        self._seed = seed
        self.tokens: list[int] = []
        self.t_decode_s = 0.0
        self.calls: list[tuple[str, int, int]] = []
        """("decode", n_past_before, n_tokens) / ("truncate", n_past_before, n_past_after)."""
        self._chat_template = chat_template
        self._out = np.zeros((0, N_VOCAB), dtype=np.float32)
        self.closed = False

    @property
    def n_past(self) -> int:
        """Positions in the fake KV cache."""
        return len(self.tokens)

    def _next_byte(self, prefix: Sequence[int]) -> int:
        """The script's continuation of `prefix` (EOS at the end of the script)."""
        data = bytes(t for t in prefix[-64:] if t < 256)
        s = self.script
        for n in range(min(len(data), len(s)), 0, -1):
            idx = s.rfind(data[-n:])
            while idx >= 0 and idx + n > len(s):
                idx = s.rfind(data[-n:], 0, idx)
            if idx >= 0:
                j = idx + n
                return s[j] if j < len(s) else EOS_ID
        return s[0] if s else EOS_ID

    def _row(self, prefix: Sequence[int]) -> npt.NDArray[np.float32]:
        pos = len(prefix)
        row: npt.NDArray[np.float32] = self._noise[(pos * 31 + (prefix[-1] if prefix else 0)) % 997].copy()
        tok = self._next_byte(prefix)
        if self.error_rate > 0:
            h = ((pos + 1) * 2654435761 + self._seed * 97) % 1000 / 1000.0
            if h < self.error_rate and tok != EOS_ID:
                tok = (tok + 1) % 256
        row[tok] += self.confidence
        return row

    def decode(self, tokens: Sequence[int], all_logits: bool = False) -> npt.NDArray[np.float32]:
        """Append tokens; rows of logits for them (or the last)."""
        if not tokens:
            raise ValueError("decode needs at least one token")
        if self.n_past + len(tokens) > self.n_ctx:
            from localspec.errors import ContextOverflowError

            raise ContextOverflowError(f"{self.name}: context of {self.n_ctx} exceeded")
        t0 = time.perf_counter()
        if self.decode_delay_s or self.row_delay_s:
            time.sleep(self.decode_delay_s + self.row_delay_s * len(tokens))
        self.calls.append(("decode", self.n_past, len(tokens)))
        rows = []
        start = len(self.tokens)
        self.tokens.extend(int(t) for t in tokens)
        positions = range(start + 1, len(self.tokens) + 1) if all_logits else [len(self.tokens)]
        for end in positions:
            rows.append(self._row(self.tokens[:end]))
        self._out = np.stack(rows)
        self.t_decode_s += time.perf_counter() - t0
        return self._out

    def sequence(self, i: int) -> FakeBackend:
        """The view of sequence i: the same script and noise, its own cache."""
        if not 0 <= i < self.n_seq:
            raise ValueError(f"sequence {i} out of range: this fake holds {self.n_seq}")
        view = self._views.get(i)
        if view is None:
            view = copy.copy(self)
            view.seq_id, view.tokens, view.calls, view.t_decode_s = i, [], [], 0.0
            self._views[i] = view
        return view

    def decode_many(self, parts: Sequence[tuple[FakeBackend, Sequence[int], bool]]) -> list[npt.NDArray[np.float32]]:
        """Each part's decode as one call: the delay once, rows of every part."""
        rows = sum(len(t) for _, t, _ in parts)
        if self.decode_delay_s or self.row_delay_s:
            time.sleep(self.decode_delay_s + self.row_delay_s * rows)
        self.batches.append([(v.seq_id, len(t)) for v, t, _ in parts])
        out = []
        for view, tokens, all_logits in parts:
            d, r = view.decode_delay_s, view.row_delay_s
            view.decode_delay_s = view.row_delay_s = 0.0
            try:
                logits = view.decode(tokens, all_logits=all_logits)
            finally:
                view.decode_delay_s, view.row_delay_s = d, r
            out.append(logits.copy() if all_logits else logits[:0])
        return out

    def truncate(self, n_past: int) -> None:
        """Drop positions >= n_past."""
        if n_past < len(self.tokens):
            self.calls.append(("truncate", len(self.tokens), max(0, n_past)))
            del self.tokens[max(0, n_past) :]

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Bytes of the text (no BOS: like Qwen)."""
        return list(text.encode("utf-8"))

    def token_bytes(self, token: int) -> bytes:
        """One byte, or b"" for specials."""
        return bytes([token]) if 0 <= token < 256 else b""

    def is_eog(self, token: int) -> bool:
        """EOS ends generation."""
        return token == EOS_ID

    @property
    def chat_template(self) -> str | None:
        """None: the engine falls back to ChatML."""
        return self._chat_template

    @property
    def bos_token(self) -> str:
        """No BOS text."""
        return ""

    @property
    def eos_token(self) -> str:
        """No EOS text."""
        return ""

    def close(self) -> None:
        """Mark closed."""
        self.closed = True
