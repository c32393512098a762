"""Snapshot tests of every screen (SVG baselines in __snapshots__/), built through
snapshot_app.py, which calls the production factory `make_app` with a deterministic fake
pair in snapshot mode (timings, rates and memory hidden)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import wait_for

APP = str(Path(__file__).parent / "snapshot_app.py")
SIZE = (80, 24)


async def _reply(pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.click("#chat-input")
    await pilot.press(*"Write fib in Python", "enter")
    await wait_for(pilot, lambda: pilot.app.screen.generating is None and len(pilot.app.screen.history) == 2)
    await pilot.pause()


async def _models(pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("f2")
    screen = pilot.app.screen
    await wait_for(pilot, lambda: screen.drafters_for is not None, timeout=30)
    await pilot.pause()


class TestSnapshots:
    def test_chat_screen_empty(self, snap_compare) -> None:  # type: ignore[no-untyped-def]
        assert snap_compare(APP, terminal_size=SIZE)

    def test_chat_screen_after_reply_marks_accepted_tokens(self, snap_compare) -> None:  # type: ignore[no-untyped-def]
        assert snap_compare(APP, terminal_size=SIZE, run_before=_reply)

    def test_chat_screen_marks_off(self, snap_compare) -> None:  # type: ignore[no-untyped-def]
        async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
            await _reply(pilot)
            await pilot.press("ctrl+t")
            await pilot.pause()

        assert snap_compare(APP, terminal_size=SIZE, run_before=run_before)

    def test_settings_dialog(self, snap_compare) -> None:  # type: ignore[no-untyped-def]
        assert snap_compare(APP, terminal_size=SIZE, press=["ctrl+s"])

    @pytest.mark.models
    def test_models_screen(self, snap_compare) -> None:  # type: ignore[no-untyped-def]
        assert snap_compare(APP, terminal_size=SIZE, run_before=_models)
