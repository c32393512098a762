"""Model-loading flags shared by commands (llama.cpp names), and building an Engine from them."""

from __future__ import annotations

from pathlib import Path

import typer

from localspec.types import ModelSpec

MODEL = typer.Option(None, "-m", "--model", help="Target GGUF path (default: the offline Qwen2.5-Coder 1.5B).")
MODEL_DRAFT = typer.Option(None, "-md", "--model-draft", help="Drafter GGUF path (default: the offline 0.5B; 'none' for no drafter).")
NGL = typer.Option(0, "-ngl", "--n-gpu-layers", help="Target layers on the GPU (-1 = all).")
NGLD = typer.Option(0, "-ngld", "--n-gpu-layers-draft", help="Drafter layers on the GPU (-1 = all).")
CTX = typer.Option(4096, "-c", "--ctx-size", help="Context window in tokens.")
THREADS = typer.Option(None, "-t", "--threads", help="CPU threads (default: physical cores).")
GAMMA = typer.Option(4, "--spec-draft-n-max", "--draft-max", help="Draft length γ (maximum for adaptive).")
KERNEL = typer.Option(None, "--kernel", help="Acceptance backend: auto, reference, torch, cuda (env LOCALSPEC_KERNEL).")
FLASH_ATTN = typer.Option(None, "-fa/-no-fa", "--flash-attn/--no-flash-attn", help="Flash attention (default: llama.cpp decides).")


def resolve_pair(model: str | None, model_draft: str | None) -> tuple[str, str | None]:
    """Paths of target and drafter; the offline default pair fills what is not given."""
    from localspec.store import default_pair_paths

    if model is None:
        target, draft = default_pair_paths()
        if model_draft is None:
            return str(target), str(draft)
        return str(target), None if model_draft.lower() == "none" else model_draft
    if model_draft is None or model_draft.lower() == "none":
        return model, None
    return model, model_draft


def build_engine(
    model: str | None,
    model_draft: str | None,
    *,
    ngl: int = 0,
    ngld: int = 0,
    ctx: int = 4096,
    threads: int | None = None,
    gamma: int = 4,
    kernel: str | None = None,
    flash_attn: bool | None = None,
) -> object:
    """An Engine for the flags (pair compatibility is checked before weights load)."""
    from localspec.engine import Engine

    target_path, draft_path = resolve_pair(model, model_draft)
    target = ModelSpec(target_path, n_gpu_layers=ngl, n_ctx=ctx, n_threads=threads, flash_attn=flash_attn,
                       name=Path(target_path).stem)
    draft = (
        ModelSpec(draft_path, n_gpu_layers=ngld, n_ctx=ctx, n_threads=threads, flash_attn=flash_attn,
                  name=Path(draft_path).stem)
        if draft_path
        else None
    )
    return Engine(target, draft, kernel=kernel, gamma=gamma)
