"""CLI: `localspec tui` (also what `localspec` with no command runs)."""

from __future__ import annotations

from typing import Annotated

import typer

TUI_EXAMPLES = [
    "localspec                      # the offline default pair (Qwen2.5-Coder 1.5B ← 0.5B)",
    "localspec tui -m target.gguf -md draft.gguf -ngl 99 -ngld 99 -c 8192",
]


def tui_command(
    model: Annotated[str | None, typer.Option("-m", "--model", help="Target GGUF path (default: the offline default pair).")] = None,
    model_draft: Annotated[str | None, typer.Option("-md", "--model-draft", help="Drafter GGUF path (same tokenizer as the target).")] = None,
    n_gpu_layers: Annotated[int, typer.Option("-ngl", "--n-gpu-layers", help="Target layers on the GPU (-1 = all).")] = 0,
    n_gpu_layers_draft: Annotated[int, typer.Option("-ngld", "--n-gpu-layers-draft", help="Drafter layers on the GPU.")] = 0,
    ctx_size: Annotated[int, typer.Option("-c", "--ctx-size", help="Context window in tokens.")] = 4096,
    kernel: Annotated[str | None, typer.Option("--kernel", help="Acceptance backend (default: LOCALSPEC_KERNEL or auto).")] = None,
    temp: Annotated[float, typer.Option("--temp", help="Sampling temperature (0 = greedy).")] = 0.0,
    seed: Annotated[int | None, typer.Option("--seed", help="Sampling seed (default: random).")] = None,
    draft_n_max: Annotated[int | None, typer.Option("--spec-draft-n-max", help="Draft length γ (maximum for adaptive).")] = None,
) -> None:
    """Open the TUI: choose, download and chat with a speculative pair, stats live."""
    from localspec.tui.app import make_app
    from localspec.tui.settings import ChatSettings, TuiSettings

    if model_draft and not model:
        raise typer.BadParameter("-md needs -m (the target it drafts for)", param_hint="-md")
    settings = TuiSettings(
        target=model, draft=model_draft, n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft,
        n_ctx=ctx_size, kernel=kernel, chat=ChatSettings(temperature=temp, seed=seed, gamma=draft_n_max),
    )
    make_app(settings=settings).run()


def register(app: typer.Typer) -> None:
    """Add the `tui` command to `app`."""
    app.command(name="tui", epilog="Examples:\n\n" + "\n\n".join(TUI_EXAMPLES))(tui_command)
