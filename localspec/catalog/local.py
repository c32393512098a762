"""GGUF files on this machine: the offline store, paths added with `localspec models add`
(a JSON registry in the data dir), and HF-cache files (listed by localspec.download, which
owns huggingface_hub, and merged here). `drafting_pairs` applies the compatibility rule to
the real GGUF headers, so `models list` shows exactly the pairs the engine accepts.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from localspec.catalog.model import Catalog, guess_quant
from localspec.compat import pair_problems
from localspec.errors import LocalSpecError
from localspec.paths import config_dir
from localspec.types import VocabInfo

log = logging.getLogger(__name__)

def registry_path() -> Path:
    """JSON list of GGUF paths added with `localspec models add` (user configuration)."""
    return config_dir() / "added_models.json"


def added_paths() -> list[Path]:
    """Paths added by the user (missing files included; `models list` marks them)."""
    try:
        entries = json.loads(registry_path().read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable %s: %s", registry_path(), exc)
        return []
    return [Path(e["path"]) for e in entries if isinstance(e, dict) and "path" in e]


def _write_registry(paths: list[Path]) -> None:
    reg = registry_path()
    reg.parent.mkdir(parents=True, exist_ok=True)
    tmp = reg.with_name(reg.name + ".tmp")
    tmp.write_text(json.dumps([{"path": str(p)} for p in paths], indent=1))
    os.replace(tmp, reg)


def add_path(path: str | os.PathLike[str]) -> VocabInfo:
    """Register a local GGUF (its header must read); returns its tokenizer facts."""
    from localspec.gguf_info import vocab_info

    p = Path(path).expanduser().resolve()
    info = vocab_info(p)  # raises ModelNotFoundError / ModelLoadError with the next step
    paths = added_paths()
    if p not in paths:
        _write_registry([*paths, p])
    return info


def remove_path(path: str | os.PathLike[str]) -> bool:
    """Unregister an added path (the file itself is kept). True when it was registered."""
    p = Path(path).expanduser().resolve()
    paths = added_paths()
    if p not in paths:
        return False
    _write_registry([q for q in paths if q != p])
    return True


@dataclass(frozen=True)
class LocalModel:
    """One GGUF on this machine."""

    path: Path
    origin: str
    """"hf-cache", "store" (offline models) or "added" (`localspec models add`)."""
    size: int
    filename: str
    repo_id: str | None = None
    quant: str | None = None
    catalog_id: str | None = None
    family: str | None = None
    exists: bool = True
    loadable: bool = True
    """False for header-only files (the DeepSeek tokenizer fixture)."""
    note: str = ""

    @property
    def name(self) -> str:
        """Catalog id when known, else the file name."""
        return self.catalog_id or self.filename


def describe(path: str | os.PathLike[str], origin: str, catalog: Catalog | None, *, repo_id: str | None = None,
             size: int | None = None, loadable: bool = True, note: str = "") -> LocalModel:
    """A LocalModel for `path`, with family/quant from the catalog when the file name is known."""
    p = Path(path)
    exists = p.is_file()
    match = catalog.match_file(p.name) if catalog else None
    if size is None:
        size = p.stat().st_size if exists else 0
    return LocalModel(
        path=p, origin=origin, size=size, filename=p.name, repo_id=repo_id or (match[1].repo if match else None) or None,
        quant=match[1].quant if match else guess_quant(p.name), catalog_id=match[0].id if match else None,
        family=match[0].family if match else None, exists=exists, loadable=loadable, note=note,
    )


def store_models(catalog: Catalog | None) -> list[LocalModel]:
    """Installed offline models (models/offline.toml), the default pair marked."""
    from localspec.store import default_pair_ids, is_installed, offline_models

    target, draft = default_pair_ids()
    out = []
    for m in offline_models():
        if not is_installed(m):
            continue
        role = {target: "offline default target", draft: "offline default drafter"}.get(m.id, m.role)
        out.append(describe(m.path, "store", catalog, repo_id=m.upstream, size=m.size,
                            loadable=m.role != "header-only", note=role))
    return out


def added_models(catalog: Catalog | None) -> list[LocalModel]:
    """Paths registered with `localspec models add` (missing files are kept and marked)."""
    return [describe(p, "added", catalog, note="" if p.is_file() else "file missing") for p in added_paths()]


def merge_local(groups: Iterable[Iterable[LocalModel]]) -> list[LocalModel]:
    """One entry per real file (the first group that lists it wins), in group order."""
    seen: set[Path] = set()
    out = []
    for group in groups:
        for m in group:
            key = m.path.resolve() if m.exists else m.path
            if key in seen:
                continue
            seen.add(key)
            out.append(m)
    return out


@dataclass(frozen=True)
class LocalPair:
    """A local drafter that can draft for a local target (checked on the real headers)."""

    target: LocalModel
    draft: LocalModel


def drafting_pairs(models: list[LocalModel], read_vocab: Callable[[Path], VocabInfo] | None = None
                   ) -> tuple[list[LocalPair], dict[Path, str]]:
    """Every (target, smaller drafter) pair that `compat.pair_problems` accepts on the files'
    own headers, and the header errors of files that could not be read."""
    if read_vocab is None:
        from localspec.gguf_info import vocab_info

        read_vocab = vocab_info
    vocab: dict[Path, VocabInfo] = {}
    errors: dict[Path, str] = {}
    for m in models:
        if not (m.exists and m.loadable):
            continue
        try:
            vocab[m.path] = read_vocab(m.path)
        except LocalSpecError as exc:
            errors[m.path] = str(exc)
    pairs = []
    for t in models:
        for d in models:
            if t.path == d.path or t.path not in vocab or d.path not in vocab or d.size >= t.size:
                continue
            if not pair_problems(vocab[t.path], vocab[d.path]):
                pairs.append(LocalPair(t, d))
    return pairs, errors
