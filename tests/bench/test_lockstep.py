"""The lockstep schedule on fake models: the same generations as one after another, each arm
charged only its own time, Ctrl-C, and the real CLI with an engine per arm."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from localspec.bench.lockstep import run_lockstep
from localspec.bench.report import build_report, samples_from_json
from localspec.bench.runner import BenchConfig, run_bench
from localspec.bench.summary import ALL
from localspec.engine import Engine, Generation, GenerationRequest
from localspec.engine.fake import FakeBackend
from tests.bench.conftest import PROMPTS, TEMPLATE

CONFIG = BenchConfig(gammas=(1, 3), temperatures=(0.0, 0.8), drafters=("model", "ngram"),
                     max_tokens=12, warmup_tokens=0)


def _engine(delay_s: float = 0.0) -> Engine:
    return Engine(
        FakeBackend(chat_template=TEMPLATE, decode_delay_s=delay_s),
        FakeBackend(error_rate=0.25, seed=3, chat_template=TEMPLATE),
    )


class SpyEngine:
    """Delegates to a real Engine over fakes; records its requests and whether they overlapped."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.engine = _engine(delay_s)
        self.requests: list[GenerationRequest] = []

    def generate(self, request: GenerationRequest) -> Generation:
        self.requests.append(request)
        return self.engine.generate(request)


def _key(s: Any) -> tuple[Any, ...]:
    return (s.round, s.temperature, s.question_id, s.turn, s.arm)


def test_lockstep_makes_the_same_generations_as_one_after_another() -> None:
    spies = {a.key: SpyEngine() for a in CONFIG.arms}
    lock = run_lockstep(spies, PROMPTS, CONFIG)  # type: ignore[arg-type]
    seq = run_bench(_engine(), PROMPTS, CONFIG)
    assert not lock.interrupted and len(lock.samples) == len(seq.samples) == len(CONFIG.arms) * 2 * 4
    assert len(lock.complete_samples()) == len(lock.samples)
    by_key = {_key(s): s for s in seq.samples}
    for s in lock.samples:
        other = by_key[_key(s)]
        assert s.seed == other.seed and s.text_chars == other.text_chars
        for n in ("num_steps", "num_draft_tokens", "num_accepted_tokens", "num_generated_tokens"):
            assert s.stats[n] == other.stats[n], (n, _key(s))
    # each engine served exactly its own arm; multi-turn fed that arm's own answer back
    for key, spy in spies.items():
        arm = next(a for a in CONFIG.arms if a.key == key)
        assert spy.requests and {(r.drafter, r.gamma) for r in spy.requests} == {(arm.drafter, arm.gamma)}
        second = [r for r in spy.requests if r.messages and len(r.messages) == 3]
        assert len(second) == 2 and all(r.messages[1].content for r in second)


def test_lockstep_arms_of_a_turn_overlap_and_rotate() -> None:
    spies = {a.key: SpyEngine() for a in CONFIG.arms}
    run = run_lockstep(spies, PROMPTS, CONFIG)  # type: ignore[arg-type]
    first = [s.arm for s in run.samples if s.question_id == "a-1" and s.temperature == 0.0]
    second = [s.arm for s in run.samples if s.question_id == "b-1" and s.temperature == 0.0]
    rotated = first[1:] + first[:1]  # the second prompt's order: rotated by one, then reversed
    assert first[0] == "plain" and second == rotated[::-1]
    cycle = {a: first[(i - 1) % len(first)] for i, a in enumerate(first)}
    assert all(cycle[a] != second[(i - 1) % len(second)] for i, a in enumerate(second))  # new predecessors
    assert [s.position for s in run.samples[: len(first)]] == list(range(len(first)))


def test_lockstep_charges_each_arm_only_its_own_time() -> None:
    config = BenchConfig(gammas=(2,), temperatures=(0.0,), drafters=("ngram",), max_tokens=10, warmup_tokens=0)
    # plain decodes slowly (50 ms a call), n-gram's engine has no delay
    engines = {"plain": _engine(0.05), "ngram@2": _engine(0.0)}
    t0 = time.perf_counter()
    run = run_lockstep(engines, PROMPTS[:1], config)
    elapsed = time.perf_counter() - t0
    s = {x.arm: x for x in run.samples}
    slow, fast = s["plain"], s["ngram@2"]
    assert slow.stats["t_generate_s"] >= 0.05 * (slow.stats["num_steps"] - 1)
    # the fast arm ran while the slow one decoded, but is not charged for it (margins leave
    # room for a loaded machine: the fakes' own work is the same for both)
    assert fast.stats["t_other_arms_s"] >= 0.05 * (fast.stats["num_steps"] - 1)
    assert fast.stats["t_generate_s"] < 0.5 * slow.stats["t_generate_s"]
    assert fast.stats["tokens_per_s"] > 2 * slow.stats["tokens_per_s"]
    assert slow.t_wall_s + fast.t_wall_s <= elapsed


def test_lockstep_ctrl_c_keeps_finished_turns_and_frees_every_engine() -> None:
    engines = {a.key: _engine() for a in CONFIG.arms}
    calls = {"n": 0}

    def progress(n: int, label: str) -> None:
        calls["n"] += n
        if calls["n"] > 12 * 5 * 1 + 7:  # inside the second lockstep turn (a-1 at T=0.8)
            raise KeyboardInterrupt

    run = run_lockstep(engines, PROMPTS, CONFIG, progress)
    assert run.interrupted and len(run.samples) == 5  # a-1 at T=0: all five arms
    assert not any(e.busy for e in engines.values())
    report = build_report(run, {})
    assert report["num_complete_samples"] == 5
    assert list(report["summary"]["0"]["categories"]) == ["alpha", ALL]
    assert report["summary"]["0.8"]["categories"] == {}


def test_lockstep_needs_an_engine_for_every_arm() -> None:
    with pytest.raises(ValueError, match="model@1"):
        run_lockstep({"plain": _engine()}, PROMPTS, CONFIG)


def test_lockstep_is_recorded_in_the_report_and_survives_a_reload() -> None:
    config = BenchConfig(gammas=(2,), drafters=("ngram",), max_tokens=6, warmup_tokens=2, lockstep=True)
    run = run_lockstep({"plain": _engine(), "ngram@2": _engine()}, PROMPTS[:1], config)
    report = json.loads(json.dumps(build_report(run, {})))
    assert report["config"]["lockstep"] is True
    assert samples_from_json(report).config.lockstep is True
    old = dict(report, config={k: v for k, v in report["config"].items() if k != "lockstep"})
    assert samples_from_json(old).config.lockstep is False


@pytest.mark.models
def test_cli_bench_lockstep_real_weights(smollm2_path: Path, tmp_path: Path) -> None:
    from localspec.cli import _register_all, app

    _register_all()
    out = tmp_path / "lock.json"
    res = CliRunner().invoke(app, [
        "bench", "-m", str(smollm2_path), "-md", str(smollm2_path), "-c", "1024",
        "--categories", "coding", "--prompts-per-category", "1", "--gamma", "2", "-n", "8",
        "--drafters", "model,ngram,adaptive", "--warmup-tokens", "2", "--lockstep", "--json", str(out),
    ])
    assert res.exit_code == 0, res.output
    assert "lockstep" in res.output
    data = json.loads(out.read_text())
    assert data["config"]["lockstep"] is True
    assert data["config"]["arms"] == ["plain", "model@2", "ngram@2", "adaptive@2"]
    samples = {s["arm"]: s for s in data["samples"]}
    assert len(data["samples"]) == 4 and set(samples) == set(data["config"]["arms"])
    # the same greedy text from every arm (lossless), each charged only its own time
    assert len({s["text_chars"] for s in data["samples"]}) == 1
    assert samples["model@2"]["stats"]["num_draft_tokens"] > 0
    for s in data["samples"]:
        assert s["stats"]["t_other_arms_s"] > 0 and s["stats"]["t_generate_s"] > 0
