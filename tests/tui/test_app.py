"""Start-up of the app built by make_app with no engine: the offline default pair loads in
a worker; without one the models screen opens with the reason."""

from __future__ import annotations

import pytest

from localspec.errors import ModelNotFoundError
from localspec.tui.app import make_app
from localspec.tui.screens.chat import ChatScreen
from localspec.tui.screens.models import ModelsScreen
from localspec.tui.settings import TuiSettings
from localspec.types import ModelSpec

from .conftest import wait_for


@pytest.mark.models
async def test_app_without_engine_loads_the_offline_default_pair() -> None:
    app = make_app(None, TuiSettings(n_ctx=512))
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.loading is not None  # loading in a worker; the UI is already up
        assert "Loading" in str(app.screen.query_one("#chat-title").content)
        await wait_for(pilot, lambda: app.engine is not None, timeout=120)
        assert isinstance(app.screen, ChatScreen)
        assert "1.5b" in app.engine.info.target and "0.5b" in (app.engine.info.draft or "")
        assert "qwen2.5-coder-1.5b" in str(app.screen.query_one("#chat-title").content)
        assert app.screen.focused is app.screen.query_one("#chat-input")


async def test_app_without_default_pair_opens_models_screen(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise ModelNotFoundError("offline model x is not installed; run `localspec models install-default`")

    monkeypatch.setattr("localspec.store.default_pair_paths", missing)
    app = make_app(None, TuiSettings(memory_budget_bytes=4 << 30))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen))
        screen = app.screen
        await wait_for(pilot, lambda: bool(screen.targets), timeout=30)  # the scan finished …
        assert "install-default" in str(screen.query_one("#models-status").content)  # … and kept the reason
        assert app.engine is None


async def test_session_flags_reach_every_load_and_numerics_reloads_the_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    from .snapshot_app import fake_engine

    app = make_app(fake_engine(), TuiSettings(auto_load=False, n_threads=3, flash_attn=False))
    loads: list[tuple[ModelSpec, ModelSpec | None]] = []

    def load(target: ModelSpec, draft: ModelSpec | None) -> None:  # stands in for the loading worker
        loads.append((target, draft))
        app._pair = (target, draft)
        app.loading = None

    monkeypatch.setattr(app, "_load", load)
    async with app.run_test(size=(80, 24)) as pilot:
        app.load_pair(ModelSpec("t.gguf", n_gpu_layers=7), ModelSpec("d.gguf"))  # as the models screen does
        t, d = loads[-1]
        assert (t.path, t.n_gpu_layers, t.n_threads, t.flash_attn, t.numerics) == ("t.gguf", 7, 3, False, "exact")
        assert d is not None and (d.n_threads, d.numerics) == (3, "exact")
        await pilot.press("ctrl+s")
        await pilot.pause()
        dialog = app.screen
        dialog.query_one("#setting-numerics").value = "fast"  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.screen is not dialog)
        assert app.numerics == "fast"
        t, d = loads[-1]  # the engine runs exact numerics: the pair was reloaded in fast
        assert len(loads) == 2 and (t.path, t.numerics, t.n_gpu_layers) == ("t.gguf", "fast", 7)
        assert d is not None and d.numerics == "fast"
