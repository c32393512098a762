"""Pilot tests of the models screen: listing, drafters for the chosen target, loading a real
pair, and the error paths (incompatible pair, missing file) shown in place."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input, OptionList, Static

from localspec.engine import Engine
from localspec.tui.app import LocalSpecApp, make_app
from localspec.tui.screens.chat import ChatScreen
from localspec.tui.screens.models import ModelsScreen
from localspec.tui.settings import ChatSettings, TuiSettings

from .conftest import wait_for

SETTINGS = TuiSettings(auto_load=False, memory_budget_bytes=4 << 30, n_ctx=1024)


def _option_index(option_list: OptionList, needle: str) -> int:
    for i in range(option_list.option_count):
        option = option_list.get_option_at_index(i)
        if needle in str(option.prompt) and not option.disabled:
            return i
    raise AssertionError(f"no option containing {needle!r}")


async def open_models(app: LocalSpecApp, pilot) -> ModelsScreen:  # type: ignore[no-untyped-def]
    await pilot.press("f2")
    screen = app.screen
    assert isinstance(screen, ModelsScreen)
    await wait_for(pilot, lambda: bool(screen.targets), timeout=30)
    return screen


async def choose_target(screen: ModelsScreen, pilot, needle: str) -> None:  # type: ignore[no-untyped-def]
    targets = screen.query_one("#target-list", OptionList)
    targets.highlighted = _option_index(targets, needle)
    await wait_for(pilot, lambda: screen.drafters_for == screen.selected_target(), timeout=30)


def status_text(screen: ModelsScreen) -> str:
    return str(screen.query_one("#models-status", Static).content)


@pytest.mark.models
class TestModelsScreen:
    async def test_models_lists_local_files_catalog_and_compatible_drafters(self, fast_engine: Engine) -> None:
        app = make_app(fast_engine, SETTINGS)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_models(app, pilot)
            labels = [str(o.prompt) for o in screen.query_one("#target-list", OptionList).options]
            assert any("qwen2.5-coder-1.5b-instruct-q4_k_m" in s for s in labels)
            assert any("Catalog" in s for s in labels)
            assert any("fits the budget" in s for s in labels)
            await choose_target(screen, pilot, "qwen2.5-coder-1.5b-instruct-q4_k_m")
            drafts = screen.query_one("#draft-list", OptionList)
            enabled = [str(o.prompt) for o in drafts.options if not o.disabled]
            disabled = [str(o.prompt) for o in drafts.options if o.disabled]
            assert enabled[0].startswith("none")
            assert "qwen2.5-coder-0.5b-instruct-q4_k_m" in enabled[1]  # smallest compatible first
            assert any("smollm2" in s and "✗" in s for s in disabled)
            assert "0.5b" in str(drafts.highlighted_option.prompt)  # type: ignore[union-attr]

    async def test_models_incompatible_pair_shows_error_and_app_stays_usable(
        self, fast_engine: Engine, qwen_draft_path: Path
    ) -> None:
        app = make_app(fast_engine, SETTINGS)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_models(app, pilot)
            await choose_target(screen, pilot, "smollm2-135m-instruct-q4_1")
            screen.query_one("#draft-path", Input).value = str(qwen_draft_path)
            await pilot.press("ctrl+l")
            await wait_for(pilot, lambda: app.load_error is not None, timeout=30)
            assert "cannot draft for target" in app.load_error  # type: ignore[operator]
            assert "cannot draft for target" in status_text(screen)
            assert screen.query_one("#models-status").has_class("-error")
            assert app.screen is screen and app.engine is fast_engine and app.loading is None
            # still usable: chat with the engine that was loaded before
            await pilot.press("f3")
            chat = app.screen
            assert isinstance(chat, ChatScreen)
            await pilot.click("#chat-input")
            await pilot.press("h", "i", "enter")
            await wait_for(pilot, lambda: chat.generating is None and len(chat.history) == 2)
            assert chat.history[-1].content

    async def test_models_missing_files_show_errors_in_place(self, fast_engine: Engine, tmp_path: Path) -> None:
        app = make_app(fast_engine, SETTINGS)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_models(app, pilot)
            missing = str(tmp_path / "gone.gguf")
            await pilot.click("#add-path")
            await pilot.press(*missing, "enter")
            await pilot.pause()
            assert "not found" in status_text(screen)
            await choose_target(screen, pilot, "smollm2-135m-instruct-q4_1")
            screen.query_one("#draft-path", Input).value = missing
            await pilot.press("ctrl+l")
            await wait_for(pilot, lambda: app.load_error is not None, timeout=30)
            assert "not found" in status_text(screen) and "gone.gguf" in status_text(screen)
            assert app.engine is fast_engine

    async def test_models_load_real_smollm2_pair_then_chat(self) -> None:
        """The real engine on real weights: SmolLM2 drafting for itself, chosen on the screen."""
        settings = TuiSettings(auto_load=False, memory_budget_bytes=4 << 30, n_ctx=1024,
                               stats_interval_s=0.05, chat=ChatSettings(max_tokens=24, drafter="model"))
        app = make_app(None, settings)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_models(app, pilot)
            await choose_target(screen, pilot, "smollm2-135m-instruct-q4_1")
            drafts = screen.query_one("#draft-list", OptionList)
            assert "smollm2" in str(drafts.highlighted_option.prompt)  # type: ignore[union-attr]
            await pilot.press("ctrl+l")
            await wait_for(pilot, lambda: app.engine is not None, timeout=60)
            assert app.load_error is None
            chat = app.screen
            assert isinstance(chat, ChatScreen)
            assert app.engine.info.draft is not None
            await pilot.click("#chat-input")
            await pilot.press(*"Name three colours.", "enter")
            await wait_for(pilot, lambda: chat.generating is None and len(chat.history) == 2, timeout=60)
            stats = app.engine.stats()
            assert chat.history[-1].content.strip()
            assert stats.num_generated_tokens > 0 and stats.num_draft_tokens > 0
            assert stats.mean_acceptance_length > 1.0  # a model drafting for itself is mostly accepted
        # the app built this engine, so quitting closed it


class TestPlanForGpu:
    """Planning for a named GPU needs no GPU and no local weights: only the catalog and the table."""

    async def test_named_gpu_refits_the_catalog_and_shows_unrunnable_drafters(self, fast_engine: Engine) -> None:
        app = make_app(fast_engine, SETTINGS)
        async with app.run_test(size=(100, 30)) as pilot:
            screen = await open_models(app, pilot)
            labels = [str(o.prompt) for o in screen.query_one("#target-list", OptionList).options]
            assert not any("Qwen3.8-27B" in s for s in labels)  # 4 GiB budget: too big
            await pilot.click("#plan-gpu")
            await pilot.press(*"rtx 4090", "enter")
            await wait_for(pilot, lambda: screen.plan is not None and "cat:qwen3.8-27b" in screen.targets, timeout=30)
            assert "RTX 4090" in status_text(screen)
            labels = [str(o.prompt) for o in screen.query_one("#target-list", OptionList).options]
            assert any("Catalog — fits RTX 4090" in s for s in labels)
            row = next(s for s in labels if s.startswith("Qwen3.8-27B"))
            assert "fits RTX 4090" in row and "hybrid" in row and "MTP" in row and "tok/s" in row
            await choose_target(screen, pilot, "Qwen3.8-27B")
            drafts = screen.query_one("#draft-list", OptionList)
            greyed = [str(o.prompt) for o in drafts.options if o.disabled]
            assert any("MTP" in s and "not yet runnable in localspec" in s for s in greyed)
            assert any("Qwen3.5-0.8B" in s and "recurrent" in s for s in greyed)
            assert [o.id for o in drafts.options if not o.disabled] == ["none"]  # nothing runnable to pick

    async def test_unknown_gpu_is_an_error_in_place(self, fast_engine: Engine) -> None:
        app = make_app(fast_engine, SETTINGS)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_models(app, pilot)
            await pilot.click("#plan-gpu")
            await pilot.press(*"RTX 4099", "enter")
            await pilot.pause()
            assert "RTX 4090" in status_text(screen) and screen.query_one("#models-status").has_class("-error")
            assert screen.plan is None

    async def test_split_catalog_gguf_points_to_the_cli_download(self, fast_engine: Engine) -> None:
        settings = TuiSettings(auto_load=False, memory_budget_bytes=128 << 30, n_ctx=1024)
        app = make_app(fast_engine, settings)
        async with app.run_test(size=(100, 30)) as pilot:
            screen = await open_models(app, pilot)
            await choose_target(screen, pilot, "GLM-4.5-Air")
            await pilot.press("ctrl+d")
            await pilot.pause()
            assert "split into 2 files" in status_text(screen)
            assert "localspec models download glm-4.5-air --quant Q4_K_M" in status_text(screen)
