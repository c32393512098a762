"""The runner and summary on fake models: interleaving, multi-turn, seeds, Ctrl-C."""

from __future__ import annotations

from typing import Any

import pytest

from localspec.bench.report import build_report, markdown_tables, table_rows
from localspec.bench.runner import BenchConfig, make_arms, planned_units, run_bench
from localspec.bench.summary import ALL, summarize
from localspec.engine import Engine, Generation, GenerationRequest
from localspec.engine.fake import FakeBackend
from tests.bench.conftest import PROMPTS, TEMPLATE


class SpyEngine:
    """Delegates to a real Engine over fakes and records every request."""

    def __init__(self) -> None:
        self.engine = Engine(
            FakeBackend(chat_template=TEMPLATE),
            FakeBackend(error_rate=0.25, seed=3, chat_template=TEMPLATE),
        )
        self.requests: list[GenerationRequest] = []

    def generate(self, request: GenerationRequest) -> Generation:
        self.requests.append(request)
        return self.engine.generate(request)


CONFIG = BenchConfig(gammas=(1, 3), temperatures=(0.0, 0.8), drafters=("model", "ngram"),
                     max_tokens=12, warmup_tokens=0)


@pytest.fixture(scope="module")
def spy_run() -> tuple[SpyEngine, Any]:
    spy = SpyEngine()
    return spy, run_bench(spy, PROMPTS, CONFIG)  # type: ignore[arg-type]


def test_make_arms_plain_first_adaptive_once_at_max_gamma() -> None:
    keys = [a.key for a in make_arms(["model", "ngram", "adaptive"], [1, 2, 4])]
    assert keys == ["plain", "model@1", "model@2", "model@4", "ngram@1", "ngram@2", "ngram@4", "adaptive@4"]


def test_run_bench_runs_every_arm_turn_and_temperature(spy_run: tuple[SpyEngine, Any]) -> None:
    spy, run = spy_run
    units = len(CONFIG.arms) * len(CONFIG.temperatures)
    assert len(run.samples) == units * 4  # 4 turns in the three prompts
    assert len(run.complete_samples()) == len(run.samples) and not run.interrupted
    assert planned_units(PROMPTS, CONFIG) == units * 4 * 12


def test_run_bench_interleaves_arms_per_prompt_with_rotation(spy_run: tuple[SpyEngine, Any]) -> None:
    _, run = spy_run
    first = [(s.temperature, s.arm) for s in run.samples if s.question_id == "a-1"]
    second = [(s.temperature, s.arm) for s in run.samples if s.question_id == "b-1"]
    assert first[0] == (0.0, "plain")
    assert second[0] == first[1] and second[-1] == first[0]  # b-1 runs second: rotated by 1
    assert [p.question_id for p in run.prompts] == ["a-1", "b-1", "a-2"]  # round-robin over categories


def test_run_bench_multiturn_feeds_each_answer_back(spy_run: tuple[SpyEngine, Any]) -> None:
    spy, _ = spy_run
    second_turns = [r for r in spy.requests if r.messages and len(r.messages) == 3]
    assert len(second_turns) == len(CONFIG.arms) * 2
    for r in second_turns:
        assert [m.role for m in r.messages] == ["user", "assistant", "user"]
        assert r.messages[1].content  # the arm's own generated answer
        assert r.messages[2].content == "second turn"


def test_run_bench_same_seed_for_every_arm_of_a_turn(spy_run: tuple[SpyEngine, Any]) -> None:
    _, run = spy_run
    seeds = {(s.question_id, s.turn, s.temperature): set() for s in run.samples}
    for s in run.samples:
        seeds[(s.question_id, s.turn, s.temperature)].add(s.seed)
    assert all(len(v) == 1 for v in seeds.values())
    assert len({next(iter(v)) for v in seeds.values()}) == len(seeds)


def test_summary_counts_add_up(spy_run: tuple[SpyEngine, Any]) -> None:
    _, run = spy_run
    summary = summarize(run.complete_samples(), CONFIG)
    for temp in ("0", "0.8"):
        cats = summary[temp]["categories"]
        assert list(cats) == ["alpha", "beta", ALL]
        for key, arm in cats[ALL]["arms"].items():
            mine = [s.stats for s in run.samples if s.arm == key and f"{s.temperature:g}" == temp]
            assert arm["num_steps"] == sum(s["num_steps"] for s in mine)
            assert arm["num_output_tokens"] == arm["num_accepted_tokens"] + arm["num_steps"]
            assert arm["al"] == pytest.approx(1 + arm["num_accepted_tokens"] / arm["num_steps"])
            if key != "plain":  # the paired CI of the speedup holds the pooled speedup
                lo, hi = arm["speedup_ci95"]
                assert lo <= arm["speedup"] <= hi
        est = cats[ALL]["estimates"]["model"]
        assert 0.0 < est["alpha"] <= 1.0 and est["c"] is not None and set(est["b"]) == {"1", "3"}
        assert est["measured_best_gamma"] in (0, 1, 3)
        assert est["theory"]["best_gamma"] in range(0, 4)


def test_run_bench_ctrl_c_keeps_finished_generations() -> None:
    spy = SpyEngine()
    calls = {"n": 0}

    def progress(n: int, label: str) -> None:
        calls["n"] += n
        if calls["n"] > 12 * 7:  # during the 8th generation
            raise KeyboardInterrupt

    run = run_bench(spy, PROMPTS, CONFIG, progress)  # type: ignore[arg-type]
    assert run.interrupted
    assert len(run.samples) == 7
    assert not spy.engine.busy  # the generation in flight was closed cleanly
    report = build_report(run, {})
    assert report["interrupted"] and report["num_samples"] == 7
    # a-1 at T=0 (5 arms) is complete; a-1 at T=0.8 is not, so only T=0 is summarised
    assert report["num_complete_samples"] == 5
    assert list(report["summary"]["0"]["categories"]) == ["alpha", ALL]
    assert report["summary"]["0.8"]["categories"] == {}


def test_report_tables_and_markdown_have_every_category(spy_run: tuple[SpyEngine, Any]) -> None:
    _, run = spy_run
    report = build_report(run, {"models": {}})
    header, rows = table_rows(report, "0", "model")
    assert header[:5] == ["category", "n", "plain t/s", "γ=1", "γ=3"]
    assert [r[0] for r in rows] == ["alpha", "beta", "ALL"]
    md = markdown_tables(report)
    assert "### T = 0.8" in md and "| **all** |" in md and "ngram@3" in md


def test_rebuild_report_from_json_gives_the_same_summary(spy_run: tuple[SpyEngine, Any]) -> None:
    import json

    from localspec.bench.report import _clean, rebuild_report

    _, run = spy_run
    report = json.loads(json.dumps(_clean(build_report(run, {"models": {}}))))
    again = _clean(rebuild_report(report))
    assert again["summary"] == report["summary"]
    assert again["samples"] == report["samples"]
    e = report["summary"]["0"]["categories"][ALL]["estimates"]["model"]
    lo, hi = e["alpha_ci95"]
    assert lo <= e["alpha"] <= hi


REPEAT = BenchConfig(gammas=(2,), temperatures=(0.0,), drafters=("ngram",), max_tokens=8, warmup_tokens=0, repeat=2)


def test_arm_order_rotates_per_prompt_and_reverses_every_other_round() -> None:
    from localspec.bench.runner import arm_order

    units = ["a", "b", "c"]
    assert arm_order(units, 0, 0) == ["a", "b", "c"]
    assert arm_order(units, 1, 0) == ["b", "c", "a"]
    assert arm_order(units, 1, 1) == ["a", "c", "b"]  # round 1: the reverse of round 0
    assert arm_order(units, 4, 2) == arm_order(units, 4, 0)


def test_repeat_runs_every_prompt_again_in_reverse_and_pools_the_rounds() -> None:
    spy = SpyEngine()
    run = run_bench(spy, PROMPTS, REPEAT)  # type: ignore[arg-type]
    assert planned_units(PROMPTS, REPEAT) == 2 * planned_units(PROMPTS, BenchConfig(
        gammas=(2,), temperatures=(0.0,), drafters=("ngram",), max_tokens=8, warmup_tokens=0))
    per_round = {r: [s for s in run.samples if s.round == r] for r in (0, 1)}
    assert len(per_round[0]) == len(per_round[1]) == 2 * 4  # two arms, four turns
    for qid in ("a-1", "b-1"):
        order = [[s.arm for s in per_round[r] if s.question_id == qid] for r in (0, 1)]
        assert order[1] == order[0][::-1]
    # the same seeds in every round: a round repeats the measurement, not the sample
    assert {(s.question_id, s.turn, s.seed) for s in per_round[0]} == {(s.question_id, s.turn, s.seed) for s in per_round[1]}
    report = build_report(run, {"models": {}})
    arm = report["summary"]["0"]["categories"][ALL]["arms"]["ngram@2"]
    assert arm["num_steps"] == sum(s.stats["num_steps"] for s in run.samples if s.arm == "ngram@2")
    assert arm["num_prompts"] == 3  # pooled per prompt, not counted once per round
    r0, r1 = arm["speedup_per_round"]
    assert min(r0, r1) <= arm["speedup"] <= max(r0, r1)
    assert "Speedup vs plain in each round" in markdown_tables(report)
    _, rows = table_rows(report, "0", "ngram")
    assert rows[-1][3].count("/") == 1  # "AL ×S (r0/r1)"


def test_repeat_interrupted_in_round_two_keeps_round_one() -> None:
    spy = SpyEngine()
    seen = {"n": 0}

    def progress(n: int, label: str) -> None:
        seen["n"] += n
        if seen["n"] > 8 * 9:  # during the first generation of round two (8 per round)
            raise KeyboardInterrupt

    run = run_bench(spy, PROMPTS, REPEAT, progress)  # type: ignore[arg-type]
    assert run.interrupted and {s.round for s in run.samples} == {0, 1}
    complete = run.complete_samples()
    assert {s.round for s in complete} == {0} and len(complete) == 8


def test_reports_written_before_repeat_existed_still_load(spy_run: tuple[SpyEngine, Any]) -> None:
    import json

    from localspec.bench.report import _clean, rebuild_report

    _, run = spy_run
    report = json.loads(json.dumps(_clean(build_report(run, {"models": {}}))))
    del report["config"]["repeat"]
    for s in report["samples"]:
        del s["round"]
    again = rebuild_report(report)
    assert again["config"]["repeat"] == 1 and {s["round"] for s in again["samples"]} == {0}
    assert again["summary"]["0"]["categories"][ALL]["arms"]["model@1"]["speedup_per_round"] is None
