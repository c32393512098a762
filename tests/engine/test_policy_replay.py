"""The replay of the adaptive policy on recorded token streams (tests/engine/replay_policy.py):
its accounting, on streams whose outcome is known."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.engine.adaptive import PolicyState
from tests.engine.replay_policy import Stream, bench_order, replay, replay_one

B = [2.03, 2.51, 3.10, 3.74]  # an AVX-512 CPU's verify cost of 2..5 rows ÷ one row


def _stream(prompt: list[int], output: list[int], temp: float = 0.0, cat: str = "c", q: str = "q") -> Stream:
    return Stream(cat, q, 0, temp, tuple(prompt), tuple(output))


def test_a_fixed_arm_accepts_exactly_the_guesses_the_stream_confirms() -> None:
    text = list(range(100, 140))
    # the reply copies the prompt's first 20 tokens after one new token
    s = _stream(text, [7, *text[:20]])
    r = replay_one(s, PolicyState(), B, fixed=4, noise=0.0)
    assert r.tokens == 21
    assert r.accepted + r.steps == r.tokens  # every step commits its accepted drafts + one
    # "7", "100", "101" are plain steps (no earlier "7 100"); then "100 101" matches and every
    # draft is right: 4 + 4 + 4 and 2 (the last step may draft only what is left but one)
    assert (r.steps, r.drafted, r.accepted) == (7, 14, 14)
    assert r.seconds == pytest.approx(0.04 * (3 + 3 * B[3] + B[1]) + 7 * 0.0004)


def test_the_policy_drafts_on_a_copying_reply_and_gains() -> None:
    text = [int(x) for x in np.random.default_rng(1).integers(1000, 5000, 300)]
    s = _stream(text, text[:200])  # the reply repeats the prompt
    r = replay_one(s, PolicyState(), B, noise=0.0)
    assert r.drafted > 50
    assert r.plain_seconds / r.seconds > 1.3


def test_without_matches_the_policy_costs_nothing() -> None:
    prompt = list(range(100, 200))
    out = list(range(1000, 1100))  # no n-gram of the reply occurs before it
    r = replay_one(_stream(prompt, out), PolicyState(), B, noise=0.0)
    assert r.drafted == 0
    assert r.seconds == pytest.approx(r.plain_seconds)


def test_bench_order_goes_round_robin_over_categories_with_turns_in_order() -> None:
    streams = [
        Stream("a", "a1", 1, 0.0, (1,), (2,)), Stream("a", "a1", 0, 0.0, (1,), (2,)),
        Stream("a", "a2", 0, 0.0, (1,), (2,)), Stream("b", "b1", 0, 0.8, (1,), (2,)),
        Stream("b", "b1", 0, 0.0, (1,), (2,)),
    ]
    order = [(s.question_id, s.temperature, s.turn) for s in bench_order(streams)]
    assert order == [("a1", 0.0, 0), ("a1", 0.0, 1), ("b1", 0.0, 0), ("b1", 0.8, 0), ("a2", 0.0, 0)]


def test_replay_totals_each_temperature_and_category_apart() -> None:
    text = list(range(100, 160))
    streams = [_stream(text, text[:30], 0.0, "copy", "c1"), _stream(text, list(range(900, 930)), 0.8, "new", "n1")]
    totals = replay(streams, B, noise=0.0)
    assert set(totals) == {(0.0, "copy"), (0.8, "new")}
    assert totals[(0.8, "new")].drafted == 0
    assert totals[(0.0, "copy")].tokens == 30
