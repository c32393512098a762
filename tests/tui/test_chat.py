"""Pilot tests of the chat screen on fake engines: streaming, stats, stop, new chat, settings."""

from __future__ import annotations

from localspec.engine import Engine
from localspec.tui.app import make_app
from localspec.tui.screens.chat import ChatScreen
from localspec.tui.settings import ChatSettings, TuiSettings
from localspec.tui.widgets.stats_panel import StatsPanel
from localspec.tui.widgets.transcript import ReplyBox
from localspec.types import TokenSource

from .conftest import wait_for
from .snapshot_app import REPLY

SETTINGS = TuiSettings(auto_load=False, stats_interval_s=0.05)


async def send(pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    await pilot.click("#chat-input")
    await pilot.press(*text, "enter")


class TestChatScreen:
    async def test_chat_streams_reply_and_updates_stats(self, slow_engine: Engine) -> None:
        app = make_app(slow_engine, SETTINGS)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            assert isinstance(screen, ChatScreen)
            assert screen.focused is screen.query_one("#chat-input")  # typing works at once
            await send(pilot, "write fib")
            await wait_for(pilot, lambda: screen.reply is not None and 0 < len(screen.reply.text) < len(REPLY))
            partial = screen.reply.text  # type: ignore[union-attr]
            panel = screen.query_one(StatsPanel)
            await wait_for(pilot, lambda: panel.stats is not None and panel.stats.num_steps > 0)
            first_steps = panel.stats.num_steps  # type: ignore[union-attr]
            await wait_for(pilot, lambda: screen.generating is None)
            assert REPLY.startswith(partial)
            assert screen.history[-1].content == REPLY
            assert [m.role for m in screen.history] == ["user", "assistant"]
            assert panel.stats is not None and panel.stats.num_steps > first_steps
            assert panel.stats.mean_acceptance_length > 1.0
            box = screen.query(ReplyBox).last()
            assert {s for _, s in box.pieces} >= {TokenSource.ACCEPTED}
            assert "done" in str(box.border_subtitle)

    async def test_chat_stop_mid_reply_then_new_reply(self, slow_engine: Engine) -> None:
        app = make_app(slow_engine, SETTINGS)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            await send(pilot, "first")
            await wait_for(pilot, lambda: screen.reply is not None and len(screen.reply.text) > 3)
            await pilot.press("escape")
            await wait_for(pilot, lambda: screen.generating is None)
            stopped = screen.history[-1].content
            assert 3 < len(stopped) < len(REPLY)
            assert slow_engine.stats().finish_reason == "cancelled"
            assert "stopped" in str(screen.query(ReplyBox).last().border_subtitle)
            # a second turn in the same chat works and sees the stopped turn in its history
            await send(pilot, "again")
            await wait_for(pilot, lambda: screen.generating is None and len(screen.history) == 4)
            assert screen.history[-1].content == REPLY
            # new chat clears the conversation
            await pilot.press("ctrl+n")
            await wait_for(pilot, lambda: not screen.history)
            assert not screen.query(ReplyBox)

    async def test_chat_new_chat_during_reply_stops_it(self, slow_engine: Engine) -> None:
        app = make_app(slow_engine, SETTINGS)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            await send(pilot, "hello")
            await wait_for(pilot, lambda: screen.reply is not None and len(screen.reply.text) > 2)
            await pilot.press("ctrl+n")
            await wait_for(pilot, lambda: screen.generating is None and not screen.history)
            assert not slow_engine.busy

    async def test_chat_without_engine_warns_and_keeps_prompt_usable(self) -> None:
        app = make_app(None, SETTINGS)
        async with app.run_test(size=(80, 24)) as pilot:
            await send(pilot, "hi")
            await pilot.pause()
            assert app.screen.history == []  # type: ignore[attr-defined]
            assert any("No model loaded" in str(n.message) for n in app._notifications)

    async def test_chat_toggle_marks_and_system_prompt(self, fast_engine: Engine) -> None:
        settings = TuiSettings(auto_load=False, chat=ChatSettings(system_prompt="You are terse."))
        app = make_app(fast_engine, settings)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            await send(pilot, "hi")
            await wait_for(pilot, lambda: screen.generating is None and len(screen.history) == 2)
            box = screen.query(ReplyBox).last()
            styled = {span.style for span in box.content.spans}  # type: ignore[union-attr]
            assert "bold green" in styled
            await pilot.press("ctrl+t")
            assert not app.chat_settings.show_accepted
            assert not box.content.spans  # type: ignore[union-attr]
            assert fast_engine.stats().num_prompt_tokens > len("hi")
            rendered = fast_engine.render_chat(screen._request(tuple(screen.history)).messages)
            assert "You are terse." in rendered

    async def test_settings_dialog_validates_and_applies(self, fast_engine: Engine) -> None:
        app = make_app(fast_engine, SETTINGS)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("ctrl+s")
            await pilot.pause()
            dialog = app.screen
            temperature = dialog.query_one("#setting-1")
            temperature.value = "hot"  # type: ignore[attr-defined]
            await pilot.click("#settings-save")
            await pilot.pause()
            assert app.screen is dialog
            assert "temperature" in str(dialog.query_one("#settings-error").content)
            temperature.value = "0.7"  # type: ignore[attr-defined]
            dialog.query_one("#setting-3").value = "42"  # type: ignore[attr-defined]
            dialog.query_one("#setting-drafter").value = "ngram"  # type: ignore[attr-defined]
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: app.screen is not dialog)
            s = app.chat_settings
            assert (s.temperature, s.seed, s.drafter) == (0.7, 42, "ngram")
            screen = app.screen
            await send(pilot, "hi")
            await wait_for(pilot, lambda: screen.generating is None and len(screen.history) == 2)  # type: ignore[attr-defined]
            assert fast_engine.stats().drafter_counts.keys() <= {"ngram", "none"}

    async def test_measure_plain_shows_speedup(self, fast_engine: Engine) -> None:
        app = make_app(fast_engine, SETTINGS)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            panel = screen.query_one(StatsPanel)
            await send(pilot, "hi")
            await wait_for(pilot, lambda: screen.generating is None and len(screen.history) == 2)
            assert "—" in str(panel.query_one("#stats-text").content).split("speedup", 1)[1].splitlines()[0]
            reply_stats = panel.stats
            await pilot.press("f5")
            await wait_for(pilot, lambda: panel.plain_tok_s is not None)
            assert fast_engine.stats().drafter_counts == {"none": fast_engine.stats().num_steps}
            assert panel.stats is reply_stats  # the panel keeps the reply's stats
            assert "×" in str(panel.query_one("#stats-text").content)
            assert len(screen.history) == 2  # the measurement adds no turn

    async def test_quit_during_generation_exits_cleanly(self, slow_engine: Engine) -> None:
        app = make_app(slow_engine, SETTINGS)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            await send(pilot, "hi")
            await wait_for(pilot, lambda: screen.reply is not None and len(screen.reply.text) > 2)
            await pilot.press("ctrl+q")
        assert app.return_code == 0
        assert slow_engine.stats().finish_reason == "cancelled"
        assert not slow_engine.busy


async def test_chat_with_a_json_schema_replies_json() -> None:
    """`tui --json-schema`: the fake model would write prose; every reply is the schema's JSON."""
    import json
    from dataclasses import replace

    from localspec.engine.fake import FakeBackend

    script = 'Sure! {"city": "Paris", "days": 3} and more prose.'
    engine = Engine(FakeBackend(script), FakeBackend(script, error_rate=0.2, seed=1))
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
              "required": ["city", "days"], "additionalProperties": False}
    settings = replace(SETTINGS, chat=ChatSettings(json_schema=json.dumps(schema), max_tokens=60))
    app = make_app(engine, settings)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        await send(pilot, "trip")
        await wait_for(pilot, lambda: len(screen.history) == 2 and screen.generating is None)
        reply = json.loads(screen.history[-1].content)
        assert set(reply) == {"city", "days"} and isinstance(reply["days"], int)
