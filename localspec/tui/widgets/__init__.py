"""Widgets of the TUI: the transcript, the stats panel, download rows."""

from __future__ import annotations
