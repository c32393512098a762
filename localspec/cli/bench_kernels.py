"""CLI: `localspec bench kernels` — time the acceptance backends per speculative step."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from localspec.kernels import bench

BENCH_KERNELS_EXAMPLES = [
    "localspec bench kernels",
    "localspec bench kernels --backend reference --backend torch-cpu --gamma 4 --vocab 151936",
    "localspec bench kernels --json > kernels.json",
    "localspec bench kernels --batch 1 --batch 4 --batch 8   # B single calls vs one batched call",
]


def bench_kernels_command(
    backend: Annotated[list[str] | None, typer.Option("--backend", "-b", help="Backends to time (repeatable); default: all available.")] = None,
    gamma: Annotated[list[int] | None, typer.Option("--gamma", help="Draft lengths γ (repeatable); default 1 4 8 16.")] = None,
    vocab: Annotated[list[int] | None, typer.Option("--vocab", help="Vocabulary sizes (repeatable); default 49152 151936 262144.")] = None,
    temp: Annotated[list[float] | None, typer.Option("--temp", help="Temperatures (repeatable); default 0 and 0.8.")] = None,
    batch: Annotated[list[int] | None, typer.Option("--batch", help="Sequences per batch (repeatable): time B single calls against one batched call (what --parallel does each step) at the first --gamma and --vocab, instead of the per-step table.", min=1)] = None,
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
    temperatures = temp if temp else bench.TEMPERATURES
    if batch:
        _batch_table(bench.bench_batch(ready, batch_sizes=batch, gamma=gamma[0] if gamma else bench.BATCH_GAMMA,
                                       n_vocab=vocab[0] if vocab else bench.BATCH_VOCAB, temperatures=temperatures,
                                       budget_s=budget), missing, as_json)
        return
    rows = bench.bench_kernels(
        ready, gammas=gamma or bench.GAMMAS, vocabs=vocab or bench.VOCABS, temperatures=temperatures, budget_s=budget,
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


def _batch_table(rows: list[bench.BatchTiming], missing: dict[str, str], as_json: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    if as_json:
        typer.echo(json.dumps({"batch_timings": [r.as_dict() for r in rows], "unavailable": missing}, indent=2))
        return
    first = rows[0] if rows else None
    title = "Acceptance of a batch of sequences: B single calls vs one batched call"
    if first is not None:
        title += f" (γ={first.gamma}, vocab {first.n_vocab:,})"
    table = Table(title=title)
    for col in ("B", "T", "backend", "B calls", "one batch", "ratio"):
        table.add_column(col, justify="left" if col == "backend" else "right")
    for r in rows:
        table.add_row(str(r.batch), f"{r.temperature:g}", r.backend, f"{r.per_item_s * 1e3:.3f} ms",
                      f"{r.batch_s * 1e3:.3f} ms", f"{r.batch_speedup:.2f}x")
    out = Console()
    out.print(table)
    for name, reason in missing.items():
        out.print(f"[dim]{name}: unavailable: {reason}[/dim]")


def register(app: typer.Typer) -> None:
    """Add `kernels` to the `bench` group."""
    app.command("kernels", help=(bench_kernels_command.__doc__ or "") + "\n\nExamples:\n\n" + "\n\n".join(BENCH_KERNELS_EXAMPLES))(
        bench_kernels_command
    )
