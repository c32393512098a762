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
PARALLEL = typer.Option(None, "-np", "--parallel",
                        help="Generations run together, verified in one batch per step (continuous batching); "
                        "default: 4 where the extra KV caches fit in memory and the drafter allows it, else 1.")
GAMMA = typer.Option(None, "--spec-draft-n-max", "--draft-max",
                     help=f"Draft length γ (the maximum for adaptive; default {DEFAULT_GAMMA}).")


AUTO_PARALLEL = 4
"""The server's default `--parallel` where memory allows: at concurrency 4 a CPU's verify of
4 rows costs ~2.6x one row, so batching gains ~1.5x, and a GPU's far more."""


def _free_memory(*, on_gpu: bool) -> int | None:
    """Bytes free now: the first GPU's with `on_gpu` (when NVML answers), else RAM."""
    if on_gpu:
        from localspec.hardware import probe_gpus

        gpus, _ = probe_gpus()
        if gpus:
            return int(gpus[0].vram_free_bytes)
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # psutil unsupported here
        return None


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
    parallel: int | None = None
    """`--parallel`: sequences generated together; None = `auto_parallel`."""

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
        parallel = self.parallel if self.parallel is not None else 1
        if parallel < 1:
            raise typer.BadParameter(f"--parallel must be at least 1, got {parallel}", param_hint="--parallel")
        return Engine(target, draft, kernel=self.kernel, gamma=DEFAULT_GAMMA if self.gamma is None else self.gamma,
                      parallel=parallel)

    def auto_parallel(self, most: int = AUTO_PARALLEL) -> int:
        """`--parallel` when not given (the server's default): `most` sequences where their
        KV caches fit in a quarter of the memory free now (RAM, or the GPU's with -ngl),
        fewer where they do not, 1 for a hidden-state drafter (it reads one sequence)."""
        if self.parallel is not None:
            return self.parallel
        target, draft = self.pair_paths()
        from localspec.errors import LocalSpecError
        from localspec.gguf_info import hidden_drafter_info, kv_bytes_per_token

        try:
            if draft is not None and hidden_drafter_info(draft) is not None:
                return 1
            per_seq = kv_bytes_per_token(target) * self.ctx_size
            if draft is not None:
                per_seq += kv_bytes_per_token(draft) * self.ctx_size
        except LocalSpecError:  # unreadable header: loading it says what is wrong
            return 1
        free = _free_memory(on_gpu=self.n_gpu_layers != 0)
        if per_seq <= 0 or free is None:
            return most
        return max(1, min(most, int(free // 4 // per_seq)))
