"""The chat screen: multi-turn chat through the target's chat template, streamed in a
thread worker, with the live stats panel beside the transcript."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from localspec.errors import LocalSpecError
from localspec.tui.messages import GenerationFailed, GenerationFinished, TokensStreamed
from localspec.tui.widgets.stats_panel import StatsPanel
from localspec.tui.widgets.transcript import ReplyBox, Transcript
from localspec.types import ChatMessage, Constraint, GenerationRequest, TokenSource

if TYPE_CHECKING:
    from localspec.engine import Engine, Generation
    from localspec.tui.app import LocalSpecApp

log = logging.getLogger(__name__)

STREAM_BATCH_S = 0.04
"""Streamed tokens are posted to the UI at most this often (fewer messages, same text)."""
PLAIN_MAX_TOKENS = 128


class ChatScreen(Screen[None]):
    """Chat with the loaded pair and watch speculative decoding work."""

    AUTO_FOCUS = "#chat-input"
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+s", "settings", "Settings"),
        Binding("ctrl+t", "toggle_accepted", "Marks"),
        Binding("f5", "measure_plain", "Measure plain"),
        Binding("ctrl+b", "toggle_stats", "Stats", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.history: list[ChatMessage] = []
        """Finished user/assistant turns (the system prompt is added per request)."""
        self.generating: str | None = None
        """"chat" or "plain" while a generation runs."""
        self.generation: Generation | None = None
        """The running generation (Esc cancels it; the stats panel polls it)."""
        self.reply: ReplyBox | None = None
        self._pending_prompt = ""
        self._step_tokens: dict[int, int] = {}
        self._last_step = -1

    @property
    def lsapp(self) -> LocalSpecApp:
        """The app, typed (widgets never import the app at runtime)."""
        return cast("LocalSpecApp", self.app)

    def compose(self) -> ComposeResult:
        yield Static(id="chat-title")
        with Horizontal(id="chat-body"):
            yield Transcript(id="chat-transcript")
            yield StatsPanel(
                id="stats-panel", interval_s=self.lsapp.settings.stats_interval_s,
                hide_volatile=self.lsapp.settings.snapshot,
            )
        yield Input(placeholder="Message — Enter sends, Esc stops, F2 models", id="chat-input")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "engine", self._engine_changed)
        self.watch(self.app, "loading", self._update_title)

    # -- engine ---------------------------------------------------------------------
    def _engine_changed(self, engine: Engine | None) -> None:
        self.query_one(StatsPanel).set_engine(engine)
        self._update_title()

    def _update_title(self, _: object = None) -> None:
        engine, loading = self.lsapp.engine, self.lsapp.loading
        title = self.query_one("#chat-title", Static)
        if loading:
            title.update(f"Loading {loading} …")
        elif engine is None:
            title.update("No model loaded — press F2 to choose a pair")
        else:
            info = engine.info
            target = _short(info.target)
            draft = _short(info.draft) if info.draft else "no drafter"
            marks = "  [green]accepted draft[/] [cyan]bonus[/]" if self.lsapp.chat_settings.show_accepted else ""
            title.update(f"[b]{target}[/] ← {draft} · {self.lsapp.chat_settings.drafter}{marks}")

    # -- sending --------------------------------------------------------------------
    @on(Input.Submitted, "#chat-input")
    def send_message(self, event: Input.Submitted) -> None:
        """Send the prompt as the next user turn."""
        text = event.value.strip()
        if not text:
            return
        engine = self.lsapp.engine
        if engine is None:
            self.notify("No model loaded: press F2 to choose a pair.", severity="warning")
            return
        if self.generating:
            self.notify("A reply is still streaming: Esc stops it.", severity="warning")
            return
        event.input.value = ""
        self._pending_prompt = text
        self.history.append(ChatMessage("user", text))
        transcript = self.query_one(Transcript)
        transcript.add_message("user", text)
        self.reply = transcript.start_reply(self.lsapp.chat_settings.show_accepted)
        self.reply.set_status("streaming…")
        self._start(engine, self._request(tuple(self.history)), "chat")

    def _request(self, turns: tuple[ChatMessage, ...], **overrides: object) -> GenerationRequest:
        s = self.lsapp.chat_settings
        messages = turns
        if s.system_prompt.strip():
            messages = (ChatMessage("system", s.system_prompt), *turns)
        request = GenerationRequest(
            messages=messages, max_tokens=s.max_tokens, temperature=s.temperature, top_p=s.top_p,
            seed=s.seed, drafter=s.drafter, gamma=s.gamma,
            constraint=Constraint("json_schema", s.json_schema) if s.json_schema else None,
        )
        return replace(request, **overrides)  # type: ignore[arg-type]

    def _start(self, engine: Engine, request: GenerationRequest, purpose: str) -> None:
        self.generating = purpose
        try:
            generation = engine.generate(request)  # validates and tokenizes now; runs in the worker
        except LocalSpecError as exc:
            self.post_message(GenerationFailed(purpose, str(exc)))
            return
        self.generation = generation
        self._step_tokens.clear()
        self._last_step = -1
        self.query_one(StatsPanel).track(generation)
        self.generate(generation, purpose)

    @work(thread=True, exclusive=True, group="generation", exit_on_error=False)
    def generate(self, generation: Generation, purpose: str) -> None:
        """Run one generation off the UI thread, posting text in small batches."""
        batch: list[tuple[str, TokenSource, int]] = []
        last_post = time.monotonic()
        try:
            with generation:  # leaving it, however, gives the engine back
                for ev in generation:
                    if purpose == "chat" and (ev.text or ev.token_id >= 0):
                        batch.append((ev.text, ev.source, ev.step if ev.token_id >= 0 else -1))
                    if batch and time.monotonic() - last_post >= STREAM_BATCH_S:
                        self.post_message(TokensStreamed(batch))
                        batch, last_post = [], time.monotonic()
        except LocalSpecError as exc:
            self.post_message(GenerationFailed(purpose, str(exc)))
            return
        except Exception as exc:  # keep the app alive; show what broke
            log.exception("generation failed")
            self.post_message(GenerationFailed(purpose, f"{type(exc).__name__}: {exc}"))
            return
        if batch:
            self.post_message(TokensStreamed(batch))
        self.post_message(GenerationFinished(purpose, generation.finish_reason or "cancelled", generation.stats))

    @on(TokensStreamed)
    def show_tokens(self, message: TokensStreamed) -> None:
        """Append streamed text to the reply; count tokens per step for the AL sparkline."""
        if self.reply is None:
            return
        self.reply.append([(text, source) for text, source, _ in message.pieces])
        done: list[int] = []
        for _, _, step in message.pieces:
            if step < 0:
                continue
            if step != self._last_step and self._last_step in self._step_tokens:
                done.append(self._step_tokens[self._last_step])
            self._step_tokens[step] = self._step_tokens.get(step, 0) + 1
            self._last_step = step
        self.query_one(StatsPanel).record_steps(done)

    @on(GenerationFinished)
    def finish_generation(self, message: GenerationFinished) -> None:
        """Close the reply (or record the plain measurement) and show the final stats."""
        self.generating = None
        self.generation = None
        panel = self.query_one(StatsPanel)
        if message.purpose == "plain":
            panel.untrack(None)
            if message.stats.tokens_per_s > 0:
                panel.set_plain(message.stats.tokens_per_s)
            self.notify(f"Plain decoding: {message.stats.tokens_per_s:.1f} tok/s on this machine.")
            return
        if self._last_step in self._step_tokens:
            panel.record_steps([self._step_tokens[self._last_step]])
        panel.untrack(message.stats)
        if self.reply is not None:
            self.history.append(ChatMessage("assistant", self.reply.text))
            note = {"stop": "done", "length": "max tokens", "cancelled": "stopped"}.get(
                message.finish_reason, message.finish_reason
            )
            self.reply.set_status(f"{note} · {message.stats.num_generated_tokens} tokens")
            self.reply = None

    @on(GenerationFailed)
    def restore_prompt_on_failure(self, message: GenerationFailed) -> None:
        """Show the error, drop the failed turn and give the prompt back."""
        self.generating = None
        self.generation = None
        self.query_one(StatsPanel).untrack(None)
        self.notify(message.error, title="Generation failed", severity="error", timeout=10)
        if message.purpose != "chat":
            return
        if self.reply is not None:
            self.reply.remove()
            self.reply = None
        if self.history and self.history[-1].role == "user":
            self.history.pop()
            boxes = self.query_one(Transcript).children
            if boxes:
                boxes[-1].remove()
        self.query_one("#chat-input", Input).value = self._pending_prompt

    # -- actions --------------------------------------------------------------------
    def action_stop(self) -> None:
        """Stop the running generation at its next step (its reply is kept, marked stopped)."""
        if self.generation is not None:
            self.generation.cancel()

    async def action_new_chat(self) -> None:
        """Forget the conversation (stops a running reply first; its late messages find no
        reply box and are dropped)."""
        self.action_stop()
        self.history.clear()
        self.reply = None
        await self.query_one(Transcript).clear()
        self.query_one(StatsPanel).reset_series()
        self.query_one("#chat-input", Input).focus()

    def action_toggle_accepted(self) -> None:
        """Show or hide the accepted-draft colouring."""
        app = self.lsapp
        app.chat_settings = replace(app.chat_settings, show_accepted=not app.chat_settings.show_accepted)
        self.query_one(Transcript).set_show_accepted(app.chat_settings.show_accepted)
        self._update_title()

    def action_toggle_stats(self) -> None:
        """Hide or show the stats panel (more room for text)."""
        panel = self.query_one(StatsPanel)
        panel.display = not panel.display

    def action_measure_plain(self) -> None:
        """Re-run the last prompt with drafter="none" to measure plain tok/s on this machine."""
        engine = self.lsapp.engine
        if engine is None or self.generating:
            self.notify("Load a pair and wait for the reply to finish first.", severity="warning")
            return
        last_user = max((i for i, m in enumerate(self.history) if m.role == "user"), default=None)
        if last_user is None:
            self.notify("Send a message first: plain decoding is measured on the same prompt.")
            return
        turns = tuple(self.history[: last_user + 1])
        self.notify("Measuring plain decoding on the last prompt…")
        self._start(engine, self._request(turns, drafter="none", gamma=None,
                                          max_tokens=min(PLAIN_MAX_TOKENS, self.lsapp.chat_settings.max_tokens)),
                    "plain")

    def action_settings(self) -> None:
        """Open the generation settings dialog."""
        from localspec.tui.screens.settings import SettingsChange, SettingsScreen

        def apply(change: SettingsChange | None) -> None:
            if change is not None:
                self.lsapp.chat_settings = change.chat
                self.query_one(Transcript).set_show_accepted(change.chat.show_accepted)
                self._update_title()
                self.lsapp.set_numerics(change.numerics)

        engine = self.lsapp.engine
        kernel = engine.info.kernel if engine is not None else "—"
        numerics = engine.info.numerics if engine is not None else self.lsapp.numerics
        self.app.push_screen(SettingsScreen(self.lsapp.chat_settings, kernel, numerics), apply)


def _short(name: str) -> str:
    """A model name without the .gguf suffix (room matters at 80 columns)."""
    return name[:-5] if name.lower().endswith(".gguf") else name
