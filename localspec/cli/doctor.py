"""CLI: `localspec doctor` — what this machine can run, and why not where it cannot."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

DOCTOR_EXAMPLES = ["localspec doctor", "localspec doctor --json"]


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


def doctor_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Show which acceptance backends can run here and why the others cannot."""
    report = collect_report()
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
