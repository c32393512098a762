"""CLI: `tui` commands (not built yet)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""


def tui_command() -> None:
    """Open the TUI (not built yet)."""
    typer.echo("The TUI is not built yet; try `localspec generate --help`.")
