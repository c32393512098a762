"""Tools for checking losslessness on real weights: an independent plain greedy loop, a
target backend that records every call the engine makes, and the replay that explains a
divergence by evaluating the same position in its verify-batch shape and as one row.

Used by tests/engine/test_lossless.py and tests/engine/measure_numerics.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from localspec.engine.backend import ModelBackend


def plain_greedy(backend: ModelBackend, prompt: Sequence[int], max_tokens: int) -> list[int]:
    """What the target alone writes at T=0, the way llama.cpp's own loop does it: the whole
    prompt in one batch (chunked by n_batch), then one row per token; argmax with the lowest
    index on ties; stops before an end-of-generation token. Independent of localspec's loop."""
    backend.truncate(0)
    row = backend.decode(list(prompt))[-1]
    out: list[int] = []
    while len(out) < max_tokens:
        tok = int(np.argmax(row))
        if backend.is_eog(tok):
            break
        out.append(tok)
        if len(out) < max_tokens:
            row = backend.decode([tok])[-1]
    backend.truncate(0)
    return out


class RecordingBackend:
    """Wraps a real backend and records each `decode` and `truncate` the engine makes, so a
    generation's exact sequence of batch shapes can be replayed later."""

    def __init__(self, inner: ModelBackend) -> None:
        self.inner = inner
        self.calls: list[tuple[Any, ...]] = []
        """("decode", n_past_before, tokens, all_logits) or ("truncate", n_past)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def tokens(self) -> list[int]:
        """The wrapped backend's KV record."""
        return self.inner.tokens

    @property
    def n_past(self) -> int:
        """The wrapped backend's KV length."""
        return self.inner.n_past

    def decode(self, tokens: Sequence[int], all_logits: bool = False) -> Any:
        """Record, then evaluate on the wrapped backend."""
        self.calls.append(("decode", self.inner.n_past, tuple(int(t) for t in tokens), all_logits))
        return self.inner.decode(tokens, all_logits)

    def truncate(self, n_past: int) -> None:
        """Record, then roll the wrapped backend back."""
        self.calls.append(("truncate", n_past))
        self.inner.truncate(n_past)

    def start(self) -> None:
        """Empty the cache and the record: the next generation is recorded from position 0."""
        self.calls.clear()
        self.truncate(0)


@dataclass(frozen=True)
class Divergence:
    """Where speculative output parts from plain decoding, evaluated both ways."""

    index: int
    """Output position of the first differing token."""
    plain_token: int
    spec_token: int
    batch_rows: int
    """Rows of the verify batch that produced the speculative token."""
    row: int
    """Its row inside that batch."""
    argmax_in_batch: int
    """Target argmax at that position, recomputed in the same batch after replaying the calls."""
    argmax_one_row: int
    """Target argmax at that position, same cache, rows of the batch evaluated one at a time."""
    argmax_all_rows_alone: int
    """Target argmax at that position when the whole recorded history (prompt, every verify
    batch, every rollback) is replayed with each row evaluated alone: same tokens, same
    positions, only the batch shapes differ."""
    argmax_plain_shapes: int
    """Target argmax at that position with the same tokens in plain decoding's shapes: the
    prompt in one batch, then one row per output token."""
    margin: float
    """Top-1 minus top-2 logit of the one-row evaluation."""

    @property
    def flips_locally(self) -> bool:
        """This step's batch shape alone flips the argmax (the cache before it held fixed)."""
        return self.argmax_one_row != self.argmax_in_batch

    @property
    def level(self) -> str:
        """The smallest change of batch shapes that flips the argmax: `step` (this verify
        batch's rows alone), `history` (every recorded row alone) or `prompt` (the prompt in
        one batch as plain decoding does, the rest alone); `none` if no reshaping flips it."""
        if self.flips_locally:
            return "step"
        if self.argmax_all_rows_alone != self.argmax_in_batch:
            return "history"
        if self.argmax_plain_shapes != self.argmax_in_batch:
            return "prompt"
        return "none"

    @property
    def explained(self) -> bool:
        """Replaying the engine's calls reproduces its token, the same tokens in plain
        decoding's shapes reproduce plain decoding's token, and reshaping the batches flips
        the argmax: the parting is the target's batched-vs-one-row numerics, not the loop."""
        return (self.argmax_in_batch == self.spec_token and self.argmax_plain_shapes == self.plain_token
                and self.level != "none")


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """First index where two token lists differ (a length difference counts)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def explain(recorder: RecordingBackend, prompt: Sequence[int], plain: Sequence[int], spec: Sequence[int]) -> Divergence:
    """Replay the recorded calls up to the verify batch that produced the first differing
    token and evaluate that position in its batch, with this step's rows alone, with every
    recorded row alone, and in plain decoding's shapes (prompt in one batch, then one row per
    token; the tokens before `i` are the same in both outputs)."""
    i = first_divergence(plain, spec)
    assert i is not None and i < len(plain) and i < len(spec), "no token-level divergence to explain"
    pos = len(prompt) + i - 1  # the KV position whose logits chose output token i
    calls = recorder.calls
    at = max(
        n for n, c in enumerate(calls)
        if c[0] == "decode" and c[3] and c[1] <= pos < c[1] + len(c[2])
    )
    inner = recorder.inner
    _replay(inner, calls[:at], rows_alone=False)
    _, n_past, batch, _ = calls[at]
    assert inner.n_past == n_past
    row = pos - n_past
    in_batch = int(np.argmax(inner.decode(list(batch), all_logits=True)[row]))
    inner.truncate(n_past)
    one = _rows_alone(inner, batch[: row + 1])
    _replay(inner, calls[:at], rows_alone=True)
    all_alone = _rows_alone(inner, batch[: row + 1])
    inner.truncate(0)
    plain_shapes = inner.decode(list(prompt))[-1].copy()  # output token 0 comes from this row
    if i:
        plain_shapes = _rows_alone(inner, spec[:i])
    inner.truncate(0)
    top = np.sort(one.astype(np.float64))
    return Divergence(
        index=i, plain_token=int(plain[i]), spec_token=int(spec[i]), batch_rows=len(batch), row=row,
        argmax_in_batch=in_batch, argmax_one_row=int(np.argmax(one)),
        argmax_all_rows_alone=int(np.argmax(all_alone)), argmax_plain_shapes=int(np.argmax(plain_shapes)),
        margin=float(top[-1] - top[-2]),
    )


def _replay(backend: ModelBackend, calls: Sequence[tuple[Any, ...]], *, rows_alone: bool) -> None:
    """Re-run recorded calls from an empty cache, as recorded or with every row alone."""
    backend.truncate(0)
    for c in calls:
        if c[0] == "truncate":
            backend.truncate(c[1])
            continue
        assert backend.n_past == c[1], "replay lost track of the cache"
        if rows_alone:
            _rows_alone(backend, c[2])
        else:
            backend.decode(list(c[2]), c[3])


def _rows_alone(backend: ModelBackend, tokens: Sequence[int]) -> np.ndarray:
    """Evaluate `tokens` one row per decode; the last row's logits (a copy)."""
    row = np.empty(0, dtype=np.float32)
    for tok in tokens:
        row = backend.decode([tok])[-1].copy()
    return row
