"""The benchmark on real weights (SmolLM2 drafting for itself) and through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from localspec.bench.environment import environment_record
from localspec.bench.plot import write_plot
from localspec.bench.report import build_report, write_json
from localspec.bench.runner import BenchConfig, run_bench
from localspec.prompts import load_builtin, select

pytestmark = pytest.mark.models

CONFIG = BenchConfig(gammas=(1, 2), temperatures=(0.0, 0.8), drafters=("model",), max_tokens=12,
                     prompts_per_category=1, categories=("coding", "qa"), warmup_tokens=4)


@pytest.fixture(scope="module")
def real_report(smol_engine: Any, smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    prompts = select(load_builtin().prompts, CONFIG.categories, 1)
    run = run_bench(smol_engine, prompts, CONFIG)
    env = environment_record(smollm2_path, smollm2_path, kernel=smol_engine.info.kernel, threads=None,
                             n_ctx=2048, n_gpu_layers=0, n_gpu_layers_draft=0)
    out = tmp_path_factory.mktemp("bench") / "report.json"
    write_json(build_report(run, env), out)
    return json.loads(out.read_text())


def test_real_bench_samples_counts_add_up(real_report: dict[str, Any]) -> None:
    r = real_report
    # coding-01 (1 turn) + qa-01 (1 turn), 3 arms, 2 temperatures
    assert r["num_samples"] == r["num_complete_samples"] == 2 * 3 * 2 and not r["interrupted"]
    for s in r["samples"]:
        st = s["stats"]
        assert st["num_output_tokens"] == st["num_accepted_tokens"] + st["num_steps"]
        assert 1 <= st["num_generated_tokens"] <= CONFIG.max_tokens
        assert st["mean_acceptance_length"] == pytest.approx(1 + st["num_accepted_tokens"] / st["num_steps"])
        if s["arm"] == "plain":
            assert st["num_draft_tokens"] == 0 and st["mean_acceptance_length"] == 1.0
        else:
            assert st["gamma_counts"].get(str(s["gamma"]), 0) >= 1
            assert max(int(g) for g in st["gamma_counts"]) <= s["gamma"]


def test_real_bench_summary_pools_the_samples(real_report: dict[str, Any]) -> None:
    for temp in ("0", "0.8"):
        cats = real_report["summary"][temp]["categories"]
        assert list(cats) == ["coding", "qa", "all"]
        for key in ("plain", "model@1", "model@2"):
            arm = cats["all"]["arms"][key]
            mine = [s["stats"] for s in real_report["samples"] if s["arm"] == key and f"{s['temperature']:g}" == temp]
            assert arm["num_accepted_tokens"] == sum(m["num_accepted_tokens"] for m in mine)
            assert arm["num_steps"] == sum(m["num_steps"] for m in mine)
            assert arm["al"] == pytest.approx(1 + arm["num_accepted_tokens"] / arm["num_steps"])
            assert arm["tokens_per_s"] > 0
        e = cats["all"]["estimates"]["model"]
        # SmolLM2 drafting for itself: nearly every draft token is accepted
        assert e["alpha"] > 0.8
        assert e["c"] is not None and e["c"] > 0 and all(v > 0 for v in e["b"].values())
        assert e["theory"]["predicted"]["2"]["al"] == pytest.approx(1 + e["alpha"] + e["alpha"] ** 2)  # (1-α³)/(1-α)


def test_real_bench_records_models_and_build(real_report: dict[str, Any]) -> None:
    env = real_report["environment"]
    t = env["models"]["target"]
    assert len(t["sha256"]) == 64 and t["sha256_source"] == "store-stamp" and t["size"] > 0
    assert env["build"]["llama-cpp-python"] and env["build"]["localspec"]
    assert env["kernel"]


def test_real_bench_plot_is_a_png(real_report: dict[str, Any], tmp_path: Path) -> None:
    p = write_plot(real_report, tmp_path / "bench.png")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def test_cli_bench_tiny_run_writes_json(smollm2_path: Path, tmp_path: Path) -> None:
    from localspec.cli import _register_all, app

    _register_all()
    out = tmp_path / "cli.json"
    res = CliRunner().invoke(app, [
        "bench", "-m", str(smollm2_path), "-md", str(smollm2_path), "-c", "1024",
        "--categories", "math", "--prompts-per-category", "1", "--gamma", "1", "-n", "6",
        "--warmup-tokens", "0", "--json", str(out), "--markdown", str(tmp_path / "t.md"),
    ])
    assert res.exit_code == 0, res.output
    assert "math" in res.output and "γ=1" in res.output
    # not a terminal: progress comes as lines (the last one at 100 %), not a bar drawn at the end
    assert "tokens (100 %)" in res.output and "bench: " in res.output
    data = json.loads(out.read_text())
    assert data["config"]["arms"] == ["plain", "model@1"]
    assert data["num_samples"] == 2 * 1  # math-01 is single-turn: 2 arms
    assert data["command"]["params"]["max_tokens"] == 6
    assert "| math |" in (tmp_path / "t.md").read_text()
    # re-render the written report without measuring
    res = CliRunner().invoke(app, ["bench", "--from-json", str(out), "--plot", str(tmp_path / "p.png")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG" and "γ=1" in res.output
