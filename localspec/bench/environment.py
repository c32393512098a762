"""What a benchmark ran on, for the JSON: model files (with sha256), software build,
kernel backend, threads, CPU/GPU. A file's sha256 comes from the model store's stamp when
it is a store model; otherwise it is hashed once and cached by (path, size, mtime)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from localspec import __version__, store
from localspec.paths import cache_dir

log = logging.getLogger(__name__)

_CHUNK = 8 << 20


def _hash_cache_file() -> Path:
    return cache_dir() / "bench" / "sha256.json"


def _store_sha256(path: Path) -> str | None:
    try:
        for m in store.offline_models():
            if m.path.resolve() == path and store.is_installed(m):
                return m.sha256
    except Exception as exc:  # a broken store must not stop a benchmark
        log.debug("store lookup failed: %s", exc)
    return None


def file_sha256(path: str | Path) -> tuple[str, str]:
    """(sha256, where it came from: "store-stamp" | "cache" | "hashed")."""
    p = Path(path).resolve()
    sha = _store_sha256(p)
    if sha:
        return sha, "store-stamp"
    st = p.stat()
    key = f"{p}|{st.st_size}|{st.st_mtime_ns}"
    cache_path = _hash_cache_file()
    try:
        cache: dict[str, str] = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return cache[key], "cache"
    digest = hashlib.sha256()
    with open(p, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    sha = digest.hexdigest()
    cache[key] = sha
    try:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache, indent=1))
        tmp.replace(cache_path)
    except OSError as exc:
        log.warning("could not cache the sha256 of %s: %s", p, exc)
    return sha, "hashed"


def model_record(path: str | Path | None, name: str | None = None) -> dict[str, Any] | None:
    """Path, size and sha256 of one model file (None for no model)."""
    if path is None:
        return None
    p = Path(path)
    sha, source = file_sha256(p)
    return {"name": name or p.name, "path": str(p), "size": p.stat().st_size, "sha256": sha, "sha256_source": source}


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _hardware() -> dict[str, Any]:
    from localspec import hardware

    out: dict[str, Any] = {}
    probe = getattr(hardware, "probe", None)
    if callable(probe):
        try:
            info = probe()
            record = dataclasses.asdict(info) if dataclasses.is_dataclass(info) else {"repr": repr(info)}  # type: ignore[arg-type]
            record.pop("cpu_flags", None)  # long and already summarised by has_amx
            out["probe"] = record
        except Exception as exc:  # the probe is best-effort here
            out["probe_error"] = str(exc)
    try:
        out["cpu_amx"] = hardware.cpu_has_amx()
    except Exception:  # pragma: no cover - depends on /proc
        pass
    return out


def environment_record(
    target_path: str | Path,
    draft_path: str | Path | None,
    *,
    kernel: str,
    threads: int | None,
    n_ctx: int,
    n_gpu_layers: int,
    n_gpu_layers_draft: int,
    numerics: str = "exact",
    flash_attn: bool | None = None,
) -> dict[str, Any]:
    """Everything needed to say what produced the numbers."""
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
    except Exception:  # pragma: no cover
        physical = None
    return {
        "models": {"target": model_record(target_path), "draft": model_record(draft_path)},
        "build": {
            "localspec": __version__,
            "llama-cpp-python": _version("llama-cpp-python") or _version("llama_cpp_python"),
            "numpy": _version("numpy"),
            "python": platform.python_version(),
        },
        "kernel": kernel,
        "numerics": numerics,
        "flash_attn": flash_attn,
        "threads": {"requested": threads, "physical_cores": physical, "logical_cpus": os.cpu_count()},
        "n_ctx": n_ctx,
        "n_gpu_layers": n_gpu_layers,
        "n_gpu_layers_draft": n_gpu_layers_draft,
        "platform": {"system": platform.system(), "machine": platform.machine(), "processor": platform.processor()},
        "hardware": _hardware(),
    }
