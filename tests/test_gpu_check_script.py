"""`scripts/gpu_check.sh` and its helper without a GPU: the skip path end to end, and the
helper's parsing and verdicts on recorded inputs (the GPU run itself happens on a CUDA machine)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_helper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gc = _load_helper()

PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN3lsk24accept_stochastic_kernelEPKfS1_PKiPKdiNS_6ParamsEPNS_7ScratchEPi' for 'sm_90'
ptxas info    : Function properties for _ZN3lsk24accept_stochastic_kernelEPKfS1_PKiPKdiNS_6ParamsEPNS_7ScratchEPi
    16 bytes stack frame, 24 bytes spill stores, 32 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 16 bytes cumulative stack size, 35084 bytes smem
ptxas info    : Compiling entry function '_ZN3lsk20accept_greedy_kernelEPKfPKiiNS_6ParamsEPNS_7ScratchEPi' for 'sm_90'
ptxas info    : Function properties for _ZN3lsk20accept_greedy_kernelEPKfPKiiNS_6ParamsEPNS_7ScratchEPi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 35084 bytes smem
"""

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" errors="0"
failures="1" skipped="2" tests="4" time="3.2"><testcase classname="tests.kernels.test_gpu" name="test_a" time="1"/>
<testcase classname="tests.kernels.test_gpu" name="test_b" time="1"><failure message="AssertionError: k=8 V=151936
reference AcceptResult(tokens=(1,)) got AcceptResult(tokens=(2,))">long traceback</failure></testcase>
<testcase classname="tests.kernels.test_gpu" name="test_c" time="0"><skipped type="pytest.skip"
message="CUDA kernel unavailable: no CUDA GPU found">skip</skipped></testcase>
<testcase classname="tests.kernels.test_gpu" name="test_d" time="0"><skipped type="pytest.skip"
message="CUDA kernel unavailable: no CUDA GPU found">skip</skipped></testcase></testsuite></testsuites>"""


def _row(backend: str, median_s: float, gamma: int = 8, n_vocab: int = 151_936, temperature: float = 0.8) -> dict[str, Any]:
    return {"backend": backend, "gamma": gamma, "n_vocab": n_vocab, "temperature": temperature,
            "median_s": median_s, "runs": 5, "speedup": None}


def test_no_gpu_reason() -> None:
    assert "hides every GPU" in gc.no_gpu_reason("", 1, None, 1)
    assert "hides every GPU" in gc.no_gpu_reason("-1", 1, None, 1)
    assert gc.no_gpu_reason(None, 1, None, None) is None
    assert gc.no_gpu_reason("0", 0, "no NVIDIA GPU found: NVML missing", 1) is None  # torch alone sees it
    reason = gc.no_gpu_reason(None, 0, "no NVIDIA GPU found: NVMLError_LibraryNotFound", 0)
    assert reason == "no NVIDIA GPU found: NVMLError_LibraryNotFound; torch sees no CUDA device"
    assert gc.no_gpu_reason(None, 0, None, None) == "NVML lists no GPU; torch is not installed"


def test_ptxas_report_per_kernel() -> None:
    report = gc.ptxas_report(PTXAS)
    assert report == {
        "accept_stochastic_kernel": {"stack_bytes": 16, "spill_store_bytes": 24, "spill_load_bytes": 32,
                                     "registers": 64, "smem_bytes": 35084},
        "accept_greedy_kernel": {"stack_bytes": 0, "spill_store_bytes": 0, "spill_load_bytes": 0,
                                 "registers": 32, "smem_bytes": 35084},
    }


def test_junit_summary(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    assert gc.junit_summary(path) == {"ran": False}
    path.write_text(JUNIT)
    summary = gc.junit_summary(path)
    assert (summary["tests"], summary["passed"], summary["failures"], summary["skipped"]) == (4, 1, 1, 2)
    assert summary["failed"] == ["tests.kernels.test_gpu::test_b: AssertionError: k=8 V=151936 reference "
                                 "AcceptResult(tokens=(1,)) got AcceptResult(tokens=(2,))"]
    assert summary["skip_reasons"] == {"CUDA kernel unavailable: no CUDA GPU found": 2}


def test_goal_check_at_the_goal_point() -> None:
    rows = [_row("reference", 0.030), _row("torch-cuda", 0.004), _row("cuda", 0.002),
            _row("cuda", 0.5, gamma=1)]  # another point must not be picked up
    goal = gc.goal_check(rows)
    assert goal["met"] is True
    assert goal["vs_numpy"] == pytest.approx(15.0) and goal["vs_torch_cuda"] == pytest.approx(2.0)
    slower_than_torch = gc.goal_check([_row("reference", 0.030), _row("torch-cuda", 0.002), _row("cuda", 0.003)])
    assert slower_than_torch["met"] is False and slower_than_torch["vs_numpy"] == pytest.approx(10.0)
    under_5x = gc.goal_check([_row("reference", 0.010), _row("torch-cuda", 0.010), _row("cuda", 0.0025)])
    assert under_5x["met"] is False
    no_torch = gc.goal_check([_row("reference", 0.030), _row("cuda", 0.002)])
    assert no_torch["met"] is None and "torch-CUDA" in no_torch["why"]
    assert gc.goal_check([_row("reference", 0.030)])["why"] == "the fused kernel was not timed at this point"


def test_status_and_table() -> None:
    env = {"gpu_name": "NVIDIA H200", "target_arch": "sm_90", "nvcc_version": "release 13.0", "torch": "2.11"}
    steps = gc.read_steps(Path("/nonexistent"))
    assert steps == [] and gc.overall_status({"no_gpu_reason": "none"}, steps) == "skipped"
    ok = [{"name": "env", "rc": 0, "seconds": 1.0, "note": ""}, {"name": "bench", "rc": 0, "seconds": 9.0, "note": ""}]
    assert gc.overall_status(env, ok) == "passed"
    assert gc.overall_status(env, [*ok, {"name": "gpu tests", "rc": 1, "seconds": 3.0, "note": ""}]) == "failed"
    assert gc.overall_status(env, [*ok, {"name": "x", "rc": 124, "seconds": 0.0, "note": "not run: out of time"}]) \
        == "failed"
    rows = [_row("reference", 0.030), _row("torch-cuda", 0.004), _row("cuda", 0.002)]
    report = {"status": "passed", "env": env, "steps": ok, "build": {"arch": "sm_90"},
              "tests": {}, "bench": {"timings": rows, "unavailable": {}}, "goal": gc.goal_check(rows)}
    table = gc.render_table(report)
    assert table.splitlines()[0] == "GPU check: PASSED"
    assert "    8   151936  0.8    30.000      4.000    2.000     15.00x      2.00x" in table
    assert table.splitlines()[-1].endswith("2.00x torch-CUDA (want >= 1x): MET")


def test_script_skips_without_a_gpu(tmp_path: Path) -> None:
    """The whole shell script on its no-GPU path: exit 0, the reason in the JSON, log and table."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp_path)}
    env.pop("GPU_CHECK_FORCE", None)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["status"] == "skipped"
    assert report["reason"] == "no GPU: CUDA_VISIBLE_DEVICES='' hides every GPU"
    assert [s["name"] for s in report["steps"]] == ["env"] and report["steps"][0]["rc"] == gc.EXIT_NO_GPU
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "gpu_check.log"]
    log = (out / "gpu_check.log").read_text()
    assert "GPU check: SKIPPED (no GPU: CUDA_VISIBLE_DEVICES='' hides every GPU)" in log
    last = proc.stdout.strip().splitlines()
    assert last[-1].startswith("  env ") and any(line.startswith("GPU check: SKIPPED") for line in last[-4:])


def test_sanitizer_verdicts() -> None:
    marker = gc.SANITIZE_RUN_MARKER + " 48 steps, 48 equal to the reference\n"
    clean = gc.sanitizer_verdict("memcheck", 0, "========= COMPUTE-SANITIZER\n" + marker + "========= ERROR SUMMARY: 0 errors")
    assert clean["ok"] is True and clean["errors"] == 0 and clean["gating"] and clean["first_findings"] == []
    race = gc.sanitizer_verdict("racecheck", 9, "========= COMPUTE-SANITIZER\n========= Error: Race reported between "
                                "Write access at lsk::accept_stochastic_kernel+0x1a0\n" + marker
                                + "========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)")
    assert race["ok"] is False and (race["errors"], race["warnings"]) == (2, 1)
    assert race["first_findings"] == ["========= Error: Race reported between Write access at "
                                      "lsk::accept_stochastic_kernel+0x1a0"]
    crashed = gc.sanitizer_verdict("racecheck", -11, "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)")
    assert crashed["ok"] is False and "did not finish" in crashed["why"]
    gvisor = gc.sanitizer_verdict("memcheck", 1, "========= Error: Device not supported\n========= ERROR SUMMARY: 1 error")
    assert gvisor["ok"] is None
    init = gc.sanitizer_verdict("initcheck", 9, marker + "========= ERROR SUMMARY: 4 errors")
    assert init["ok"] is False and not init["gating"]


def test_kernel_modules_import_without_app_dependencies() -> None:
    """The GPU machine has numpy, torch and pytest but no platformdirs, typer, rich, pydantic or
    llama-cpp-python: what the check and the kernel tests import must not pull those in."""
    code = ("import sys; import localspec.kernels, localspec.kernels._cuda, localspec.kernels.bench, "
            "localspec.kernels.reference, localspec.hardware, localspec.store; "
            "print(sorted(m for m in ('platformdirs', 'typer', 'rich', 'pydantic', 'llama_cpp', 'textual') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_table_shows_the_batched_bench() -> None:
    env = {"gpu_name": "NVIDIA H200", "target_arch": "sm_90"}
    rows = [{"backend": "cuda", "batch": 8, "gamma": 4, "n_vocab": 151_936, "temperature": 0.8, "per_item_s": 0.008,
             "batch_s": 0.002, "runs": 9, "batch_speedup": 4.0},
            {"backend": "reference", "batch": 1, "gamma": 4, "n_vocab": 151_936, "temperature": 0.0,
             "per_item_s": 0.003, "batch_s": 0.003, "runs": 9, "batch_speedup": 1.0}]
    report = {"status": "passed", "env": env, "steps": [], "build": {}, "tests": {}, "bench": {},
              "bench_batch": {"timings": rows}}
    table = gc.render_table(report)
    assert "batched, median ms per batch (γ=4, V=151936; B accept calls vs one accept_batch):" in table
    assert "  cuda         8  0.8     8.000     2.000   4.00x" in table
    assert "  reference    1    0     3.000     3.000   1.00x" in table
    assert "batched" not in gc.render_table({**report, "bench_batch": {}})


def test_check_script_runs_the_batched_steps() -> None:
    text = (ROOT / "scripts" / "gpu_check.sh").read_text()
    assert 'run_step "batch bench" 90 "$PY" scripts/gpu_check.py bench-batch "$WORK"' in text
    assert "tests/kernels/test_gpu.py" in text  # the batched GPU tests live there
    assert gc.BATCH_SIZES == (1, 4, 8) and (gc.BATCH_GAMMA, gc.BATCH_VOCAB) == (4, 151_936)
