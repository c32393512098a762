"""The steps of `scripts/gpu_check.sh`: the fused acceptance kernel on a real CUDA GPU.

    python3 scripts/gpu_check.py env WORK          facts about this machine -> WORK/env.json;
                                                   exit 3 (and the reason) when no GPU is visible
    python3 scripts/gpu_check.py build WORK        build + load the kernel the way users get it
                                                   (`_build.build_device_library`), ptxas report,
                                                   one smoke step against the reference
    python3 scripts/gpu_check.py lossless-gpu      why tests/engine/test_lossless_gpu.py cannot
                                                   run here (exit 3), or nothing (exit 0)
    python3 scripts/gpu_check.py bench WORK        `localspec bench kernels` (same functions):
                                                   fused CUDA vs torch-CUDA vs NumPy -> WORK/bench.json
    python3 scripts/gpu_check.py bench-batch WORK  batches of B = 1, 4, 8 sequences (γ 4, V 151936, T 0 and
                                                   0.8): B `accept` calls vs one `accept_batch` (for
                                                   the fused kernel: one launch) -> WORK/bench_batch.json
    python3 scripts/gpu_check.py sanitize WORK     compute-sanitizer (memcheck, racecheck, synccheck,
                                                   initcheck) over `sanitize-run`: small steps through
                                                   the kernel -> WORK/sanitizer.json
    python3 scripts/gpu_check.py report WORK OUT   everything -> OUT/gpu_check.json, table printed last

Needs only numpy (+ torch for torch-CUDA, nvidia-ml-py for the arch): no typer, rich,
platformdirs or llama-cpp-python, which the device machine does not have. Run from the
repository root with PYTHONPATH=. (the shell script sets it).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

EXIT_NO_GPU = 3
GOAL_GAMMA, GOAL_VOCAB, GOAL_TEMPERATURE = 8, 151_936, 0.8
GOAL_POINT: dict[str, Any] = {"gamma": GOAL_GAMMA, "n_vocab": GOAL_VOCAB, "temperature": GOAL_TEMPERATURE}
GOAL_VS_NUMPY = 5.0
GOAL_VS_TORCH = 1.0
BENCH_BACKENDS = ("reference", "torch-cuda", "cuda")
BENCH_GAMMAS = (1, 4, 8, 16)
BENCH_VOCABS = (32_000, 151_936, 262_144)
BENCH_TEMPERATURES = (0.0, 0.8)
QUICK_GAMMAS = (1, 8)
QUICK_VOCABS = (32_000, 151_936)
BATCH_SIZES = (1, 4, 8)
BATCH_GAMMA, BATCH_VOCAB = 4, 151_936
JUNIT_FILES = {"gpu tests": "junit-gpu.xml", "kernel suite": "junit-kernels.xml", "lossless gpu": "junit-lossless.xml"}
SANITIZER_TOOLS = {"memcheck": 32_000, "racecheck": 4099, "synccheck": 4099, "initcheck": 4099}
"""compute-sanitizer tool -> largest vocabulary it runs (racecheck and initcheck are slow)."""
SANITIZER_GATING = ("memcheck", "racecheck", "synccheck")
"""Tools whose findings fail the check; initcheck's are reported only (the result copy reads
the unused tail of the output buffer on purpose: one fixed-size copy per step)."""
SANITIZER_TIMEOUT_S = 60
SANITIZE_RUN_MARKER = "sanitize-run finished:"
NVSMI_QUERY = "name,driver_version,pstate,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,memory.used"
LOSSLESS_REASON = ("tests/engine/test_lossless_gpu.py needs llama-cpp-python built with -DGGML_CUDA=on and the "
                   "offline Qwen2.5-Coder 1.5B + 0.5B GGUF weights (~1.6 GB, installed by `make setup`)")


# ---------------------------------------------------------------- pure logic (unit-tested)


def no_gpu_reason(cuda_visible: str | None, nvml_gpus: int, nvml_error: str | None,
                  torch_gpus: int | None) -> str | None:
    """Why no GPU is usable here, or None. `torch_gpus` None = torch not importable."""
    if cuda_visible is not None and cuda_visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return f"CUDA_VISIBLE_DEVICES={cuda_visible!r} hides every GPU"
    if nvml_gpus > 0 or (torch_gpus or 0) > 0:
        return None
    torch_part = "torch is not installed" if torch_gpus is None else "torch sees no CUDA device"
    return f"{nvml_error or 'NVML lists no GPU'}; {torch_part}"


def ptxas_report(text: str) -> dict[str, dict[str, int]]:
    """Per kernel (demangled-ish name): registers, spill bytes, stack frame, shared memory,
    from `nvcc -Xptxas -v` output."""
    out: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?(\w+)'?", line)
        if m:
            mangled = m.group(1)
            named = re.search(r"lsk\d+(\w+?kernel)", mangled)
            current = named.group(1) if named else mangled
            out.setdefault(current, {})
            continue
        if current is None:
            continue
        entry = out[current]
        if m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
            entry.update(stack_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)),
                         spill_load_bytes=int(m.group(3)))
        if m := re.search(r"Used (\d+) registers", line):
            entry["registers"] = int(m.group(1))
        if m := re.search(r"(\d+) bytes smem", line):
            entry["smem_bytes"] = int(m.group(1))
    return out


def sanitizer_verdict(tool: str, rc: int, text: str) -> dict[str, Any]:
    """One compute-sanitizer run over `sanitize-run`: errors from its summary line (racecheck
    writes its own, with warnings apart); `ok` None when the tool cannot check this device
    (gVisor: 'Device not supported'), else True only when the summary says 0 errors, the
    exit status is 0 and the watched program printed that it finished."""
    errors: int | None = None
    warnings = 0
    if m := re.search(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)", text):
        errors, warnings = int(m.group(1)), int(m.group(2))
    elif m := re.search(r"ERROR SUMMARY: (\d+) errors?", text):
        errors = int(m.group(1))
    unsupported = "Device not supported" in text or "Unable to find injection library" in text
    finished = SANITIZE_RUN_MARKER in text
    findings = [ln.strip() for ln in text.splitlines() if ln.startswith("=========") and "SUMMARY" not in ln
                and ln.strip("= ").strip() and "COMPUTE-SANITIZER" not in ln]
    result: dict[str, Any] = {"tool": tool, "rc": rc, "errors": errors, "warnings": warnings,
                              "first_findings": findings[:12], "gating": tool in SANITIZER_GATING}
    if unsupported:
        result["ok"] = None
        result["why"] = "compute-sanitizer cannot check this device here"
    elif errors is None or not finished:
        result["ok"] = False
        result["why"] = (f"no summary line (exit {rc})" if errors is None else
                         f"the checked program did not finish (exit {rc})") + f": {text[-300:]}"
    else:
        result["ok"] = errors == 0 and rc == 0
    return result


def junit_summary(path: Path) -> dict[str, Any]:
    """Counts, failed test ids with the first lines of their message, and skip reasons."""
    if not path.is_file():
        return {"ran": False}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    failed: list[str] = []
    skips: dict[str, int] = {}
    for case in root.iter("testcase"):
        name = "::".join(part for part in (case.get("classname"), case.get("name")) if part)
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                message = (node.get("message") or node.text or "").strip()
                failed.append(f"{name}: {' '.join(message.split())[:600]}")
        skip = case.find("skipped")
        if skip is not None:
            reason = (skip.get("message") or "").strip()
            skips[reason] = skips.get(reason, 0) + 1
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {"ran": True, **counts, "passed": passed, "failed": failed, "skip_reasons": skips}


def find_timing(rows: list[dict[str, Any]], backend: str, gamma: int, n_vocab: int,
                temperature: float) -> float | None:
    """Median seconds of one backend at one point of the bench rows, or None."""
    for row in rows:
        if (row["backend"] == backend and row["gamma"] == gamma and row["n_vocab"] == n_vocab
                and abs(row["temperature"] - temperature) < 1e-9):
            return float(row["median_s"])
    return None


def goal_check(rows: list[dict[str, Any]], point: dict[str, Any] = GOAL_POINT) -> dict[str, Any]:
    """The performance goal at `point`: fused >= 5x NumPy and >= torch-CUDA.
    `met` is None when a backend was not timed there."""
    cuda = find_timing(rows, "cuda", **point)
    numpy_s = find_timing(rows, "reference", **point)
    torch_s = find_timing(rows, "torch-cuda", **point)
    result: dict[str, Any] = {**point, "cuda_s": cuda, "numpy_s": numpy_s, "torch_cuda_s": torch_s,
                              "vs_numpy": None, "vs_torch_cuda": None, "met": None}
    if cuda is None or cuda <= 0:
        result["why"] = "the fused kernel was not timed at this point"
        return result
    if numpy_s is not None:
        result["vs_numpy"] = numpy_s / cuda
    if torch_s is not None:
        result["vs_torch_cuda"] = torch_s / cuda
    if result["vs_numpy"] is None or result["vs_torch_cuda"] is None:
        result["why"] = "NumPy or torch-CUDA was not timed at this point"
        return result
    result["met"] = result["vs_numpy"] >= GOAL_VS_NUMPY and result["vs_torch_cuda"] >= GOAL_VS_TORCH
    return result


def read_steps(path: Path) -> list[dict[str, Any]]:
    """Lines `name<TAB>rc<TAB>seconds<TAB>note` written by the shell script."""
    steps = []
    if path.is_file():
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) >= 3:
                steps.append({"name": parts[0], "rc": int(parts[1]), "seconds": float(parts[2]),
                              "note": parts[3] if len(parts) > 3 else ""})
    return steps


def overall_status(env: dict[str, Any], steps: list[dict[str, Any]]) -> str:
    """'skipped' (no GPU, nothing else ran), 'passed', or 'failed' (a step exited non-zero
    other than a skip, or a step timed out)."""
    if env.get("no_gpu_reason") and not env.get("forced"):
        return "skipped"
    bad = [s for s in steps if s["rc"] not in (0, EXIT_NO_GPU) or "timed out" in s["note"]]
    return "failed" if bad else "passed"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render_table(report: dict[str, Any]) -> str:
    """The short plain-text table printed last (the reply carries the end of the output)."""
    env = report.get("env", {})
    build = report.get("build", {})
    lines = [f"GPU check: {report['status'].upper()}"
             + (f" ({report['reason']})" if report.get("reason") else "")]
    gpu = env.get("gpu_name") or "no GPU"
    lines.append(f"  machine: {gpu}; arch {build.get('arch', env.get('target_arch', '?'))}; "
                 f"{env.get('nvcc_version', 'no nvcc')}; torch {env.get('torch', '?')}")
    lines.append(f"  {'step':<14} {'rc':>3} {'seconds':>8}  note")
    for step in report.get("steps", []):
        lines.append(f"  {step['name']:<14} {step['rc']:>3} {step['seconds']:>8.1f}  {step['note']}")
    for title, summary in report.get("tests", {}).items():
        if not summary.get("ran"):
            continue
        lines.append(f"  {title}: {summary['passed']} passed, {summary['failures'] + summary['errors']} failed, "
                     f"{summary['skipped']} skipped")
        for failed in summary["failed"][:8]:
            lines.append(f"    FAILED {failed[:200]}")
        for reason, count in list(summary["skip_reasons"].items())[:3]:
            lines.append(f"    skipped x{count}: {reason[:200]}")
    if report.get("lossless_gpu"):
        lines.append(f"  lossless gpu: not run: {report['lossless_gpu']}")
    if report.get("sanitizer", {}).get("skipped"):
        lines.append(f"  compute-sanitizer: not run: {report['sanitizer']['skipped'][:160]}")
    for run in report.get("sanitizer", {}).get("runs", []):
        verdict = {True: "clean", False: "FINDINGS", None: f"not checked ({run.get('why')})"}[run["ok"]]
        if run.get("warnings"):
            verdict += f", {run['warnings']} warnings"
        extra = "" if run["gating"] else " (informational)"
        lines.append(f"  compute-sanitizer {run['tool']}: {verdict}{extra}"
                     + (f", {run['errors']} errors" if run.get("errors") else "")
                     + (f": {run['first_findings'][0][:160]}" if run["ok"] is False and run["first_findings"] else ""))
    if kernels := build.get("ptxas"):
        lines.append("  ptxas: " + "; ".join(
            f"{name} {k.get('registers', '?')} regs, {k.get('spill_store_bytes', '?')} B spill"
            for name, k in kernels.items()))
    bench = report.get("bench", {})
    rows = bench.get("timings", [])
    if rows:
        lines.append("  bench, median ms per step (all drafts accepted; host arrays in, tokens out):")
        lines.append(f"  {'γ':>3} {'vocab':>8} {'T':>4} {'numpy':>9} {'torch-cuda':>10} {'cuda':>8} "
                     f"{'cuda/numpy':>10} {'cuda/torch':>10}")
        points = sorted({(r["n_vocab"], r["gamma"], r["temperature"]) for r in rows})
        for n_vocab, gamma, temp in points:
            ref = find_timing(rows, "reference", gamma, n_vocab, temp)
            tor = find_timing(rows, "torch-cuda", gamma, n_vocab, temp)
            cu = find_timing(rows, "cuda", gamma, n_vocab, temp)
            lines.append(f"  {gamma:>3} {n_vocab:>8} {temp:>4g} {_ms(ref):>9} {_ms(tor):>10} {_ms(cu):>8} "
                         f"{_ratio(ref / cu if ref and cu else None):>10} "
                         f"{_ratio(tor / cu if tor and cu else None):>10}")
        for name, reason in bench.get("unavailable", {}).items():
            lines.append(f"  {name}: unavailable: {reason[:160]}")
    if bench.get("h2d_floor_s") is not None:
        lines.append(f"  host->device copy of the goal point's logits alone: {_ms(bench['h2d_floor_s'])} ms")
    if bench.get("goal_repeats_s"):
        lines.append("  goal point, cuda medians of repeated runs: "
                     + ", ".join(_ms(s) for s in bench["goal_repeats_s"]) + " ms")
    batch_rows = report.get("bench_batch", {}).get("timings", [])
    if batch_rows:
        first = batch_rows[0]
        lines.append(f"  batched, median ms per batch (γ={first['gamma']}, V={first['n_vocab']}; B accept calls vs one "
                     "accept_batch):")
        lines.append(f"  {'backend':<11} {'B':>2} {'T':>4} {'B calls':>9} {'1 batch':>9} {'ratio':>7}")
        for row in batch_rows:
            lines.append(f"  {row['backend']:<11} {row['batch']:>2} {row['temperature']:>4g} {_ms(row['per_item_s']):>9} "
                         f"{_ms(row['batch_s']):>9} {_ratio(row['per_item_s'] / row['batch_s'] if row['batch_s'] else None):>7}")
    goal = report.get("goal")
    if goal:
        verdict = {True: "MET", False: "MISSED", None: "NOT MEASURED"}[goal["met"]]
        lines.append(f"  goal γ={goal['gamma']} V={goal['n_vocab']} T={goal['temperature']}: fused "
                     f"{_ratio(goal['vs_numpy'])} NumPy (want >= {GOAL_VS_NUMPY:g}x), "
                     f"{_ratio(goal['vs_torch_cuda'])} torch-CUDA (want >= {GOAL_VS_TORCH:g}x): {verdict}"
                     + (f" ({goal['why']})" if goal.get("why") else ""))
    return "\n".join(lines)


# ---------------------------------------------------------------- steps (need the machine)


def _write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def _load(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _run(cmd: list[str], timeout: float = 60) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        return -1, str(exc)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def nvidia_smi() -> str | None:
    """A read-only query of the GPU's state (clocks, power, temperature), or None."""
    if shutil.which("nvidia-smi") is None:
        return None
    rc, text = _run(["nvidia-smi", f"--query-gpu={NVSMI_QUERY}", "--format=csv"], timeout=30)
    return text if rc == 0 else f"nvidia-smi failed ({rc}): {text[:300]}"


def step_env(work: Path) -> int:
    """Facts about the machine; exit 3 when no GPU is visible (unless GPU_CHECK_FORCE=1)."""
    import numpy as np

    from localspec import hardware
    from localspec.kernels import _build, _cuda

    env: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(),
                           "cpus": os.cpu_count(), "numpy": np.__version__,
                           "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    nvcc = _build.find_nvcc()
    env["nvcc"] = nvcc
    env["nvcc_version"] = _build.tool_version(nvcc) if nvcc else None
    env["driver"] = _cuda.driver_info()
    gpus, nvml_error = hardware.probe_gpus()
    env["nvml_gpus"] = [{"name": g.name, "compute_capability": list(g.compute_capability),
                         "vram_gib": round(g.vram_total_bytes / 2**30, 1), "driver": g.driver_version}
                        for g in gpus]
    env["nvml_error"] = nvml_error
    torch_gpus: int | None = None
    try:
        import torch

        env["torch"] = f"{torch.__version__} (CUDA {torch.version.cuda})"
        torch_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if torch_gpus:
            env["torch_device"] = torch.cuda.get_device_name(0)
            env["torch_capability"] = list(torch.cuda.get_device_capability(0))
    except Exception as exc:  # missing or broken torch: the torch-CUDA column stays empty
        env["torch"] = f"unavailable ({type(exc).__name__}: {exc})"
    env["torch_gpus"] = torch_gpus
    env["gpu_name"] = env["nvml_gpus"][0]["name"] if gpus else env.get("torch_device")
    env["target_arch"] = _build.target_arch()
    env["nvidia_smi"] = nvidia_smi()
    reason = no_gpu_reason(env["cuda_visible_devices"], len(gpus), nvml_error, torch_gpus)
    env["no_gpu_reason"] = reason
    env["forced"] = os.environ.get("GPU_CHECK_FORCE") == "1"
    _write(work / "env.json", env)
    for key in ("python", "numpy", "torch", "nvcc_version", "driver", "gpu_name", "target_arch", "nvidia_smi"):
        print(f"{key}: {env.get(key)}")
    if reason:
        print(f"no GPU: {reason}" + (" (GPU_CHECK_FORCE=1: running every step anyway)" if env["forced"] else ""))
        return 0 if env["forced"] else EXIT_NO_GPU
    return 0


def _ptxas(nvcc: str, arch: str, work: Path) -> tuple[str, dict[str, dict[str, int]]]:
    """`nvcc -Xptxas -v` over accept.cu for `arch` (a second compile to a cubin: the
    registers, spills and shared memory of each kernel)."""
    from localspec.kernels import _build
    from localspec.paths import packaged

    if not arch.startswith("sm_"):
        return f"skipped for arch {arch}", {}
    src = Path(str(packaged("cuda"))) / _build.DEVICE_SOURCE
    rc, text = _run([nvcc, "-O3", "-std=c++17", "-cubin", f"-arch={arch}", "-Xptxas", "-v", str(src),
                     "-o", str(work / "accept.cubin")], timeout=180)
    return (text if rc == 0 else f"ptxas report failed ({rc}): {text[-2000:]}"), ptxas_report(text)


def step_build(work: Path) -> int:
    """Build, load and smoke-test the kernel through the project's own code path."""
    from localspec.errors import KernelUnavailableError
    from localspec.kernels import _build, _cuda, bench
    from localspec.kernels.reference import accept_ref
    from localspec.types import SamplingParams

    env = _load(work / "env.json")
    info: dict[str, Any] = {"ok": False}
    arch = os.environ.get("GPU_CHECK_ARCH") or _build.target_arch()
    info["arch"] = arch
    capability = env.get("torch_capability")
    if capability:
        info["gpu_arch"] = f"sm_{capability[0]}{capability[1]}"
        if arch != info["gpu_arch"]:
            print(f"warning: building for {arch}, but the GPU is {info['gpu_arch']} (target_arch() missed it)")
    info["nvcc_flags"] = [*_build._NVCC_FLAGS, *_build.arch_flags(arch)]
    t0 = time.perf_counter()
    try:
        path = _build.build_device_library(arch)
    except KernelUnavailableError as exc:
        info["error"] = str(exc)
        _write(work / "build.json", info)
        print(f"build failed: {exc}")
        return 1
    info["seconds"] = round(time.perf_counter() - t0, 2)
    info["library"] = str(path)
    info["library_bytes"] = path.stat().st_size
    print(f"built {path} for {arch} in {info['seconds']} s ({info['library_bytes']} bytes)")
    nvcc = _build.find_nvcc()
    cuobjdump = shutil.which("cuobjdump") or (str(Path(nvcc).parent / "cuobjdump") if nvcc else None)
    if cuobjdump and Path(cuobjdump).is_file():
        rc, text = _run([cuobjdump, "--list-elf", str(path)])
        info["elf"] = re.findall(r"\S+\.cubin", text) if rc == 0 else f"cuobjdump failed ({rc}): {text[:300]}"
        print(f"cuobjdump --list-elf: {info['elf']}")
    if nvcc:
        text, kernels = _ptxas(nvcc, arch, work)
        info["ptxas"] = kernels
        info["ptxas_text"] = text[-3000:]
        print(text)
    reason = _cuda.cuda_status()  # the same cache folder: loads the library built above
    info["cuda_status"] = reason
    info["cuda_facts"] = _cuda.cuda_facts()
    if reason is not None:
        print(f"the kernel cannot run: {reason}")
        _write(work / "build.json", info)
        return 0 if env.get("no_gpu_reason") else 1
    backend = _cuda.CudaBackend()
    smoke = []
    for temperature in (0.0, 0.8):
        target, drafts, q, uniforms = bench.step_inputs(4, 32_000, seed=1)
        drafts[2] = (drafts[2] + 1) % 32_000  # a rejection at row 2: recovery path, not only the bonus
        params = SamplingParams(temperature=temperature)
        got = backend.accept(target, drafts, q, uniforms, params)
        ref = accept_ref(target, drafts, q, uniforms, params)
        smoke.append({"temperature": temperature, "got": str(got), "reference": str(ref), "equal": got == ref})
        print(f"smoke T={temperature}: kernel {got} reference {ref}")
    info["smoke"] = smoke
    info["ok"] = all(s["equal"] for s in smoke)
    _write(work / "build.json", info)
    return 0 if info["ok"] else 1


def lossless_gpu_reason() -> str | None:
    """Why tests/engine/test_lossless_gpu.py cannot run here, or None."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        return LOSSLESS_REASON + "; llama-cpp-python is not installed here"
    try:
        from localspec.engine.llama.backend import gpu_offload_supported
        from localspec.store import installed_path

        if not gpu_offload_supported():
            return LOSSLESS_REASON + "; this llama-cpp-python build cannot offload to a GPU"
        for model in ("qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m"):
            installed_path(model)
    except Exception as exc:
        return LOSSLESS_REASON + f"; {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return None


def _h2d_floor(gamma: int, n_vocab: int) -> float | None:
    """Median seconds to copy one step's target + draft logits from NumPy to the GPU
    (torch, synchronized): the transfer every backend here pays per step."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    from localspec.kernels import bench

    target, _, q, _ = bench.step_inputs(gamma, n_vocab)

    def copy() -> None:
        torch.from_numpy(target).to("cuda")
        torch.from_numpy(q).to("cuda")
        torch.cuda.synchronize()

    median, _ = bench.time_step(copy, budget_s=0.25)
    return median


def step_bench(work: Path, quick: bool) -> int:
    """Time the backends with `localspec.kernels.bench` (what `localspec bench kernels` runs)."""
    from localspec.kernels import bench

    ready, missing = bench.available_backends(BENCH_BACKENDS)
    print(f"timing {', '.join(ready)}; unavailable: {missing or 'none'}")
    gammas = QUICK_GAMMAS if quick else BENCH_GAMMAS
    vocabs = QUICK_VOCABS if quick else BENCH_VOCABS
    budget = 0.05 if quick else 0.25
    t0 = time.perf_counter()
    rows = bench.bench_kernels(ready, gammas=gammas, vocabs=vocabs, temperatures=BENCH_TEMPERATURES,
                               budget_s=budget, progress=lambda text: print(f"  {text}", flush=True))
    result: dict[str, Any] = {"timings": [r.as_dict() for r in rows], "unavailable": missing,
                              "grid": {"gammas": gammas, "vocabs": vocabs, "temperatures": BENCH_TEMPERATURES,
                                       "budget_s": budget},
                              "method": "time.perf_counter around each synchronous accept() call (host arrays "
                                        "in, tokens out: every call ends in a device sync), one warm-up, "
                                        "median of >= 3 runs within the budget, one process"}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    if "cuda" in ready and not quick:
        # Time the goal point again, twice, with a longer budget: the spread says what is noise.
        repeats = []
        for _ in range(2):
            again = bench.bench_kernels({"cuda": ready["cuda"]}, gammas=[GOAL_GAMMA], vocabs=[GOAL_VOCAB],
                                        temperatures=[GOAL_TEMPERATURE], budget_s=1.0)
            repeats.append(again[0].median_s)
        result["goal_repeats_s"] = repeats
    result["h2d_floor_s"] = _h2d_floor(GOAL_GAMMA, GOAL_VOCAB)
    result["nvidia_smi_after"] = nvidia_smi()
    result["goal"] = goal_check(result["timings"])
    _write(work / "bench.json", result)
    print(f"bench done in {result['seconds']} s")
    return 0


def step_bench_batch(work: Path) -> int:
    """Time B single calls against one batched call (`localspec.kernels.bench.bench_batch`)."""
    from localspec.kernels import bench

    ready, missing = bench.available_backends(BENCH_BACKENDS)
    print(f"timing batches on {', '.join(ready)}; unavailable: {missing or 'none'}")
    t0 = time.perf_counter()
    rows = bench.bench_batch(ready, batch_sizes=BATCH_SIZES, gamma=BATCH_GAMMA, n_vocab=BATCH_VOCAB,
                             temperatures=BENCH_TEMPERATURES, budget_s=0.25,
                             progress=lambda text: print(f"  {text}", flush=True))
    result: dict[str, Any] = {
        "timings": [r.as_dict() for r in rows], "unavailable": missing,
        "grid": {"batch_sizes": BATCH_SIZES, "gamma": BATCH_GAMMA, "n_vocab": BATCH_VOCAB,
                 "temperatures": BENCH_TEMPERATURES, "budget_s": 0.25},
        "method": "per backend, batch size, temperature: the median of B synchronous accept() calls in a loop, and "
                  "the median of one accept_batch() call on the same B items (the bench workload: every draft "
                  "accepted; target and draft logits are views of one array each, back to back); one warm-up "
                  "each, >= 3 runs within the budget, one process",
        "seconds": round(time.perf_counter() - t0, 1)}
    _write(work / "bench_batch.json", result)
    for row in rows:
        print(f"{row.backend:<11} B={row.batch} T={row.temperature:g}: {row.per_item_s * 1e3:.3f} ms as {row.batch} "
              f"calls, {row.batch_s * 1e3:.3f} ms batched ({row.batch_speedup:.2f}x)")
    print(f"batch bench done in {result['seconds']} s")
    return 0


def sanitize_cases() -> list[tuple[Any, ...]]:
    """Small steps covering both kernels: greedy, T>0 with and without draft logits, top-k +
    top-p, k = 0 (plain), all accepted and a rejection (recovery)."""
    import numpy as np

    from localspec.types import SamplingParams

    rng = np.random.default_rng(21)
    cases = []
    for n_vocab in (7, 4099, 32_000):
        for k in (0, 1, 4, 8):
            for params, with_q in ((SamplingParams(0.0), False), (SamplingParams(0.8), True),
                                   (SamplingParams(0.8), False), (SamplingParams(0.7, top_k=40, top_p=0.9), True)):
                target = (rng.standard_normal((k + 1, n_vocab), dtype=np.float32) * 3.0).astype(np.float32)
                q = np.ascontiguousarray(target[:k]) if with_q else None
                drafts = target[:k].argmax(axis=1).astype(np.int64)
                if k > 1:
                    drafts[k // 2] = (drafts[k // 2] + 1) % n_vocab
                cases.append((target, drafts, q, rng.random(k + 1), params))
    return cases


def step_sanitize_run(max_vocab: int) -> int:
    """What compute-sanitizer watches: the sanitize cases up to `max_vocab` through the kernel."""
    from localspec.kernels import AcceptItem, _cuda
    from localspec.kernels.reference import accept_ref

    backend = _cuda.CudaBackend()  # built already: same LOCALSPEC_CACHE_DIR as the build step
    n = same = 0
    for target, drafts, q, uniforms, params in sanitize_cases():
        if target.shape[1] > max_vocab:
            continue
        n += 1
        same += backend.accept(target, drafts, q, uniforms, params) == accept_ref(target, drafts, q, uniforms, params)
    # The batched kernel too: every case of one vocabulary in one launch (mixed greedy and
    # sampled, with and without q, k = 0..8), against the single calls.
    by_vocab: dict[int, list[AcceptItem]] = {}
    for target, drafts, q, uniforms, params in sanitize_cases():
        if target.shape[1] <= max_vocab:
            by_vocab.setdefault(target.shape[1], []).append(AcceptItem(target, drafts, q, uniforms, params))
    batched = batched_same = 0
    for items in by_vocab.values():
        got = backend.accept_batch(items)
        batched += len(items)
        batched_same += sum(g == backend.accept(*item.args()) for g, item in zip(got, items, strict=True))
    print(f"{SANITIZE_RUN_MARKER} {n} steps, {same} equal to the reference; {batched} steps in {len(by_vocab)} "
          f"batched launches, {batched_same} equal to the single calls")
    return 0


def find_sanitizer() -> str | None:
    """compute-sanitizer on PATH or beside the CUDA toolkit."""
    from localspec.kernels import _build

    found = shutil.which("compute-sanitizer")
    if found:
        return found
    nvcc = _build.find_nvcc()
    roots = [Path(nvcc).resolve().parent.parent] if nvcc else []
    roots.append(Path("/usr/local/cuda"))
    for root in roots:
        for cand in (root / "bin" / "compute-sanitizer", root / "compute-sanitizer" / "compute-sanitizer"):
            if cand.is_file():
                return str(cand)
    return None


def step_sanitize(work: Path) -> int:
    """Each compute-sanitizer tool over `sanitize-run`; exit 1 on findings of a gating tool."""
    from localspec.kernels import _cuda

    result: dict[str, Any] = {"runs": []}
    sanitizer = find_sanitizer()
    reason = None if sanitizer else "compute-sanitizer not found"
    reason = reason or _cuda.cuda_status()
    if reason:
        result["skipped"] = reason
        _write(work / "sanitizer.json", result)
        print(f"sanitizer: skipped: {reason}")
        return 0
    assert sanitizer is not None
    result["sanitizer"] = sanitizer
    for tool, max_vocab in SANITIZER_TOOLS.items():
        cmd = [sanitizer, "--tool", tool, "--error-exitcode", "9", "--print-limit", "20",
               sys.executable, str(Path(__file__).resolve()), "sanitize-run", str(max_vocab)]
        print(f"-- {' '.join(cmd)}", flush=True)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SANITIZER_TIMEOUT_S)
            text = (proc.stdout + proc.stderr).strip()
            verdict = sanitizer_verdict(tool, proc.returncode, text)
        except subprocess.TimeoutExpired:
            text = f"timed out after {SANITIZER_TIMEOUT_S} s"
            verdict = {"tool": tool, "rc": None, "errors": None, "first_findings": [], "ok": None,
                       "why": text, "gating": tool in SANITIZER_GATING}
        verdict["seconds"] = round(time.perf_counter() - t0, 1)
        result["runs"].append(verdict)
        print(text[-2500:])
    _write(work / "sanitizer.json", result)
    bad = [r["tool"] for r in result["runs"] if r["gating"] and r["ok"] is False]
    print(f"sanitizer: {'findings in ' + ', '.join(bad) if bad else 'no findings from a gating tool'}")
    return 1 if bad else 0


def step_report(work: Path, out: Path) -> int:
    """Merge the steps' files into OUT/gpu_check.json and print the table; exit 1 on failure."""
    env = _load(work / "env.json")
    steps = read_steps(work / "steps.tsv")
    report: dict[str, Any] = {"status": overall_status(env, steps), "env": env, "steps": steps,
                              "build": _load(work / "build.json"),
                              "tests": {title: junit_summary(work / name) for title, name in JUNIT_FILES.items()},
                              "bench": _load(work / "bench.json"), "bench_batch": _load(work / "bench_batch.json"),
                              "sanitizer": _load(work / "sanitizer.json")}
    if env.get("no_gpu_reason"):
        dry = "dry run without a GPU (GPU_CHECK_FORCE=1), " if env.get("forced") else ""
        report["reason"] = f"{dry}no GPU: {env['no_gpu_reason']}"
    elif not env:
        report["status"] = "failed"
        report["reason"] = "the env step wrote nothing"
    lossless = (work / "lossless.txt")
    if lossless.is_file():
        report["lossless_gpu"] = lossless.read_text().strip()
    report["goal"] = report["bench"].get("goal") if report["bench"] else None
    _write(out / "gpu_check.json", report)
    print(render_table(report))
    return 1 if report["status"] == "failed" else 0


def main(argv: list[str]) -> int:
    """Dispatch one step (see the module docstring)."""
    if len(argv) < 1:
        print(__doc__)
        return 2
    step, args = argv[0], argv[1:]
    if step == "env":
        return step_env(Path(args[0]))
    if step == "build":
        return step_build(Path(args[0]))
    if step == "lossless-gpu":
        reason = lossless_gpu_reason()
        if reason:
            print(reason)
            return EXIT_NO_GPU
        return 0
    if step == "bench":
        return step_bench(Path(args[0]), quick="--quick" in args[1:])
    if step == "bench-batch":
        return step_bench_batch(Path(args[0]))
    if step == "sanitize":
        return step_sanitize(Path(args[0]))
    if step == "sanitize-run":
        return step_sanitize_run(int(args[0]))
    if step == "report":
        return step_report(Path(args[0]), Path(args[1]))
    print(f"unknown step {step!r}\n{__doc__}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
