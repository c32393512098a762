"""The model flags every command shares (llama.cpp names), declared once, and the one way
to turn them into a target/drafter pair (`ModelFlags`).

A command lists the flags it takes as parameters with these defaults
(`model: str | None = opt.MODEL`, ...) and gathers them into a `ModelFlags`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from localspec.types import DEFAULT_GAMMA, NUMERICS_MODES, ModelSpec

if TYPE_CHECKING:
    from localspec.engine import Engine


def _numerics(value: str) -> str:
    if value not in NUMERICS_MODES:
        raise typer.BadParameter(f"choose one of {', '.join(NUMERICS_MODES)} (got {value!r})")
    return value


MODEL = typer.Option(None, "-m", "--model", help="Target GGUF path (default: the offline default pair, "
                     "Qwen2.5-Coder 1.5B ← 0.5B).")
MODEL_DRAFT = typer.Option(None, "-md", "--model-draft", help="Drafter GGUF path (needs -m): a small model with the "
                           "target's tokenizer, or an EAGLE-3/DFlash/DSpark drafter made for the target (the header "
                           "tells which); 'none' for no drafter.")
NGL = typer.Option(0, "-ngl", "--n-gpu-layers", help="Target layers on the GPU (-1 = all).")
NGLD = typer.Option(0, "-ngld", "--n-gpu-layers-draft", help="Drafter layers on the GPU (-1 = all).")
CTX = typer.Option(4096, "-c", "--ctx-size", help="Context window in tokens.")
THREADS = typer.Option(None, "-t", "--threads", help="CPU threads (default: physical cores).")
FLASH_ATTN = typer.Option(None, "-fa/-no-fa", "--flash-attn/--no-flash-attn",
                          help="Flash attention (default: llama.cpp decides).")
NUMERICS = typer.Option("exact", "--numerics", callback=_numerics,
                        help="exact: batch-invariant kernels, greedy output identical to plain decoding; "
                        "fast: llama.cpp's fastest kernels.")
KERNEL = typer.Option(None, "--kernel", help="Acceptance backend: auto, reference, torch, cuda "
                      "(default: LOCALSPEC_KERNEL or auto).")
def parse_rpc(value: str | None) -> tuple[str, ...]:
    """`--rpc host:port[,host:port…]` as a tuple of endpoints (empty: no workers)."""
    if not value:
        return ()
    endpoints = tuple(e.strip() for e in value.split(",") if e.strip())
    for e in endpoints:
        host, sep, port = e.rpartition(":")
        if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
            raise typer.BadParameter(f"each RPC worker is host:port (e.g. 127.0.0.1:50052), got {e!r}",
                                     param_hint="--rpc")
    return endpoints


def _rpc(value: str | None) -> str | None:
    parse_rpc(value)
    return value


RPC = typer.Option(None, "--rpc", callback=_rpc,
                   help="RPC workers host:port[,host:port…] (`localspec worker` there) that take the target's "
                   "-ngl layers; the drafter stays local.")
GAMMA = typer.Option(None, "--spec-draft-n-max", "--draft-max",
                     help=f"Draft length γ (the maximum for adaptive; default {DEFAULT_GAMMA}).")


@dataclass(frozen=True)
class ModelFlags:
    """The model flags of one command line."""

    model: str | None = None
    model_draft: str | None = None
    n_gpu_layers: int = 0
    n_gpu_layers_draft: int = 0
    ctx_size: int = 4096
    threads: int | None = None
    flash_attn: bool | None = None
    numerics: str = "exact"
    kernel: str | None = None
    gamma: int | None = None
    """Engine default draft length; None = DEFAULT_GAMMA."""
    rpc: str | None = None
    """`--rpc`: workers for the target's offloaded layers."""

    @property
    def no_drafter(self) -> bool:
        """`-md none`: plain decoding and n-gram drafting only."""
        return self.model_draft is not None and self.model_draft.lower() == "none"

    def pair_paths(self) -> tuple[str, str | None]:
        """(target, drafter or None). Nothing given: the offline default pair; `-md none`
        alone: its target without a drafter; `-md PATH` needs `-m`."""
        if self.model is None:
            if self.model_draft is not None and not self.no_drafter:
                raise typer.BadParameter("-md needs -m (the target it drafts for)", param_hint="-md")
            from localspec.store import default_pair_paths

            target, draft = default_pair_paths()
            return str(target), None if self.no_drafter else str(draft)
        return self.model, None if self.model_draft is None or self.no_drafter else self.model_draft

    def spec(self, path: str, *, draft: bool = False) -> ModelSpec:
        """How to load `path` as the target (or, with `draft`, the drafter)."""
        return ModelSpec(path, n_gpu_layers=self.n_gpu_layers_draft if draft else self.n_gpu_layers,
                         n_ctx=self.ctx_size, n_threads=self.threads, flash_attn=self.flash_attn,
                         numerics=self.numerics, rpc=() if draft else parse_rpc(self.rpc))

    def specs(self) -> tuple[ModelSpec, ModelSpec | None]:
        """The pair to load."""
        target, draft = self.pair_paths()
        return self.spec(target), self.spec(draft, draft=True) if draft else None

    def build_engine(self) -> Engine:
        """An Engine for the flags (pair compatibility is checked before weights load)."""
        from localspec.engine import Engine

        target, draft = self.specs()
        return Engine(target, draft, kernel=self.kernel, gamma=DEFAULT_GAMMA if self.gamma is None else self.gamma)
