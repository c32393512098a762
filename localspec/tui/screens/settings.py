"""The settings dialog: system prompt, sampling, drafting, numerics; shows the kernel."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from localspec.tui.settings import ChatSettings
from localspec.types import DRAFTER_KINDS, NUMERICS_MODES


@dataclass(frozen=True)
class SettingsChange:
    """What the dialog returns on Save."""

    chat: ChatSettings
    numerics: str
    """One of NUMERICS_MODES (a load setting: another mode reloads the pair)."""


def parse_settings(values: dict[str, str], drafter: str, show_accepted: bool) -> ChatSettings:
    """ChatSettings from the dialog's text fields; ValueError names the bad field."""

    def number(name: str, kind: type, low: float, high: float, blank: object = ...) -> object:
        raw = values[name].strip()
        if not raw and blank is not ...:
            return blank
        try:
            value = kind(raw)
        except ValueError:
            raise ValueError(f"{name}: {raw!r} is not a {kind.__name__}") from None
        if not low <= value <= high:
            raise ValueError(f"{name}: {value} is outside [{low:g}, {high:g}]")
        return value

    return ChatSettings(
        system_prompt=values["system prompt"],
        temperature=number("temperature", float, 0.0, 5.0),  # type: ignore[arg-type]
        top_p=number("top-p", float, 0.0, 1.0),  # type: ignore[arg-type]
        seed=number("seed", int, 0, 2**63 - 1, None),  # type: ignore[arg-type]
        gamma=number("γ", int, 0, 16, None),  # type: ignore[arg-type]
        max_tokens=number("max tokens", int, 1, 32768),  # type: ignore[arg-type]
        drafter=drafter,
        show_accepted=show_accepted,
    )


class SettingsScreen(ModalScreen[SettingsChange | None]):
    """Edit ChatSettings and the numerics mode; Save returns them, Esc returns None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "save", "Save")]

    FIELDS = ("system prompt", "temperature", "top-p", "seed", "γ", "max tokens")

    def __init__(self, settings: ChatSettings, kernel: str, numerics: str = "exact") -> None:
        super().__init__()
        self.settings = settings
        self.kernel = kernel
        self.numerics = numerics

    def _value(self, name: str) -> str:
        s = self.settings
        return {
            "system prompt": s.system_prompt, "temperature": f"{s.temperature:g}", "top-p": f"{s.top_p:g}",
            "seed": "" if s.seed is None else str(s.seed), "γ": "" if s.gamma is None else str(s.gamma),
            "max tokens": str(s.max_tokens),
        }[name]

    def compose(self) -> ComposeResult:
        with Vertical(id="settings-dialog"):
            with Grid(id="settings-grid"):
                for i, name in enumerate(self.FIELDS):
                    yield Label(name)
                    placeholder = {"seed": "random", "γ": "engine default"}.get(name, "")
                    yield Input(self._value(name), placeholder=placeholder, id=f"setting-{i}", compact=True)
                yield Label("drafter")
                yield Select([(k, k) for k in DRAFTER_KINDS], value=self.settings.drafter,
                             allow_blank=False, id="setting-drafter", compact=True)
                yield Label("numerics")
                yield Select([(m, m) for m in NUMERICS_MODES], value=self.numerics,
                             allow_blank=False, id="setting-numerics", compact=True)
                yield Label("backend")
                yield Static(f"{self.kernel} (acceptance kernel)", id="setting-kernel")
            yield Checkbox("mark accepted draft tokens", self.settings.show_accepted, id="setting-marks",
                           compact=True)
            yield Static(id="settings-error")
            with Horizontal(id="settings-buttons"):
                yield Button("Save", variant="primary", id="settings-save", compact=True)
                yield Button("Cancel", id="settings-cancel", compact=True)

    @on(Button.Pressed, "#settings-save")
    @on(Input.Submitted)
    def action_save(self) -> None:
        """Validate and return the new settings (errors shown in place)."""
        values = {name: self.query_one(f"#setting-{i}", Input).value for i, name in enumerate(self.FIELDS)}
        drafter = str(self.query_one("#setting-drafter", Select).value)
        try:
            settings = parse_settings(values, drafter, self.query_one("#setting-marks", Checkbox).value)
        except ValueError as exc:
            error = self.query_one("#settings-error", Static)
            error.update(str(exc))
            error.add_class("-error")
            return
        self.dismiss(SettingsChange(settings, str(self.query_one("#setting-numerics", Select).value)))

    @on(Button.Pressed, "#settings-cancel")
    def action_cancel(self) -> None:
        """Close without changes."""
        self.dismiss(None)
