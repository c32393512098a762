"""What the models screen offers: local GGUF files and the drafters that fit a target.

Pure functions over the store, added paths and GGUF headers (no Textual), so they are
tested directly. Header reads can take seconds on first use (cached after): call them
from a worker.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from localspec.errors import LocalSpecError

if TYPE_CHECKING:
    from localspec.catalog import Catalog, CatalogFile, DrafterOption
    from localspec.catalog import LocalModel as CatalogLocalModel
    from localspec.gpus import GpuSpec
    from localspec.hardware import HardwareReport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalModel:
    """A GGUF file on this machine that can be loaded."""

    path: str
    label: str
    origin: str
    """"store" (localspec's offline store), "hf-cache" or "added" (a path given by the user)."""
    size: int
    """Bytes on disk."""


@dataclass(frozen=True)
class DrafterChoice:
    """A local model judged as a drafter for one target."""

    model: LocalModel
    problems: tuple[str, ...]
    """Why it cannot draft for the target (empty = compatible)."""

    @property
    def compatible(self) -> bool:
        """True when the headers say it can draft for the target."""
        return not self.problems


def describe_size(size: int) -> str:
    """Bytes as a short human string (1.1 GB, 98 MB)."""
    if size >= 1 << 30:
        return f"{size / (1 << 30):.1f} GB"
    return f"{size / (1 << 20):.0f} MB"


def added_model(path: str) -> LocalModel:
    """A user-given GGUF path as a LocalModel; ModelNotFoundError when it is not a file."""
    return _offered(_added(path))


def local_models(added: Sequence[str] = (), hf_cache_dir: str | None = None) -> list[LocalModel]:
    """Every loadable GGUF on this machine, as `localspec models list` sees it (installed
    store models, HF-cache GGUFs, paths registered with `localspec models add`), then the
    paths given here; one entry per real file."""
    from localspec.catalog import merge_local
    from localspec.download import local_models as machine_models

    extra = []
    for path in added:
        try:
            extra.append(_added(path))
        except LocalSpecError as exc:
            log.info("skipping added path: %s", exc)
    machine = [m for m in machine_models(hf_cache_dir) if m.loadable and m.exists]
    return [_offered(m) for m in merge_local([machine, extra])]


def _added(path: str) -> CatalogLocalModel:
    from localspec.catalog import describe
    from localspec.errors import ModelNotFoundError

    p = Path(path).expanduser()
    if not p.is_file():
        raise ModelNotFoundError(f"GGUF file not found: {path}. Check the path and try again.")
    return describe(p.resolve(), "added", None)


def _offered(m: CatalogLocalModel) -> LocalModel:
    return LocalModel(str(m.path), _label(m.origin, m.filename, m.repo_id), m.origin, m.size)


def _label(origin: str, filename: str, repo_id: str | None) -> str:
    """Store models by id (the file's stem), HF-cache files as repo/file, others by name."""
    if origin == "store":
        return Path(filename).stem
    if origin == "hf-cache" and repo_id:
        return f"{repo_id}/{filename}"
    return filename


def drafter_choices(target_path: str, candidates: Sequence[LocalModel]) -> list[DrafterChoice]:
    """Every candidate judged against the target's tokenizer: compatible ones first
    (smallest first, since a drafter must be cheap), then the rest with their reasons."""
    from localspec.compat import pair_problems
    from localspec.gguf_info import vocab_info

    target = vocab_info(target_path)
    choices = []
    for c in candidates:
        try:
            problems = tuple(pair_problems(target, vocab_info(c.path)))
        except LocalSpecError as exc:
            problems = (str(exc),)
        choices.append(DrafterChoice(c, problems))
    return sorted(choices, key=lambda d: (not d.compatible, d.model.size))


# --- the catalog -------------------------------------------------------------------

@dataclass(frozen=True)
class CatalogChoice:
    """A catalog model offered on the models screen, with the quants that fit here."""

    model_id: str
    label: str
    quants: tuple[str, ...]
    """Quantizations whose file plus KV cache fit this machine, smallest first."""
    reason: str
    """Why it is offered (or a recommendation's reason)."""
    recommended: bool = False


def fits_budget(file_size: int, kv_bytes: int, budget_bytes: int) -> bool:
    """True when weights + KV cache + 10 % headroom fit in `budget_bytes`."""
    return (file_size + kv_bytes) * 1.1 <= budget_bytes


def memory_budget(report: HardwareReport, use_gpu: bool) -> tuple[int, str]:
    """(bytes, "VRAM"/"RAM") a model may use: the best GPU's free VRAM when offloading, else
    available RAM."""
    gpu = report.best_gpu if use_gpu else None
    if gpu is not None:
        return gpu.vram_free_bytes, "VRAM"
    return report.ram_available_bytes, "RAM"


def catalog_choices(catalog: Catalog, budget_bytes: int, budget_name: str, n_ctx: int,
                    gpu: GpuSpec | None = None) -> list[CatalogChoice]:
    """Catalog models with at least one quant that fits `budget_bytes` at `n_ctx`, largest
    model first (the biggest target that fits is usually the one worth speeding up). With
    `gpu` (a card planned for by name) each reason adds the predicted plain decode speed."""
    out = []
    for m in catalog.models:
        kv = m.kv_bytes(min(n_ctx, m.n_ctx_train))
        fitting = sorted((f for f in m.files if fits_budget(f.size, kv, budget_bytes)), key=lambda f: f.size)
        if not fitting:
            continue
        top = fitting[-1]
        reason = f"{top.quant} {describe_size(top.size)} + KV {describe_size(kv)} fits {budget_name}"
        if m.is_moe or m.is_hybrid or m.mtp_layers:
            reason += f" · {m.arch_kind}{' · MTP' if m.mtp_layers else ''}"
        if gpu is not None:
            reason += f" · ~{plain_speed(catalog, m.id, top.quant, gpu, n_ctx):.0f} tok/s"
        out.append(CatalogChoice(m.id, m.name, tuple(f.quant for f in fitting), reason))
    return sorted(out, key=lambda c: -catalog.model(c.model_id).params)


def plain_speed(catalog: Catalog, model_id: str, quant: str, gpu: GpuSpec, n_ctx: int) -> float:
    """Predicted plain-decoding tokens/s of a catalog model on a named GPU (0 when it does not fit)."""
    from localspec.recommend import Budget, predict

    model = catalog.model(model_id)
    budget = Budget(gpu.vram_bytes, 64 << 30, gpu.name, gpu.bandwidth_bytes_s, 24e9, gpu.name)
    out = predict(catalog, budget, model, model.file_for(quant), None, n_ctx=n_ctx)
    return out[0].plain_tokens_per_s if out is not None else 0.0


def plan_gpu(name: str) -> GpuSpec:
    """The card to plan for, from the GPU table (UnknownGpuError lists close matches)."""
    from localspec.gpus import find_gpu

    return find_gpu(name)


def catalog_drafter_options(catalog: Catalog, target_id: str) -> list[DrafterOption]:
    """Every drafter the catalog knows for a catalog target, runnable first; the others carry
    the reason localspec cannot run them yet."""
    from localspec.catalog import drafter_options

    return drafter_options(catalog, catalog.model(target_id))


def catalog_drafters(catalog: Catalog, target_id: str) -> list[str]:
    """Ids of catalog models that can draft for `target_id` (same tokenizer), smallest first."""
    target = catalog.model(target_id)
    ok = [
        m for m in catalog.models
        if m.id != target.id and m.params < target.params and not catalog.pair_problems(target, m)
    ]
    return [m.id for m in sorted(ok, key=lambda m: m.params)]


def local_file_for(catalog_file: CatalogFile, hf_cache_dir: str | None = None) -> str | None:
    """Where a catalog file already is on this machine (offline store or HF cache), if anywhere."""
    if catalog_file.offline:
        from localspec.store import is_installed, offline_model

        try:
            m = offline_model(catalog_file.offline)
        except LocalSpecError:
            m = None
        if m is not None and is_installed(m):
            return str(m.path)
    from localspec.download import cached_ggufs

    for c in cached_ggufs(hf_cache_dir):
        if c.repo_id == catalog_file.repo and c.filename == catalog_file.file:
            return str(c.path)
    return None


def same_file(a: str, b: str) -> bool:
    """True when two paths name the same file."""
    return os.path.realpath(a) == os.path.realpath(b)
