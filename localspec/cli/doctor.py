"""CLI: `localspec doctor` — what this machine can run, and why not where it cannot."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

DOCTOR_EXAMPLES = [
    "localspec doctor",
    "localspec doctor --json",
    "localspec doctor --measure            # time exact vs fast numerics on the default target",
    "localspec doctor --measure -m big.gguf",
]


def _gib(n: int | None) -> str:
    return f"{n / 2**30:.1f} GiB" if n is not None else "?"


def collect_report() -> dict[str, Any]:
    """Kernel backends (and why each is or isn't available), nvcc, driver, GPUs and RAM."""
    from localspec.kernels import backend_status
    from localspec.kernels._build import find_nvcc, target_arch, tool_version
    from localspec.kernels._cuda import cuda_facts, driver_info

    nvcc = find_nvcc()
    report: dict[str, Any] = {
        "kernels": backend_status(),
        "nvcc": {"path": nvcc, "version": tool_version(nvcc) if nvcc else None},
        "kernel_arch": target_arch(),
        "kernel_build": cuda_facts(),
        "driver": driver_info(),
    }
    try:
        from localspec import hardware

        probe = getattr(hardware, "probe", None)
    except ImportError:
        probe = None
    try:
        from localspec.engine.numerics import describe

        report["numerics"] = describe()
    except Exception as exc:  # llama.cpp missing or broken: say so, keep going
        report["numerics"] = {"error": f"{type(exc).__name__}: {exc}"}
    if probe is not None:
        try:
            hw = probe()
            report["hardware"] = {
                "gpus": [
                    {"index": g.index, "name": g.name, "vram_total": _gib(g.vram_total_bytes),
                     "vram_free": _gib(g.vram_free_bytes),
                     "compute_capability": ".".join(str(c) for c in g.compute_capability),
                     "driver": g.driver_version, "cuda_driver": g.cuda_driver_version_str}
                    for g in getattr(hw, "gpus", [])
                ],
                "gpu_error": getattr(hw, "gpu_error", None),
                "ram_total": _gib(getattr(hw, "ram_total_bytes", None)),
                "ram_available": _gib(getattr(hw, "ram_available_bytes", None)),
                "cpu": f"{getattr(hw, 'cpu_cores_physical', '?')} cores / {getattr(hw, 'cpu_threads', '?')} threads"
                + (", AMX" if getattr(hw, "has_amx", False) else ""),
            }
        except Exception as exc:  # the doctor reports, it does not crash
            report["hardware"] = {"error": f"{type(exc).__name__}: {exc}"}
    return report


def measure_numerics(model: str | None, threads: int | None) -> list[dict[str, Any]]:
    """Plain decode speed and verify-batch cost in each numerics mode, side by side."""
    from dataclasses import asdict

    from localspec.engine.numerics import measure_costs

    if model is None:
        from localspec.store import default_pair_paths

        model = str(default_pair_paths()[0])
    return [asdict(c) | {"model": model} for c in measure_costs(model, n_threads=threads)]


def doctor_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    measure: Annotated[bool, typer.Option("--measure", help="Also time exact vs fast numerics on a model (about a minute on a CPU).")] = False,
    model: Annotated[str | None, typer.Option("-m", "--model", help="GGUF to time with --measure (default: the offline target).")] = None,
    threads: Annotated[int | None, typer.Option("-t", "--threads", help="CPU threads for --measure (default: physical cores).")] = None,
) -> None:
    """Show which acceptance backends can run here and why the others cannot, and what each
    numerics mode means (and, with --measure, costs) on this machine."""
    report = collect_report()
    if measure:
        report["numerics_costs"] = measure_numerics(model, threads)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    from rich.console import Console

    out = Console(highlight=False)
    out.print("[bold]Acceptance backends[/bold]")
    for name, reason in report["kernels"].items():
        mark = "[green]available[/green]" if reason is None else f"[red]unavailable[/red]: {reason}"
        out.print(f"  {name:<11} {mark}")
    nvcc = report["nvcc"]
    out.print("[bold]CUDA toolchain[/bold]")
    out.print(f"  nvcc        {nvcc['path'] or 'not found'}" + (f" ({nvcc['version']})" if nvcc["version"] else ""))
    out.print(f"  kernel arch {report['kernel_arch']}")
    if "library" in report["kernel_build"]:
        out.print(f"  kernel .so  {report['kernel_build']['library']}")
    out.print(f"  driver      {report['driver']}")
    num = report.get("numerics", {})
    out.print("[bold]Numerics[/bold] (--numerics exact|fast)")
    if "error" in num:
        out.print(f"  unavailable: {num['error']}")
    else:
        out.print(f"  exact       {num['exact']}" + ("  [dim](default)[/dim]" if num["default"] == "exact" else ""))
        out.print(f"  fast        {num['fast']}" + ("  [dim](default)[/dim]" if num["default"] == "fast" else ""))
        out.print(f"  GPU         {num['gpu_layers']}")
    for c in report.get("numerics_costs", []):
        out.print(f"  {c['mode']:<11} plain decode {c['decode_tok_s']:.1f} tok/s, verify batch of {c['verify_rows']} rows "
                  f"= {c['verify_cost']:.2f}× one row, rows batch-invariant: {'yes' if c['batch_invariant'] else 'no'}")
    costs = {c["mode"]: c for c in report.get("numerics_costs", [])}
    if {"exact", "fast"} <= costs.keys():
        ratio = costs["exact"]["decode_tok_s"] / costs["fast"]["decode_tok_s"]
        out.print(f"  exact decodes at {ratio:.2f}× the speed of fast here")
    hw = report.get("hardware")
    if hw:
        out.print("[bold]Hardware[/bold]")
        if "error" in hw:
            out.print(f"  probe failed: {hw['error']}")
        else:
            for g in hw["gpus"]:
                out.print(f"  GPU {g['index']}       {g['name']}, {g['vram_free']} free of {g['vram_total']}, "
                          f"sm {g['compute_capability']}, driver {g['driver']} (CUDA {g['cuda_driver']})")
            if not hw["gpus"]:
                out.print(f"  GPU         {hw['gpu_error'] or 'none'}")
            out.print(f"  RAM         {hw['ram_available']} available of {hw['ram_total']}")
            out.print(f"  CPU         {hw['cpu']}")


def register(app: typer.Typer) -> None:
    """Add `doctor` to the root app."""
    app.command("doctor", help=(doctor_command.__doc__ or "") + "\n\nExamples:\n\n" + "\n\n".join(DOCTOR_EXAMPLES))(
        doctor_command
    )
