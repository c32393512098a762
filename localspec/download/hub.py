"""Models from the Hugging Face Hub, into the standard HF cache (so `hf cache` sees them).

localspec.download (this package) is the only code that imports huggingface_hub. `download_model()` checks free disk first,
reports progress through a callback (safe to call from a worker thread), can be cancelled
with a `threading.Event`, retries transient failures (huggingface_hub itself resumes a
dropped connection with a Range request), and verifies the file's sha256 against the Hub's
LFS oid. The file the app loads (the snapshot path) appears only after a complete download
(huggingface_hub writes `<blob>.<id>.incomplete` and renames), and a file that fails the
checksum is deleted again, snapshot link and blob both.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from huggingface_hub import HfApi, constants, hf_hub_download, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from tqdm.auto import tqdm

from localspec.catalog import guess_quant
from localspec.errors import (
    ChecksumMismatchError,
    DownloadCancelledError,
    DownloadError,
    InsufficientDiskError,
    LocalSpecError,
    ModelNotFoundError,
)

log = logging.getLogger(__name__)

DISK_MARGIN_BYTES = 256 << 20
"""Free space left over after a download (the OS and other writers need some)."""
_HASH_CHUNK = 8 << 20


@dataclass(frozen=True)
class DownloadProgress:
    """One progress event. `phase`: "download" (bytes arriving), "verify" (hashing),
    "done" (the file is in the cache and verified)."""

    repo_id: str
    filename: str
    bytes_done: int
    bytes_total: int | None
    phase: str
    attempt: int = 1

    @property
    def fraction(self) -> float | None:
        """0..1, or None when the total is unknown."""
        if not self.bytes_total:
            return None
        return min(1.0, self.bytes_done / self.bytes_total)


ProgressCallback = Callable[[DownloadProgress], None]


@dataclass(frozen=True)
class RemoteFile:
    """A file in a Hub repo as its tree listing describes it."""

    path: str
    size: int
    sha256: str | None
    """LFS oid (sha256 of the content); None for small non-LFS files."""


def _endpoint(endpoint: str | None) -> str:
    return (endpoint or constants.ENDPOINT).rstrip("/")


def _translate(exc: Exception, repo_id: str, filename: str | None, endpoint: str) -> LocalSpecError:
    """A huggingface_hub/httpx error as a LocalSpecError that says what to do next."""
    where = f"{endpoint}/{repo_id}"
    if isinstance(exc, GatedRepoError):
        return DownloadError(
            f"{repo_id} is gated: open {where}, accept its license while logged in, then run "
            "`hf auth login` (or set HF_TOKEN) and retry"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return ModelNotFoundError(
            f"no model repo {repo_id!r} on {endpoint} (or it is private). Check the name; "
            "`localspec models list --catalog` shows known repos; for a private repo run `hf auth login`"
        )
    if isinstance(exc, RevisionNotFoundError):
        return ModelNotFoundError(f"{repo_id} has no such revision; drop --revision or pick a branch/commit of {where}")
    if isinstance(exc, LocalEntryNotFoundError):
        return DownloadError(
            f"cannot reach {endpoint} to fetch {filename} from {repo_id}, and it is not in the HF cache "
            f"({exc}). Check the network / HF_ENDPOINT; models already downloaded work offline"
        )
    if isinstance(exc, EntryNotFoundError):
        return ModelNotFoundError(
            f"{repo_id} has no file {filename!r}. See its GGUF files with "
            f"`localspec models download {repo_id} --list`, or pick one with --quant"
        )
    return DownloadError(f"download of {filename or repo_id} from {where} failed: {exc}. Retry; check the network")


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else 0
        return status >= 500 or status in (408, 429)
    if isinstance(exc, (RepositoryNotFoundError, EntryNotFoundError, RevisionNotFoundError)):
        return False
    return isinstance(exc, (httpx2.TransportError, OSError))


def list_remote_files(
    repo_id: str, *, revision: str | None = None, endpoint: str | None = None, token: str | bool | None = None
) -> list[RemoteFile]:
    """Every file of a Hub repo (recursive) with size and LFS sha256."""
    ep = _endpoint(endpoint)
    try:
        entries = list(HfApi(endpoint=ep, token=token).list_repo_tree(repo_id, recursive=True, revision=revision))
    except (HfHubHTTPError, httpx2.HTTPError, OSError) as exc:
        raise _translate(exc, repo_id, None, ep) from exc
    out = []
    for e in entries:
        size = getattr(e, "size", None)
        if size is None:  # a folder
            continue
        lfs = getattr(e, "lfs", None)
        out.append(RemoteFile(e.path, int(size), getattr(lfs, "sha256", None) if lfs else None))
    return out


def files_for_quant(files: Iterable[RemoteFile], quant: str) -> list[RemoteFile]:
    """The GGUF file(s) at `quant` (all parts of a split GGUF, in order), excluding mmproj files."""
    want = quant.upper()
    hits = [
        f for f in files
        if f.path.lower().endswith(".gguf") and "mmproj" not in f.path.lower() and guess_quant(f.path) == want
    ]
    return sorted(hits, key=lambda f: f.path)


def _free_bytes(directory: Path) -> int:
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def check_disk(size: int, directory: Path) -> None:
    """InsufficientDiskError unless `size` plus a margin fits on `directory`'s disk."""
    free = _free_bytes(directory)
    if free < size + DISK_MARGIN_BYTES:
        raise InsufficientDiskError(
            f"not enough disk space: the file needs {size / 1e9:.2f} GB (+{DISK_MARGIN_BYTES >> 20} MiB margin) "
            f"but {directory} has {free / 1e9:.2f} GB free. Free some space (`localspec models rm ...`) or "
            "set HF_HUB_CACHE to a bigger disk"
        )


def _progress_bar(repo_id: str, filename: str, progress: ProgressCallback | None,
                  cancel: threading.Event | None, attempt: int) -> type[tqdm]:
    """A tqdm class (what huggingface_hub's `tqdm_class=` wants) that draws nothing, feeds
    `progress` and raises DownloadCancelledError from `update()` once `cancel` is set."""

    class _CallbackBar(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("name", None)
            kwargs["disable"] = True
            self._done = int(kwargs.get("initial") or 0)
            self._total = kwargs.get("total")
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            if cancel is not None and cancel.is_set():
                raise DownloadCancelledError(f"download of {filename} from {repo_id} cancelled; nothing was kept")
            self._done += int(n or 0)
            if progress is not None:
                progress(DownloadProgress(repo_id, filename, self._done, self._total, "download", attempt))
            return None

    return _CallbackBar


def sha256_file(path: Path, on_bytes: Callable[[int], None] | None = None,
                cancel: threading.Event | None = None) -> str:
    """Hex sha256 of a file, reporting bytes hashed so far."""
    digest = hashlib.sha256()
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            if cancel is not None and cancel.is_set():
                raise DownloadCancelledError(f"verification of {path.name} cancelled")
            digest.update(chunk)
            done += len(chunk)
            if on_bytes:
                on_bytes(done)
    return digest.hexdigest()


def _discard(snapshot_path: Path) -> None:
    """Remove a cached file: its blob and its snapshot link."""
    blob = snapshot_path.resolve()
    blob.unlink(missing_ok=True)
    if snapshot_path.is_symlink() or snapshot_path.exists():
        snapshot_path.unlink(missing_ok=True)


def download_model(
    repo_id: str,
    filename: str,
    *,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
    retries: int = 2,
    expected_sha256: str | None = None,
) -> Path:
    """Download one file of a Hub repo into the HF cache and return its snapshot path.

    Blocking; call it from a worker thread. `progress` receives DownloadProgress events
    (download bytes, then verify bytes, then "done"); setting `cancel` stops it with
    DownloadCancelledError and leaves nothing behind. The sha256 is checked against the
    Hub's LFS oid (`expected_sha256` when the Hub gives none); a mismatch deletes the file
    (ChecksumMismatchError).
    """
    ep = _endpoint(endpoint)
    cache = Path(cache_dir) if cache_dir else Path(constants.HF_HUB_CACHE)
    if cancel is not None and cancel.is_set():
        raise DownloadCancelledError(f"download of {filename} cancelled before it started")
    try:
        remote = _remote_file(repo_id, filename, revision, ep, token)
    except DownloadError:
        # the Hub is unreachable: a file already in the cache still works offline
        cached = _cached_path(repo_id, filename, cache, revision)
        if cached is None:
            raise
        log.info("Hub unreachable; using the cached %s", cached)
        return cached
    # the Hub's LFS oid is the authority; `expected_sha256` (e.g. from the catalog) only fills in
    sha = (remote.sha256 if remote else None) or expected_sha256
    if expected_sha256 and sha != expected_sha256:
        log.warning("%s: the Hub's sha256 differs from the expected one (stale catalog? run "
                    "`localspec models refresh`); checking against the Hub's", filename)
    size = remote.size if remote else None
    was_cached = _is_cached(repo_id, filename, cache, revision)
    if size is not None and not was_cached:
        check_disk(size, cache)
    path = _download_with_retries(repo_id, filename, revision, cache, ep, token, progress, cancel, retries)
    if sha and was_cached and path.resolve().name == sha:
        # verified when it was downloaded; the blob is named by its sha256, re-hashing GBs is waste
        log.debug("%s already cached as blob %s", filename, sha[:12])
    elif sha:
        total = path.stat().st_size

        def on_bytes(done: int) -> None:
            if progress:
                progress(DownloadProgress(repo_id, filename, done, total, "verify"))

        got = sha256_file(path, on_bytes, cancel)
        if got != sha:
            _discard(path)
            raise ChecksumMismatchError(
                f"{filename} from {repo_id}: sha256 {got[:16]}… differs from the Hub's {sha[:16]}…; "
                "the file was deleted. Retry the download; if it repeats, the server or a proxy is "
                "serving a different file"
            )
    else:
        log.info("no LFS sha256 for %s/%s: size checked only", repo_id, filename)
    if progress:
        final = path.stat().st_size
        progress(DownloadProgress(repo_id, filename, final, final, "done"))
    return path


def _remote_file(repo_id: str, filename: str, revision: str | None, ep: str, token: str | bool | None) -> RemoteFile | None:
    files = list_remote_files(repo_id, revision=revision, endpoint=ep, token=token)
    for f in files:
        if f.path == filename:
            return f
    ggufs = [f.path for f in files if f.path.endswith(".gguf")]
    raise ModelNotFoundError(
        f"{repo_id} has no file {filename!r}. GGUF files there: {', '.join(ggufs[:12]) or 'none'}"
        + (" …" if len(ggufs) > 12 else "")
        + ". Pick one, or use --quant"
    )


def _cached_path(repo_id: str, filename: str, cache: Path, revision: str | None) -> Path | None:
    hit = try_to_load_from_cache(repo_id, filename, cache_dir=cache, revision=revision)
    return Path(hit) if isinstance(hit, str) and os.path.isfile(hit) else None


def _is_cached(repo_id: str, filename: str, cache: Path, revision: str | None) -> bool:
    return _cached_path(repo_id, filename, cache, revision) is not None


def _download_with_retries(repo_id: str, filename: str, revision: str | None, cache: Path, ep: str,
                           token: str | bool | None, progress: ProgressCallback | None,
                           cancel: threading.Event | None, retries: int) -> Path:
    last: Exception | None = None
    for attempt in range(1, retries + 2):
        try:
            return Path(hf_hub_download(
                repo_id, filename, revision=revision, cache_dir=cache, endpoint=ep, token=token,
                tqdm_class=_progress_bar(repo_id, filename, progress, cancel, attempt),
            ))
        except DownloadCancelledError:
            raise
        except Exception as exc:
            if not _retryable(exc) or attempt > retries:
                raise _translate(exc, repo_id, filename, ep) from exc
            last = exc
            log.warning("download of %s failed (%s); retry %d of %d", filename, exc, attempt, retries)
            time.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)))
    raise _translate(last or RuntimeError("no attempt made"), repo_id, filename, ep)


def download_quant(repo_id: str, quant: str, **kwargs: Any) -> list[Path]:
    """Download every part of the GGUF at `quant` in a repo; returns the paths in part order."""
    files = files_for_quant(
        list_remote_files(repo_id, revision=kwargs.get("revision"), endpoint=kwargs.get("endpoint"),
                          token=kwargs.get("token")),
        quant,
    )
    if not files:
        raise ModelNotFoundError(f"{repo_id} has no GGUF at {quant}; list them with `localspec models download {repo_id} --list`")
    return [download_model(repo_id, f.path, expected_sha256=f.sha256, **kwargs) for f in files]
