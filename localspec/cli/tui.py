"""CLI: `localspec tui` (also what `localspec` with no command runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from localspec.cli import _options as opt
from localspec.cli._schema import JSON_SCHEMA_HELP, schema_constraint

TUI_EXAMPLES = [
    "localspec                      # the offline default pair (Qwen2.5-Coder 1.5B ← 0.5B)",
    "localspec tui -m target.gguf -md draft.gguf -ngl 99 -ngld 99 -c 8192 --numerics fast",
    "localspec tui --json-schema answer.schema.json   # every reply matches the schema",
]


def tui_command(
    model: str | None = opt.MODEL,
    model_draft: str | None = opt.MODEL_DRAFT,
    n_gpu_layers: int = opt.NGL,
    n_gpu_layers_draft: int = opt.NGLD,
    ctx_size: int = opt.CTX,
    threads: int | None = opt.THREADS,
    flash_attn: bool | None = opt.FLASH_ATTN,
    numerics: str = opt.NUMERICS,
    rpc: str | None = opt.RPC,
    kernel: str | None = opt.KERNEL,
    draft_n_max: int | None = opt.GAMMA,
    temp: Annotated[float, typer.Option("--temp", help="Sampling temperature (0 = greedy).")] = 0.0,
    seed: Annotated[int | None, typer.Option("--seed", help="Sampling seed (default: random).")] = None,
    json_schema: Annotated[Path | None, typer.Option("--json-schema", help=JSON_SCHEMA_HELP, dir_okay=False)] = None,
) -> None:
    """Open the TUI: choose, download and chat with a speculative pair, stats live."""
    from localspec.tui.app import make_app
    from localspec.tui.settings import ChatSettings, TuiSettings

    schema = schema_constraint(json_schema).source if json_schema is not None else None

    flags = opt.ModelFlags(
        model=model, model_draft=model_draft, n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft,
        ctx_size=ctx_size, threads=threads, flash_attn=flash_attn, numerics=numerics, rpc=rpc, kernel=kernel,
        gamma=draft_n_max,
    )
    # nothing given: the app loads the default pair itself (or opens the models screen)
    target, draft = flags.pair_paths() if model is not None or model_draft is not None else (None, None)
    settings = TuiSettings(
        target=target, draft=draft, n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft,
        n_ctx=ctx_size, n_threads=threads, flash_attn=flash_attn, numerics=numerics, kernel=kernel,
        rpc=opt.parse_rpc(rpc),
        chat=ChatSettings(temperature=temp, seed=seed, gamma=draft_n_max, json_schema=schema),
    )
    make_app(settings=settings).run()


def register(app: typer.Typer) -> None:
    """Add the `tui` command to `app`."""
    app.command(name="tui", epilog="Examples:\n\n" + "\n\n".join(TUI_EXAMPLES))(tui_command)
