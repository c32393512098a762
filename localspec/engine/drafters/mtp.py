"""`MtpDrafter`: the target drafts for itself with its multi-token-prediction (nextn) layers.

No second model and no tokenizer match: the head reads the target's own hidden states
(engine/llama/mtp.py). A proposal catches the head up on the committed tokens it has not
seen (one batched decode that also yields the first draft), then adds one decode per further
draft token; greedy drafts take the argmax, sampled ones return the logits rows q came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from localspec.engine.backend import KVCache, common_prefix_len
from localspec.engine.constraint import Guide
from localspec.engine.drafters.base import EMPTY, DraftProposal, pick_token
from localspec.types import MAX_GAMMA, SamplingParams


class MtpHead(Protocol):
    """What the drafter needs of an MTP head (engine/llama/mtp.LlamaMtpHead)."""

    tokens: list[int]
    n_vocab: int
    t_decode_s: float

    @property
    def n_past(self) -> int:
        """Rows held by the head's cache."""
        ...

    def truncate(self, n_past: int) -> None:
        """Drop rows >= n_past."""
        ...

    def catch_up(self, context: Sequence[int], upto: int) -> int:
        """Add rows n_past..upto-1 of `context` (target hidden states); rows added."""
        ...

    def draft_row(self, context: Sequence[int]) -> npt.NDArray[np.float32]:
        """Catch up, then logits [V] for the token after `context`."""
        ...

    def chain_row(self, token: int) -> npt.NDArray[np.float32]:
        """Feed a drafted token; logits [V] for the one after it."""
        ...

    def close(self) -> None:
        """Free the head (the target stays)."""
        ...


class MtpDrafter:
    """Drafts with the target's own nextn layers (llama.cpp's `draft-mtp`)."""

    name = "mtp"
    prior_acceptance = 0.7
    """Published MTP acceptance is high (SPEED-Bench, Qwen3.5-9B: AL 4.15 at T=0)."""
    sequential = True
    """Each draft token after the first is one more decode of the head."""
    kv_cache: KVCache | None = None
    """None: the head keeps only rows computed from the target's hidden states and drops its
    draft rows itself, so the engine's rollback has nothing to drop."""

    def __init__(self, head: MtpHead, n_vocab: int | None = None) -> None:
        self.head = head
        self.n_vocab = n_vocab or head.n_vocab
        self._rows = np.empty((MAX_GAMMA, self.n_vocab), dtype=np.float32)
        self.decode_log: list[tuple[int, float]] = []
        """(tokens, seconds) of each head decode of the last begin/propose."""

    def pending(self, context: Sequence[int]) -> int:
        """Rows the head must evaluate before it can draft (its lag behind `context`)."""
        return len(context) - self._valid(context)

    def begin(self, context: Sequence[int]) -> None:
        """Keep the head's rows that `context` still starts with and catch it up on the prompt
        (the target holds `context[:-1]` by now)."""
        self.decode_log.clear()
        self.head.truncate(self._valid(context))
        t0 = self.head.t_decode_s
        n = self.head.catch_up(context, len(context) - 1)
        if n:
            self.decode_log.append((n, self.head.t_decode_s - t0))

    guided = True
    """`propose` takes `guide=` (engine/constraint.py): drafts from grammar-masked rows."""

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0,
        *, guide: Guide | None = None,
    ) -> DraftProposal:
        """Greedy or sampled drafts; stops early when its own probability < p_min. With a
        `guide`, every row is masked by the grammar first and each draft advances it."""
        if k <= 0:
            return EMPTY
        k = min(k, MAX_GAMMA)
        h, log = self.head, self.decode_log
        log.clear()
        h.truncate(self._valid(context))
        keep = len(context)  # rows up to the last committed token are computed from target states
        t0 = h.t_decode_s
        rows = len(context) - h.n_past
        row = h.draft_row(context)[: self.n_vocab]
        log.append((rows, h.t_decode_s - t0))
        tokens: list[int] = []
        try:
            for i in range(k):
                if guide is not None:
                    row = guide.mask_row(row)
                tok = pick_token(row, params, rng, p_min)
                if tok is None:
                    break
                if not params.greedy:
                    self._rows[i] = row  # the next decode overwrites `row`
                if guide is not None and not guide.push(tok):
                    break
                tokens.append(tok)
                if i + 1 < k:
                    t0 = h.t_decode_s
                    row = h.chain_row(tok)[: self.n_vocab]
                    log.append((1, h.t_decode_s - t0))
        finally:
            h.truncate(keep)  # draft rows were fed the head's own states: never reuse them
        logits = None if params.greedy or not tokens else self._rows[: len(tokens)]
        return DraftProposal(tuple(tokens), logits, self.name)

    def observe(self, context: Sequence[int]) -> None:
        """Nothing to do: the head holds committed rows only (rejections never reach it)."""

    def close(self) -> None:
        """Free the head's context (the target stays loaded)."""
        self.head.close()

    def _valid(self, context: Sequence[int]) -> int:
        """Head rows that still match `context` (a row at p needs x_p; the target's h_{p-1}
        is the same for the same prefix)."""
        return common_prefix_len(self.head.tokens, context)
