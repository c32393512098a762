"""The Textual TUI: choose and download a model pair, chat with it, watch speculative
decoding work (acceptance length, per-position acceptance, tok/s, speedup) live.

Build it only with `localspec.tui.app.make_app(engine, settings)`; nothing happens at import.
"""

from __future__ import annotations
