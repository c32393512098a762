"""Start-up of the app built by make_app with no engine: the offline default pair loads in
a worker; without one the models screen opens with the reason."""

from __future__ import annotations

import pytest

from localspec.errors import ModelNotFoundError
from localspec.tui.app import make_app
from localspec.tui.screens.chat import ChatScreen
from localspec.tui.screens.models import ModelsScreen
from localspec.tui.settings import TuiSettings

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
