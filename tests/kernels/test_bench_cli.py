"""`localspec bench kernels` and `localspec doctor` on the real backends of this machine."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from localspec.cli import bench_kernels, doctor
from localspec.kernels import bench


def _app() -> typer.Typer:
    app = typer.Typer()
    bench_app = typer.Typer()
    app.add_typer(bench_app, name="bench")
    bench_kernels.register(bench_app)
    doctor.register(app)
    return app


def test_bench_kernels_times_each_backend() -> None:
    ready, missing = bench.available_backends(["reference", "torch-cpu"])
    assert set(ready) == {"reference", "torch-cpu"} and not missing
    rows = bench.bench_kernels(ready, gammas=(1, 4), vocabs=(4099,), temperatures=(0.0, 0.8), budget_s=0.01)
    assert len(rows) == 2 * 2 * 2
    assert {(r.backend, r.gamma, r.temperature) for r in rows} == {
        (b, g, t) for b in ready for g in (1, 4) for t in (0.0, 0.8)}
    for r in rows:
        assert r.median_s > 0 and r.runs >= 3
        assert r.speedup is not None and (r.backend != "reference" or r.speedup == 1.0)


def test_step_inputs_accept_every_draft() -> None:
    from localspec.kernels.reference import accept_ref
    from localspec.types import SamplingParams

    target, drafts, q, u = bench.step_inputs(8, 4099)
    for temp in (0.0, 0.8):
        assert accept_ref(target, drafts, q, u, SamplingParams(temp)).num_accepted == 8


def test_bench_kernels_cli_json() -> None:
    result = CliRunner().invoke(_app(), ["bench", "kernels", "--json", "--backend", "torch-cpu", "--gamma", "1",
                                         "--vocab", "4099", "--temp", "0.8", "--budget", "0.01"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout[result.stdout.index("{"):])
    assert [t["backend"] for t in data["timings"]] == ["reference", "torch-cpu"]


def test_bench_kernels_cli_table_lists_unavailable_backends() -> None:
    result = CliRunner().invoke(_app(), ["bench", "kernels", "--backend", "reference", "--backend", "cuda",
                                         "--gamma", "1", "--vocab", "7", "--budget", "0.01"])
    assert result.exit_code == 0, result.output
    assert "reference" in result.stdout and "vs reference" in result.stdout
    from localspec.kernels._cuda import cuda_status

    if cuda_status() is not None:
        assert "cuda: unavailable" in " ".join(result.stdout.split())


def test_doctor_reports_backends_and_reasons() -> None:
    result = CliRunner().invoke(_app(), ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["kernels"]["reference"] is None
    assert set(report["kernels"]) == {"reference", "torch-cpu", "torch-cuda", "cuda"}
    assert "driver" in report and "nvcc" in report
    if report["kernels"]["cuda"] is not None:
        assert len(report["kernels"]["cuda"]) > 20  # a reason, not just "no"
    text = CliRunner().invoke(_app(), ["doctor"])
    assert text.exit_code == 0 and "Acceptance backends" in text.stdout and "nvcc" in text.stdout


def test_bench_batch_times_per_item_and_batched() -> None:
    ready, _ = bench.available_backends(["reference", "torch-cpu"])
    rows = bench.bench_batch(ready, batch_sizes=(1, 3), gamma=2, n_vocab=4099, temperatures=(0.0, 0.8), budget_s=0.01)
    assert len(rows) == 2 * 2 * 2
    assert {(r.backend, r.batch, r.temperature) for r in rows} == {
        (b, n, t) for b in ready for n in (1, 3) for t in (0.0, 0.8)}
    for r in rows:
        assert r.per_item_s > 0 and r.batch_s > 0 and r.runs >= 3 and r.gamma == 2 and r.n_vocab == 4099
        assert r.as_dict()["batch_speedup"] == r.batch_speedup


def test_batch_inputs_are_views_that_accept_every_draft() -> None:
    from localspec.kernels.reference import accept_ref
    from localspec.types import SamplingParams

    items = bench.batch_inputs(3, 4, 4099, SamplingParams(0.8))
    bases = {id(item.target_logits.base) for item in items}  # type: ignore[union-attr]
    assert len(items) == 3 and len(bases) == 1
    assert [accept_ref(*item.args()).num_accepted for item in items] == [4, 4, 4]


def test_bench_kernels_cli_batch_mode() -> None:
    """`--batch`: B single calls against one batched call, per backend, B and T."""
    args = ["bench", "kernels", "--backend", "torch-cpu", "--gamma", "2", "--vocab", "4099", "--temp", "0",
            "--temp", "0.8", "--budget", "0.01", "--batch", "1", "--batch", "3"]
    result = CliRunner().invoke(_app(), [*args, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout[result.stdout.index("{"):])["batch_timings"]
    assert {(r["backend"], r["batch"], r["temperature"]) for r in rows} == {
        (b, n, t) for b in ("reference", "torch-cpu") for n in (1, 3) for t in (0.0, 0.8)}
    assert all(r["gamma"] == 2 and r["n_vocab"] == 4099 and r["per_item_s"] > 0 and r["batch_s"] > 0 for r in rows)
    table = CliRunner().invoke(_app(), args)
    assert table.exit_code == 0 and "one batch" in table.stdout and "γ=2" in table.stdout
