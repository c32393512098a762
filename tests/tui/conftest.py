"""Fixtures and helpers for driving the real TUI app with Pilot."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from textual.pilot import Pilot

from localspec.engine import Engine
from .snapshot_app import fake_engine


@pytest.fixture
def fast_engine() -> Engine:
    """A fake pair that replies instantly."""
    return fake_engine()


@pytest.fixture
def slow_engine() -> Engine:
    """A fake pair that takes 50 ms per target forward and ~2 tokens per step (a reply
    streams for about 3 s: long enough to watch and to stop)."""
    return fake_engine(decode_delay_s=0.05, error_rate=0.5)


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read the user's config, added-model registry or HF cache (the model store
    stays shared)."""
    from huggingface_hub import constants

    cfg = tmp_path_factory.mktemp("config")
    monkeypatch.setenv("LOCALSPEC_CONFIG_DIR", str(cfg))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path_factory.mktemp("hf-cache")))


async def wait_for(pilot: Pilot[None], condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Let the app run until `condition()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await pilot.pause(0.02)
