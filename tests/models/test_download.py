"""localspec.download against a local Hub on 127.0.0.1 with the real huggingface_hub client."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from fakehub import HubFile

from localspec import download
from localspec.download import DownloadProgress, cached_ggufs, download_model, download_quant, remove_cached
from localspec.errors import (
    ChecksumMismatchError,
    DownloadCancelledError,
    DownloadError,
    InsufficientDiskError,
    ModelNotFoundError,
)

REPO = "test-org/Tiny-GGUF"
FILE = "tiny-Q4_K_M.gguf"


def _payload(n: int, seed: int = 1) -> bytes:
    return bytes((i * 131 + seed * 7) % 251 for i in range(n))


def _no_partial_files(cache: Path) -> list[Path]:
    """Files in the cache that the app could load or that were left half-written."""
    return [p for p in cache.rglob("*") if p.is_file() and (p.suffix == ".incomplete" or "snapshots" in p.parts)]


def test_download_model_reports_progress_and_lands_in_hf_cache(hub, hf_cache) -> None:
    data = _payload(1_000_000)
    hub.add(REPO, FILE, HubFile(data))
    events: list[DownloadProgress] = []
    path = download_model(REPO, FILE, progress=events.append, cache_dir=hf_cache, endpoint=hub.url, token=False)
    assert path.read_bytes() == data
    assert "snapshots" in path.parts and path.is_symlink()
    downloads = [e.bytes_done for e in events if e.phase == "download"]
    assert any(0 < d < len(data) for d in downloads), "no intermediate progress value"
    assert downloads == sorted(downloads) and downloads[-1] == len(data)
    assert {e.phase for e in events} == {"download", "verify", "done"}
    assert events[-1].phase == "done" and events[-1].fraction == 1.0
    # `hf cache` sees it: scan_cache_dir through localspec.download
    cached = cached_ggufs(hf_cache)
    assert [(c.repo_id, c.filename, c.size) for c in cached] == [(REPO, FILE, len(data))]


def test_download_model_cached_file_needs_no_second_transfer(hub, hf_cache) -> None:
    hub.add(REPO, FILE, HubFile(_payload(200_000)))
    first = download_model(REPO, FILE, cache_dir=hf_cache, endpoint=hub.url, token=False)
    gets = sum(1 for m, p, _ in hub.requests if m == "GET" and "/resolve/" in p)
    events: list[DownloadProgress] = []
    second = download_model(REPO, FILE, progress=events.append, cache_dir=hf_cache, endpoint=hub.url, token=False)
    assert first == second
    assert [e.phase for e in events] == ["done"]  # no transfer, no second hashing
    assert sum(1 for m, p, _ in hub.requests if m == "GET" and "/resolve/" in p) == gets


def test_download_model_cancel_leaves_nothing(hub, hf_cache) -> None:
    hub.add(REPO, FILE, HubFile(_payload(2_000_000), delay_s=0.01))
    cancel = threading.Event()
    seen: list[int] = []

    def progress(e: DownloadProgress) -> None:
        seen.append(e.bytes_done)
        if e.bytes_done >= 300_000:
            cancel.set()

    with pytest.raises(DownloadCancelledError):
        download_model(REPO, FILE, progress=progress, cancel=cancel, cache_dir=hf_cache, endpoint=hub.url, token=False)
    assert seen and max(seen) < 2_000_000
    assert _no_partial_files(hf_cache) == []


def test_download_model_cancel_from_another_thread(hub, hf_cache) -> None:
    """The TUI's pattern: download in a worker thread, cancel from the UI thread."""
    hub.add(REPO, FILE, HubFile(_payload(3_000_000), delay_s=0.01))
    cancel = threading.Event()
    started = threading.Event()
    result: list[BaseException | Path] = []

    def worker() -> None:
        try:
            result.append(download_model(REPO, FILE, progress=lambda e: started.set(), cancel=cancel,
                                         cache_dir=hf_cache, endpoint=hub.url, token=False))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            result.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    assert started.wait(10)
    cancel.set()
    t.join(20)
    assert not t.is_alive()
    assert isinstance(result[0], DownloadCancelledError)
    assert _no_partial_files(hf_cache) == []


def test_download_model_resumes_after_dropped_connection(hub, hf_cache, monkeypatch) -> None:
    import huggingface_hub.file_download as fd

    monkeypatch.setattr(fd.time, "sleep", lambda s: None)
    data = _payload(1_500_000, seed=3)
    hub.add(REPO, FILE, HubFile(data, drop_after=400_000, drops_left=1))
    path = download_model(REPO, FILE, cache_dir=hf_cache, endpoint=hub.url, token=False)
    assert path.read_bytes() == data
    ranges = [r for m, p, r in hub.requests if m == "GET" and "/resolve/" in p and r]
    assert ranges and int(ranges[0].split("=")[1].rstrip("-")) >= 400_000, ranges


def test_download_model_connection_always_dropping_fails_cleanly(hub, hf_cache, monkeypatch) -> None:
    import huggingface_hub.file_download as fd

    monkeypatch.setattr(fd.time, "sleep", lambda s: None)
    monkeypatch.setattr(download.hub.time, "sleep", lambda s: None)
    hub.add(REPO, FILE, HubFile(_payload(500_000), drop_after=0, drops_left=10_000))
    with pytest.raises(DownloadError, match="failed"):
        download_model(REPO, FILE, cache_dir=hf_cache, endpoint=hub.url, token=False, retries=1)
    assert _no_partial_files(hf_cache) == []


def test_download_model_checksum_mismatch_discards_file(hub, hf_cache) -> None:
    hub.add(REPO, FILE, HubFile(_payload(300_000), corrupt=True))
    with pytest.raises(ChecksumMismatchError, match="deleted"):
        download_model(REPO, FILE, cache_dir=hf_cache, endpoint=hub.url, token=False)
    assert _no_partial_files(hf_cache) == []
    assert not [p for p in hf_cache.rglob("blobs/*") if p.is_file()]
    assert cached_ggufs(hf_cache) == []


def test_download_model_missing_repo_says_what_to_do(hub, hf_cache) -> None:
    with pytest.raises(ModelNotFoundError, match=r"no model repo 'nobody/Nothing-GGUF'.*localspec models list"):
        download_model("nobody/Nothing-GGUF", FILE, cache_dir=hf_cache, endpoint=hub.url, token=False)


def test_download_model_missing_file_lists_the_repo_ggufs(hub, hf_cache) -> None:
    hub.add(REPO, FILE, HubFile(_payload(1000)))
    with pytest.raises(ModelNotFoundError, match=r"no file 'nope.gguf'.*tiny-Q4_K_M.gguf"):
        download_model(REPO, "nope.gguf", cache_dir=hf_cache, endpoint=hub.url, token=False)


def test_download_model_gated_repo_says_how_to_get_access(hub, hf_cache) -> None:
    hub.add("google/gated-GGUF", FILE, HubFile(_payload(1000)))
    hub.gated.add("google/gated-GGUF")
    with pytest.raises(DownloadError, match=r"gated.*accept its license.*hf auth login"):
        download_model("google/gated-GGUF", FILE, cache_dir=hf_cache, endpoint=hub.url, token=False)


def test_download_model_disk_full_precheck_downloads_nothing(hub, hf_cache, monkeypatch) -> None:
    hub.add(REPO, FILE, HubFile(_payload(500_000)))
    real = download.hub.shutil.disk_usage

    def tiny_disk(path: str | os.PathLike[str]):
        u = real(path)
        return type(u)(u.total, u.total - 1000, 1000)

    monkeypatch.setattr(download.hub.shutil, "disk_usage", tiny_disk)
    with pytest.raises(InsufficientDiskError, match=r"not enough disk space.*HF_HUB_CACHE"):
        download_model(REPO, FILE, cache_dir=hf_cache, endpoint=hub.url, token=False)
    assert not [r for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]]
    assert _no_partial_files(hf_cache) == []


def test_download_quant_fetches_every_split_part_in_order(hub, hf_cache) -> None:
    parts = [f"big-Q8_0-0000{i}-of-00002.gguf" for i in (1, 2)]
    for i, name in enumerate(parts):
        hub.add(REPO, name, HubFile(_payload(10_000, seed=i)))
    hub.add(REPO, "big-Q4_K_M.gguf", HubFile(_payload(5000)))
    hub.add(REPO, "mmproj-Q8_0.gguf", HubFile(_payload(5000)))
    paths = download_quant(REPO, "q8_0", cache_dir=hf_cache, endpoint=hub.url, token=False)
    assert [p.name for p in paths] == parts


def test_remove_cached_deletes_link_and_blob(hub, hf_cache) -> None:
    hub.add(REPO, FILE, HubFile(_payload(10_000)))
    hub.add(REPO, "other-Q8_0.gguf", HubFile(_payload(12_000, seed=5)))
    path = download_model(REPO, FILE, cache_dir=hf_cache, endpoint=hub.url, token=False)
    keep = download_model(REPO, "other-Q8_0.gguf", cache_dir=hf_cache, endpoint=hub.url, token=False)
    blob = path.resolve()
    removed = remove_cached(path, hf_cache)
    assert path in removed and blob in removed
    assert not blob.exists() and not path.is_symlink()
    assert [c.filename for c in cached_ggufs(hf_cache)] == ["other-Q8_0.gguf"] and keep.exists()
