"""Fixtures for tests/models: a local Hub on 127.0.0.1 and isolated localspec user dirs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehub import FakeHub, start_hub


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    """A running local hub; `hub.url` is its endpoint."""
    state, server = start_hub()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """User dirs in tmp (catalog copy, registry); no token; Xet off; small download pieces.
    The offline model store keeps pointing at the real installed files."""
    import localspec.store
    from localspec.paths import model_store_dir

    real_store = model_store_dir()
    monkeypatch.setattr(localspec.store, "model_store_dir", lambda: real_store)
    monkeypatch.setenv("LOCALSPEC_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("LOCALSPEC_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(hf_constants, "DOWNLOAD_CHUNK_SIZE", 64 << 10)
    return tmp_path


@pytest.fixture
def hf_cache(tmp_path: Path) -> Path:
    """An empty HF cache dir."""
    p = tmp_path / "hf-cache"
    p.mkdir()
    return p
