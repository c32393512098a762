"""CLI: `localspec bench kernels` — time the acceptance backends per speculative step."""

from __future__ import annotations

import json
from typing import Annotated

import typer

BENCH_KERNELS_EXAMPLES = [
    "localspec bench kernels",
    "localspec bench kernels --backend reference --backend torch-cpu --gamma 4 --vocab 151936",
    "localspec bench kernels --json > kernels.json",
]


def bench_kernels_command(
    backend: Annotated[list[str] | None, typer.Option("--backend", "-b", help="Backends to time (repeatable); default: all available.")] = None,
    gamma: Annotated[list[int] | None, typer.Option("--gamma", help="Draft lengths γ (repeatable); default 1 4 8 16.")] = None,
    vocab: Annotated[list[int] | None, typer.Option("--vocab", help="Vocabulary sizes (repeatable); default 49152 151936 262144.")] = None,
    temp: Annotated[list[float] | None, typer.Option("--temp", help="Temperatures (repeatable); default 0 and 0.8.")] = None,
    budget: Annotated[float, typer.Option("--budget", help="Seconds of timed runs per cell (at least 3 runs).")] = 0.25,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Time each acceptance backend per step (median) and its speedup over the reference."""
    from rich.console import Console
    from rich.table import Table

    from localspec.kernels import bench

    names = list(backend) if backend else None
    if names and "reference" not in names:
        names = ["reference", *names]
    ready, missing = bench.available_backends(names)
    # No live spinner: its refresh thread competes with torch's CPU threads and skews timings.
    Console(stderr=True).print(f"timing {', '.join(ready)} (one process, median per cell)...", style="dim")
    rows = bench.bench_kernels(
        ready, gammas=gamma or bench.GAMMAS, vocabs=vocab or bench.VOCABS,
        temperatures=temp if temp else bench.TEMPERATURES, budget_s=budget,
    )
    if as_json:
        typer.echo(json.dumps({"timings": [r.as_dict() for r in rows], "unavailable": missing}, indent=2))
        return
    table = Table(title="Acceptance backends: time per speculative step (all drafts accepted)")
    for col, justify in (("γ", "right"), ("vocab", "right"), ("T", "right"), ("backend", "left"),
                         ("median", "right"), ("vs reference", "right"), ("runs", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        speedup = f"{r.speedup:.2f}x" if r.speedup is not None else "-"
        table.add_row(str(r.gamma), f"{r.n_vocab:,}", f"{r.temperature:g}", r.backend,
                      f"{r.median_s * 1e3:.3f} ms", speedup, str(r.runs))
    out = Console()
    out.print(table)
    for name, reason in missing.items():
        out.print(f"[dim]{name}: unavailable: {reason}[/dim]")


def register(app: typer.Typer) -> None:
    """Add `kernels` to the `bench` group."""
    app.command("kernels", help=(bench_kernels_command.__doc__ or "") + "\n\nExamples:\n\n" + "\n\n".join(BENCH_KERNELS_EXAMPLES))(
        bench_kernels_command
    )
