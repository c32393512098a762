"""The localspec TUI app and its factory `make_app` (the only way to build it: the CLI,
the tests and the snapshot entry file all call it)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from pathlib import Path

from textual import on, work
from textual.app import App
from textual.binding import Binding
from textual.reactive import var
from textual.worker import get_current_worker

from localspec.engine import Engine, ModelSpec
from localspec.errors import LocalSpecError
from localspec.tui.messages import EngineLoaded, EngineLoadFailed, EngineLoading
from localspec.tui.screens.chat import ChatScreen
from localspec.tui.screens.models import ModelsScreen
from localspec.tui.settings import ChatSettings, TuiSettings

log = logging.getLogger(__name__)

QUIT_WAIT_S = 10.0
"""Longest wait at quit for a cancelled generation to reach its next step boundary."""


def describe_pair(target: ModelSpec, draft: ModelSpec | None) -> str:
    """"target ← drafter" for status lines."""
    return f"{target.display_name} ← {draft.display_name if draft else 'no drafter'}"


class LocalSpecApp(App[None]):
    """Chat with a speculative-decoding pair and watch acceptance live."""

    CSS_PATH = Path(__file__).parent / "localspec.tcss"
    TITLE = "localspec"
    MODES = {"chat": ChatScreen, "models": ModelsScreen}
    DEFAULT_MODE = "chat"
    BINDINGS = [
        Binding("f2", "switch_mode('models')", "Models"),
        Binding("f3", "switch_mode('chat')", "Chat"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    engine: var[Engine | None] = var(None, init=False)
    """The loaded pair (None until one loads)."""
    loading: var[str | None] = var(None, init=False)
    """Description of the pair being loaded, None when idle."""
    load_error: var[str | None] = var(None, init=False)
    """The last load failure, shown in place on the models screen."""

    def __init__(self, engine: Engine | None, settings: TuiSettings) -> None:
        super().__init__()
        self.settings = settings
        self.chat_settings: ChatSettings = settings.chat
        """Current generation settings (the settings dialog replaces them)."""
        self.download_cancels: list[threading.Event] = []
        """Cancel events of running downloads; all set on quit."""
        self.numerics = settings.numerics
        """Numerics mode pairs load in (`--numerics`; the settings dialog changes it)."""
        self._owned: set[int] = set()
        self._initial_engine = engine
        self._pair: tuple[ModelSpec, ModelSpec | None] | None = None
        """The specs of the pair loaded last (reloaded when the numerics mode changes)."""

    def on_mount(self) -> None:
        if self._initial_engine is not None:
            self.engine = self._initial_engine
            return
        if not self.settings.auto_load:
            return
        s = self.settings
        if s.target:
            self.load_pair(self.model_spec(s.target), self.model_spec(s.draft, draft=True) if s.draft else None)
            return
        from localspec.store import default_pair_paths

        try:
            t, d = default_pair_paths()
        except LocalSpecError as exc:
            self.load_error = f"No default pair installed ({exc}). Choose models here."
            self.switch_mode("models")
            return
        self.load_pair(self.model_spec(str(t)), self.model_spec(str(d), draft=True))

    # -- loading --------------------------------------------------------------------
    def model_spec(self, path: str, *, draft: bool = False) -> ModelSpec:
        """How to load `path` with this session's flags (-ngl/-ngld, -c, -t, -fa, numerics)."""
        s = self.settings
        return ModelSpec(path, n_gpu_layers=s.n_gpu_layers_draft if draft else s.n_gpu_layers, n_ctx=s.n_ctx,
                         n_threads=s.n_threads, flash_attn=s.flash_attn, numerics=self.numerics,
                         rpc=() if draft else s.rpc)

    def current_target_path(self) -> str | None:
        """Path of the loaded target, when the app knows it."""
        return self._pair[0].path if self._pair is not None else self.settings.target

    def load_pair(self, target: ModelSpec, draft: ModelSpec | None) -> None:
        """Load a pair in a worker (with this session's threads, flash attention and
        numerics); the current engine stays in use until it succeeds."""
        if self.loading:
            self.notify("A pair is already loading; wait for it.", severity="warning")
            return
        s = self.settings
        target = replace(target, n_threads=s.n_threads, flash_attn=s.flash_attn, numerics=self.numerics)
        if draft is not None:
            draft = replace(draft, n_threads=s.n_threads, flash_attn=s.flash_attn, numerics=self.numerics)
        self.loading = describe_pair(target, draft)
        self.load_error = None
        self._load(target, draft)

    def set_numerics(self, numerics: str) -> None:
        """Use `numerics` from now on; reloads the loaded pair when it runs in another mode."""
        self.numerics = numerics
        engine = self.engine
        if engine is None or engine.info.numerics == numerics:
            return
        if self._pair is None:
            self.notify(f"Numerics {numerics} applies to the next pair you load (F2).")
            return
        self.notify(f"Reloading the pair with {numerics} numerics…")
        self.load_pair(*self._pair)

    @work(thread=True, exclusive=True, group="load", exit_on_error=False)
    def _load(self, target: ModelSpec, draft: ModelSpec | None) -> None:
        """Build the Engine (compat check on GGUF headers first, then the weights)."""
        description = describe_pair(target, draft)
        self.post_message(EngineLoading(description))
        try:
            engine = Engine(target, draft, kernel=self.settings.kernel)
        except LocalSpecError as exc:
            self.post_message(EngineLoadFailed(str(exc)))
            return
        except Exception as exc:  # keep the app alive; show what broke
            log.exception("loading %s failed", description)
            self.post_message(EngineLoadFailed(f"{type(exc).__name__}: {exc}"))
            return
        if get_current_worker().is_cancelled:  # the app is quitting
            engine.close()
            return
        self._pair = (target, draft)
        self.post_message(EngineLoaded(engine, description, owned=True))

    @on(EngineLoaded)
    def use_engine(self, message: EngineLoaded) -> None:
        """Swap in the new engine, close the old one (if the app built it), go to chat."""
        old = self.engine
        if message.owned:
            self._owned.add(id(message.engine))
        self.loading = None
        self.engine = message.engine
        if old is not None and old is not message.engine:
            old.cancel()
            if id(old) in self._owned:
                self._owned.discard(id(old))
                self._close_engine(old)
        self.notify(f"Loaded {message.description}.")
        self.switch_mode("chat")

    @work(thread=True, group="close", exit_on_error=False)
    def _close_engine(self, engine: Engine) -> None:
        """Free a replaced engine (waits for its generation to stop)."""
        engine.close()

    @on(EngineLoadFailed)
    def show_load_error(self, message: EngineLoadFailed) -> None:
        """Keep the previous engine; show the error in place on the models screen."""
        self.loading = None
        self.load_error = message.error
        self.notify(message.error, title=message.title, severity="error", timeout=10)
        if self.current_mode != "models":
            self.switch_mode("models")

    # -- quitting -------------------------------------------------------------------
    def stop_background_work(self) -> None:
        """Cancel the generation and every download (what quitting needs)."""
        if self.engine is not None:
            self.engine.cancel()
        for event in self.download_cancels:
            event.set()

    async def action_quit(self) -> None:
        """Quit cleanly: cancel generation and downloads first."""
        self.stop_background_work()
        self.exit()

    def on_unmount(self) -> None:
        self.stop_background_work()
        engine = self.engine
        if engine is None:
            return
        # Wait (bounded) for the cancelled step to end so nothing is mid-decode at exit.
        deadline = time.monotonic() + QUIT_WAIT_S
        while engine.busy and time.monotonic() < deadline:
            time.sleep(0.01)
        if id(engine) in self._owned:
            engine.close()


def make_app(engine: Engine | None = None, settings: TuiSettings | None = None) -> LocalSpecApp:
    """Build the TUI. With `engine` None it loads `settings.target`/`draft`, else the
    offline default pair when installed, else opens the models screen."""
    return LocalSpecApp(engine, settings or TuiSettings())
