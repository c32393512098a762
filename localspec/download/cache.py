"""GGUF files in the HF cache (scan_cache_dir) merged with the offline store and added
paths: what `localspec models list` and the TUI's model screen show."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants, scan_cache_dir

from localspec.catalog import Catalog, LocalModel, added_models, describe, load_catalog, merge_local, store_models

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachedFile:
    """A GGUF in the HF cache."""

    repo_id: str
    filename: str
    path: Path
    """Snapshot path (a link into blobs/)."""
    size: int
    revision: str


def cached_ggufs(cache_dir: str | os.PathLike[str] | None = None) -> list[CachedFile]:
    """GGUF files in the HF cache (scan_cache_dir), newest revision first per file."""
    try:
        info = scan_cache_dir(Path(cache_dir or constants.HF_HUB_CACHE))
    except Exception as exc:  # CacheNotFound when the cache dir does not exist yet
        log.debug("no HF cache: %s", exc)
        return []
    out: dict[tuple[str, str], CachedFile] = {}
    for repo in info.repos:
        if repo.repo_type != "model":
            continue
        for rev in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True):
            for f in rev.files:
                if f.file_name.endswith(".gguf"):
                    rel = str(f.file_path.relative_to(rev.snapshot_path))
                    out.setdefault((repo.repo_id, rel), CachedFile(repo.repo_id, rel, f.file_path, f.size_on_disk, rev.commit_hash))
    return sorted(out.values(), key=lambda c: (c.repo_id, c.filename))


def remove_cached(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Delete one cached GGUF: every snapshot link to its blob, then the blob. Returns what went."""
    target = Path(path).resolve()
    removed: list[Path] = []
    for c in cached_ggufs(cache_dir):
        if c.path.resolve() == target or c.path == Path(path):
            blob = c.path.resolve()
            for other in cached_ggufs(cache_dir):
                if other.path.resolve() == blob:
                    other.path.unlink(missing_ok=True)
                    removed.append(other.path)
            blob.unlink(missing_ok=True)
            removed.append(blob)
            break
    return removed


def local_models(cache_dir: str | os.PathLike[str] | None = None, catalog: Catalog | None = None) -> list[LocalModel]:
    """Every GGUF on this machine: HF cache, offline store, added paths (one entry per file)."""
    catalog = catalog or load_catalog()
    hf = [describe(c.path, "hf-cache", catalog, repo_id=c.repo_id, size=c.size) for c in cached_ggufs(cache_dir)]
    return merge_local([store_models(catalog), hf, added_models(catalog)])
