"""CLI: `localspec bench load` — the real server under concurrent `openai` clients."""

from __future__ import annotations

import platform
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from localspec.cli import _options as opt

BENCH_LOAD_EXAMPLES = [
    "localspec bench load                                   # --parallel 1,4 × none,adaptive at 1,2,4,8 clients",
    "localspec bench load --parallel 1,2,4,8 --drafters none,ngram,adaptive -n 128 --json load.json",
    "localspec bench load --parallel 1,4 --concurrency 1,2,4 --repeat 3     # pooled over 3 rotations",
    "localspec bench load -m target.gguf -md draft.gguf -ngl 99 -ngld 99 --concurrency 1,4,16",
]


def _ints(text: str, name: str, low: int = 1) -> tuple[int, ...]:
    try:
        vals = tuple(dict.fromkeys(int(x) for x in text.split(",") if x.strip()))
    except ValueError:
        raise typer.BadParameter(f"give comma-separated integers (got {text!r})", param_hint=name) from None
    if not vals or min(vals) < low:
        raise typer.BadParameter(f"each value must be at least {low}", param_hint=name)
    return vals


def bench_load_command(
    model: str | None = opt.MODEL,
    model_draft: str | None = opt.MODEL_DRAFT,
    parallel: Annotated[str, typer.Option("--parallel", help="Server --parallel values, comma-separated.")] = "1,4",
    drafters: Annotated[str, typer.Option("--drafters", help="Server --drafter values: none (speculation off), adaptive, model, ngram.")] = "none,adaptive",
    concurrency: Annotated[str, typer.Option("--concurrency", help="Concurrent clients, comma-separated.")] = "1,2,4,8",
    per_client: Annotated[int, typer.Option("--requests-per-client", min=1, help="Requests each client sends back to back per level.")] = 2,
    max_tokens: Annotated[int, typer.Option("-n", "--max-tokens", min=1, help="max_tokens of every request.")] = 64,
    repeats: Annotated[int, typer.Option("--repeat", min=1, help="Run every level this many times (new prompts each time) and pool them.")] = 1,
    sequential: Annotated[bool, typer.Option("--sequential", help="One server in memory at a time (when they do not fit together); the default runs them side by side, level by level.")] = False,
    temp: Annotated[float, typer.Option("--temp", min=0.0, help="temperature of every request (0 = greedy).")] = 0.0,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write every level's numbers here.")] = None,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="Write the table as markdown here.")] = None,
    log: Annotated[Path | None, typer.Option("--server-log", help="Append the servers' output here.")] = None,
    n_gpu_layers: int = opt.NGL,
    n_gpu_layers_draft: int = opt.NGLD,
    ctx_size: int = opt.CTX,
    threads: int | None = opt.THREADS,
    numerics: str = opt.NUMERICS,
) -> None:
    """Aggregate tok/s and latency of the real server per --parallel, drafter and client count."""
    from localspec.bench.load import bench_load, table, to_json

    serve_args = ["-c", str(ctx_size), "-ngl", str(n_gpu_layers), "-ngld", str(n_gpu_layers_draft),
                  "--numerics", numerics]
    if model:
        serve_args += ["-m", model]
    if model_draft:
        serve_args += ["-md", model_draft]
    if threads:
        serve_args += ["-t", str(threads)]
    drafter_names = tuple(dict.fromkeys(d.strip() for d in drafters.split(",") if d.strip()))
    bad = [d for d in drafter_names if d not in ("none", "adaptive", "model", "ngram")]
    if bad or not drafter_names:
        raise typer.BadParameter(f"choose from none, adaptive, model, ngram (got {drafters!r})", param_hint="--drafters")
    results = bench_load(
        serve_args, _ints(parallel, "--parallel"), drafter_names, _ints(concurrency, "--concurrency"),
        max_tokens=max_tokens, per_client=per_client, temperature=temp, repeats=repeats,
        sequential=sequential, log_path=str(log) if log else None,
        progress=lambda line: typer.echo(line, err=True),
    )
    text = table(results)
    typer.echo(text)
    meta = {"command": shlex.join(["localspec", "bench", "load", *sys.argv[3:]]), "machine": platform.processor()
            or platform.machine(), "python": platform.python_version()}
    if json_out:
        json_out.write_text(to_json(results, meta), encoding="utf-8")
    if markdown:
        markdown.write_text(f"`{meta['command']}`\n\n{text}\n", encoding="utf-8")


def register(app: typer.Typer) -> None:
    """Add `load` to the `bench` group."""
    app.command("load", help=(bench_load_command.__doc__ or "") + "\n\nExamples:\n\n" + "\n\n".join(BENCH_LOAD_EXAMPLES))(
        bench_load_command)
