"""Regenerate docs/tui-chat.png: the real app on the offline default pair (real weights),
mid-reply, with the stats panel. Run from the repo root:

    flock /tmp/localspec-heavy.lock .venv/bin/python tests/tui/make_screenshot.py

Needs `rsvg-convert` (Debian: librsvg2-bin), which keeps the terminal's columns aligned.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from localspec.tui.app import make_app
from localspec.tui.settings import ChatSettings, TuiSettings

OUT = Path("docs/tui-chat.png")
SIZE = (110, 34)
FIRST = "Write a Python function is_palindrome(s) that ignores case and spaces."
SECOND = "Now add pytest tests for it, covering empty strings and punctuation."


def svg_to_png(svg: str, png: Path, width: int = 1400) -> None:
    """rsvg-convert the screenshot; NBSPs become plain spaces kept with xml:space="preserve"
    (rsvg draws a leading NBSP of a text run in the wrong column)."""
    fixed = re.sub(r"&#160;", " ", svg).replace("<svg ", '<svg xml:space="preserve" ', 1)
    with tempfile.NamedTemporaryFile("w", suffix=".svg", delete=False) as f:
        f.write(fixed)
    png.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["rsvg-convert", "-w", str(width), f.name, "-o", str(png)], check=True)


async def wait(pilot, condition, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the app did not get there in time")
        await pilot.pause(0.1)


async def main() -> int:
    app = make_app(settings=TuiSettings(n_ctx=2048, chat=ChatSettings(max_tokens=96)))
    async with app.run_test(size=SIZE) as pilot:
        await wait(pilot, lambda: app.engine is not None, 120)
        chat = app.screen
        await pilot.click("#chat-input")
        await pilot.press(*FIRST, "enter")
        await wait(pilot, lambda: chat.generating is None and len(chat.history) == 2, 120)
        await pilot.press("f5")  # measure plain decoding on the same prompt
        await wait(pilot, lambda: chat.query_one("StatsPanel").plain_tok_s is not None, 120)
        await pilot.pause(4)  # let the notifications fade
        await pilot.click("#chat-input")
        await pilot.press(*SECOND, "enter")
        await wait(pilot, lambda: chat.reply is not None and len(chat.reply.text) > 160, 120)
        await pilot.pause(1.0)
        svg = app.export_screenshot(title="localspec — chat (Qwen2.5-Coder 1.5B ← 0.5B, CPU)")
        await pilot.press("escape")
        await wait(pilot, lambda: chat.generating is None, 60)
    svg_to_png(svg, OUT)
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
