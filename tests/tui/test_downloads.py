"""Downloads from the models screen through a local Hub on loopback: the bar moves, the
file lands in the (temporary) HF cache and is listed; cancel and failure leave nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from textual.widgets import OptionList, ProgressBar, Select

from localspec.engine import Engine
from localspec.tui.app import make_app
from localspec.tui.settings import TuiSettings
from localspec.tui.widgets.downloads import DownloadRow

from .conftest import wait_for
from .local_hub import LocalHub
from .test_models import _option_index, open_models, status_text

REPO = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
FILE = "qwen2.5-coder-0.5b-instruct-q8_0.gguf"
LABEL = "Qwen2.5-Coder-0.5B-Instruct"
PAYLOAD = os.urandom(3 << 20)


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub reads 10 MiB per progress update; smaller pieces let the bar move."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 << 10)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")


def _settings(hub: LocalHub, cache: Path) -> TuiSettings:
    return TuiSettings(auto_load=False, memory_budget_bytes=4 << 30, hub_endpoint=hub.url, hf_cache_dir=str(cache))


async def _start_download(app, pilot):  # type: ignore[no-untyped-def]
    screen = await open_models(app, pilot)
    targets = screen.query_one("#target-list", OptionList)
    targets.highlighted = _option_index(targets, LABEL)
    await pilot.pause()
    screen.query_one("#quant", Select).value = "Q8_0"
    await pilot.press("ctrl+d")
    await wait_for(pilot, lambda: bool(screen.query(DownloadRow)))
    return screen, screen.query_one(DownloadRow)


def _cached_files(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.is_file() or p.is_symlink()] if cache.exists() else []


class TestDownloads:
    async def test_download_moves_the_bar_and_lists_the_file(self, fast_engine: Engine, tmp_path: Path) -> None:
        with LocalHub(REPO, {FILE: PAYLOAD}, delay_s=0.02) as hub:
            app = make_app(fast_engine, _settings(hub, tmp_path / "hf"))
            async with app.run_test(size=(80, 24)) as pilot:
                screen, row = await _start_download(app, pilot)
                bar = row.query_one(ProgressBar)
                seen: set[float] = set()

                def progressed() -> bool:
                    seen.add(bar.progress)
                    return row.has_class("-done")

                await wait_for(pilot, progressed, timeout=30)
                assert not row.has_class("-error"), row.tooltip
                assert any(0 < p < len(PAYLOAD) for p in seen)  # intermediate values were shown
                assert bar.progress == bar.total == len(PAYLOAD)
                await wait_for(pilot, lambda: any(e.local and e.local.origin == "hf-cache"
                                                  for e in screen.targets.values()), timeout=30)
                cached = next(e.local for e in screen.targets.values() if e.local and e.local.origin == "hf-cache")
                assert Path(cached.path).read_bytes() == PAYLOAD
                assert "Downloaded" in status_text(screen)

    async def test_download_cancel_leaves_nothing(self, fast_engine: Engine, tmp_path: Path) -> None:
        cache = tmp_path / "hf"
        with LocalHub(REPO, {FILE: PAYLOAD}, chunk=16 << 10, delay_s=0.02) as hub:
            app = make_app(fast_engine, _settings(hub, cache))
            async with app.run_test(size=(80, 24)) as pilot:
                screen, row = await _start_download(app, pilot)
                await wait_for(pilot, lambda: row.query_one(ProgressBar).progress > 0, timeout=30)
                await pilot.click(".download-row--cancel")
                await wait_for(pilot, lambda: row.has_class("-done"), timeout=30)
                assert "cancelled" in str(row.query_one("Label").content)
                assert not any(p.name == FILE for p in _cached_files(cache))
                assert not any(p.suffix == ".gguf" or p.name.endswith(".incomplete") for p in _cached_files(cache))
                assert app.screen is screen  # still usable

    async def test_download_failure_is_shown_in_place(self, fast_engine: Engine, tmp_path: Path) -> None:
        with LocalHub(REPO, {FILE: PAYLOAD}, fail=True) as hub:
            app = make_app(fast_engine, _settings(hub, tmp_path / "hf"))
            async with app.run_test(size=(80, 24)) as pilot:
                screen, row = await _start_download(app, pilot)
                await wait_for(pilot, lambda: row.has_class("-error"), timeout=60)
                assert "has no file" in status_text(screen)
                assert screen.query_one("#models-status").has_class("-error")
                assert app.engine is fast_engine

    async def test_quit_during_download_cancels_it(self, fast_engine: Engine, tmp_path: Path) -> None:
        cache = tmp_path / "hf"
        with LocalHub(REPO, {FILE: PAYLOAD}, chunk=16 << 10, delay_s=0.02) as hub:
            app = make_app(fast_engine, _settings(hub, cache))
            async with app.run_test(size=(80, 24)) as pilot:
                _, row = await _start_download(app, pilot)
                await wait_for(pilot, lambda: row.query_one(ProgressBar).progress > 0, timeout=30)
                await pilot.press("ctrl+q")
            assert row.cancel_event.is_set()
        assert not any(p.suffix == ".gguf" for p in _cached_files(cache))
