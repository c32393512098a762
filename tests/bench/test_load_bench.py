"""`localspec bench load`: the side-by-side schedule, pooling of repeats, and a real run of
four real servers (SmolLM2, `--parallel 1,2` × `--drafter none,ngram`) under the official client."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from localspec.bench.load import LevelResult, per_round, schedule, table
from localspec.cli import main

KEYS = [(1, "none"), (1, "adaptive"), (4, "none"), (4, "adaptive")]


def test_side_by_side_runs_every_server_once_per_level_and_rotates_the_first() -> None:
    plan = schedule(KEYS, [1, 2, 4], repeats=2)
    assert len(plan) == 2 * 3 * len(KEYS)
    by_level = Counter((r, c) for r, c, _ in plan)
    assert set(by_level.values()) == {len(KEYS)}
    # within a level the servers follow each other without repeats
    for i in range(0, len(plan), len(KEYS)):
        assert sorted(k for *_, k in plan[i : i + len(KEYS)]) == sorted(KEYS)
    firsts = [plan[i][2] for i in range(0, len(plan), len(KEYS))]
    assert set(firsts) == set(KEYS)  # no server is always measured first


def test_sequential_keeps_each_server_together() -> None:
    plan = schedule(KEYS, [1, 2], repeats=2, sequential=True)
    servers = [k for *_, k in plan]
    assert servers == [k for k in KEYS for _ in range(4)]


def test_repeats_pool_tokens_walls_and_means() -> None:
    a = LevelResult(1, "none", 2, 4, 256, 20.0, [5.0] * 4, [0.5] * 4, 0.0, 1.0, 1.0)
    b = LevelResult(1, "none", 2, 4, 256, 30.0, [7.0] * 4, [0.7] * 4, 2.0, 1.0, 3.0)
    a.add(b)
    assert (a.requests, a.completion_tokens, a.wall_s) == (8, 512, 50.0)
    assert a.tokens_per_s == pytest.approx(512 / 50)
    assert (a.mean_gamma, a.mean_al) == (1.0, 2.0) and len(a.latencies_s) == 8
    assert a.rounds_tok_s == [12.8, pytest.approx(256 / 30, abs=1e-3)]  # each round kept, in order


def test_per_round_ratios_pair_each_round_with_the_same_server_without_speculation() -> None:
    def level(p: int, d: str, walls: list[float]) -> LevelResult:
        rounds = [LevelResult(p, d, 4, 8, 400, w) for w in walls]
        for r in rounds[1:]:
            rounds[0].add(r)
        return rounds[0]

    rows = [level(1, "none", [40.0, 80.0]), level(4, "none", [20.0, 40.0]), level(4, "adaptive", [25.0, 32.0])]
    assert per_round(rows) == {(4, "adaptive"): {4: [pytest.approx(0.8), pytest.approx(1.25)]}}
    text = table(rows)
    assert "| --parallel 4 adaptive | 0.80 · 1.25 |" in text  # a load change between rounds stays visible
    assert table(rows[:2]).count("| --parallel") == 2  # no per-round table without a speculating server


def test_table_gives_each_server_its_ratio_to_the_one_at_a_time_server_without_speculation() -> None:
    rows = [LevelResult(1, "none", 4, 8, 400, 40.0), LevelResult(4, "none", 4, 8, 400, 25.0)]
    text = table(rows)
    assert "| --parallel 4 none | 16.00 | 1.60× |" in text and "| --parallel 1 none | 10.00 | 1.00× |" in text


@pytest.mark.models
@pytest.mark.slow
def test_a_real_side_by_side_run_writes_every_level(smollm2_path: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "load.json"
    rc = main(["bench", "load", "-m", str(smollm2_path), "-md", "none", "--parallel", "1,2", "--drafters", "none,ngram",
               "--concurrency", "1,2", "-n", "8", "--requests-per-client", "1", "--repeat", "2", "-c", "1024",
               "--json", str(out)])
    assert rc == 0
    levels = json.loads(out.read_text())["levels"]
    assert {(lv["parallel"], lv["drafter"], lv["concurrency"]) for lv in levels} == {
        (p, d, c) for p in (1, 2) for d in ("none", "ngram") for c in (1, 2)}
    for lv in levels:
        assert lv["requests"] == 2 * lv["concurrency"]  # both repeats pooled
        assert 0 < lv["completion_tokens"] <= 8 * lv["requests"] and lv["tokens_per_s"] > 0
    two = [lv for lv in levels if lv["parallel"] == 2 and lv["concurrency"] == 2]
    assert all(lv["mean_batch"] > 1.0 for lv in two)  # the --parallel 2 server really batched them
    printed = capsys.readouterr().out
    assert "| --parallel 2 ngram |" in printed and "Per round" in printed
    assert all(len(lv["rounds_tok_s"]) == 2 for lv in levels)
