"""Screens of the TUI: models (choose, download, load a pair) and chat."""

from __future__ import annotations
