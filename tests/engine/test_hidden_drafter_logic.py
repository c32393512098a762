"""The EAGLE-3 and DFlash/DSpark drafters' own logic over a scripted driver (fast; the real
driver on llama.cpp is tested in test_hidden_drafters.py): token choice, q rows at T>0,
p_min and DSpark's confidence cut, the block limit, the drafting positions dropped after
every proposal, and the costs the adaptive policy reads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from localspec.engine.drafters import DFlashDrafter, Eagle3Drafter, hidden_drafter
from localspec.engine.drafters.features import fit_row
from localspec.types import SamplingParams

V = 8
GREEDY = SamplingParams()


class ScriptedModel:
    """A FeatureDraftModel whose logits rows put most mass on `script[i]` at draft position i."""

    name = "scripted"
    n_vocab = V

    def __init__(self, script: Sequence[int], conf: Sequence[float] | None = None, block: int = 6) -> None:
        self.script = list(script)
        self.conf = conf
        self.block = block
        self.tokens: list[int] = []
        self.log: list[tuple[int, float]] = []
        self.pending = 0
        self.drafting = False
        self.fed: list[int] = []
        self.ended = 0

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def truncate(self, n_past: int) -> None:
        del self.tokens[n_past:]

    def pending_rows(self) -> int:
        return self.pending

    def _row(self, i: int) -> npt.NDArray[np.float32]:
        row = np.zeros(V, dtype=np.float32)
        row[self.script[i % len(self.script)]] = 3.0
        return row

    def eagle3_start(self, context: Sequence[int]) -> npt.NDArray[np.float32]:
        self.drafting, self.i = True, 0
        self.log.append((max(1, self.pending), 0.01))
        self.pending = 0
        return self._row(0)

    def eagle3_next(self, token: int) -> npt.NDArray[np.float32]:
        assert self.drafting
        self.fed.append(token)
        self.i += 1
        self.log.append((1, 0.002))
        return self._row(self.i)

    def end_draft(self) -> None:
        self.drafting = False
        self.ended += 1

    def max_block(self) -> int:
        return self.block

    def dflash_block(self, context: Sequence[int], k: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32] | None]:
        assert k <= self.block
        self.log.append((k + 1, 0.01))
        conf = None if self.conf is None else np.asarray(self.conf[:k], dtype=np.float32)
        return np.stack([self._row(i) for i in range(k)]), conf

    def close(self) -> None:
        pass


def test_eagle3_chains_its_own_drafts_and_ends_the_draft() -> None:
    m = ScriptedModel([5, 1, 4, 2])
    d = Eagle3Drafter(m, V)
    p = d.propose([0, 1, 2], 4, GREEDY, np.random.default_rng(0))
    assert p.tokens == (5, 1, 4, 2) and p.drafter == "eagle3" and p.logits is None
    assert m.fed == [5, 1, 4]  # each draft feeds the next call
    assert m.ended == 1 and not m.drafting
    assert d.sequential and [n for n, _ in d.decode_log] == [1, 1, 1, 1]


def test_eagle3_p_min_stops_the_chain() -> None:
    m = ScriptedModel([5, 1])
    d = Eagle3Drafter(m, V)
    p = d.propose([0, 1], 4, GREEDY, np.random.default_rng(0), p_min=0.9)  # softmax of 3 vs 0s: ~0.74
    assert p.tokens == () and m.ended == 1


def test_sampled_drafts_carry_the_rows_q_was_built_from() -> None:
    for d in (Eagle3Drafter(ScriptedModel([3, 6]), V), DFlashDrafter(ScriptedModel([3, 6]), V)):
        p = d.propose([0, 1], 3, SamplingParams(temperature=1.0), np.random.default_rng(1))
        assert p.logits is not None and p.logits.shape == (len(p.tokens), V)
        assert all(p.logits[i].argmax() in (3, 6) for i in range(len(p.tokens)))


def test_dflash_is_one_block_capped_by_its_size() -> None:
    m = ScriptedModel([2, 7, 1], block=2)
    d = DFlashDrafter(m, V)
    p = d.propose([0, 1], 5, GREEDY, np.random.default_rng(0))
    assert p.tokens == (2, 7) and p.drafter == "dflash" and not d.sequential
    assert d.decode_log == [(3, 0.01)]
    assert d.pending([0, 1, 2]) == 0 + 2 + 1  # nothing pending + the last block


def test_dspark_confidence_cuts_the_draft_only_with_p_min() -> None:
    m = ScriptedModel([2, 7, 1, 4], conf=[0.9, 0.8, 0.3, 0.9])
    d = hidden_drafter("dspark", m, V)
    assert d.name == "dspark"
    assert d.propose([0, 1], 4, GREEDY, np.random.default_rng(0), p_min=0.5).tokens == (2, 7)
    assert d.propose([0, 1], 4, GREEDY, np.random.default_rng(0)).tokens == (2, 7, 1, 4)
    assert isinstance(d, DFlashDrafter) and d.last_confidence == pytest.approx((0.9, 0.8, 0.3, 0.9))


def test_begin_keeps_only_the_prefix_the_context_shares() -> None:
    m = ScriptedModel([1])
    m.tokens = [4, 5, 6, 7]
    Eagle3Drafter(m, V).begin([4, 5, 9, 9, 9])
    assert m.tokens == [4, 5]
    m.tokens = [4, 5, 6, 7]
    DFlashDrafter(m, V).begin([4, 5, 6, 7])  # the last context token is not evaluated yet
    assert m.tokens == [4, 5, 6]


def test_rows_fit_the_acceptance_vocabulary() -> None:
    row = np.arange(6, dtype=np.float32)
    assert fit_row(row, 4).tolist() == [0, 1, 2, 3]
    padded = fit_row(row, 8)
    assert padded.shape == (8,) and np.isneginf(padded[6:]).all()


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="not a hidden-state drafter"):
        hidden_drafter("mtp", ScriptedModel([1]), V)
