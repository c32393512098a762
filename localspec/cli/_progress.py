"""Progress as plain lines, for runs whose output goes to a log file rather than a terminal.

Rich's live bar draws nothing until the end when stdout is not a terminal, so a benchmark
started in the background (``localspec bench … > run.log 2>&1 &``) would say nothing for an
hour. `LineProgress` takes the same ``(n, label)`` calls as the bar and writes one line at
most every `every_s` seconds, and one when the work is done.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def _hms(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class LineProgress:
    """Counts units of work (tokens) and writes "done/total (pct), elapsed, ETA, label" lines."""

    def __init__(self, total: int, write: Callable[[str], None], *, every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = max(0, total)
        self.done = 0
        self._write = write
        self._every_s = every_s
        self._clock = clock
        self._start = clock()
        self._last_line = self._start

    def __call__(self, n: int, label: str) -> None:
        self.done += n
        now = self._clock()
        finished = self.total > 0 and self.done >= self.total
        if finished or now - self._last_line >= self._every_s:
            self._last_line = now
            self._write(self.line(label, now))

    def line(self, label: str, now: float) -> str:
        elapsed = now - self._start
        pct = 100.0 * self.done / self.total if self.total else 100.0
        if self.done >= self.total:
            eta = "done"
        elif self.done > 0:
            eta = "ETA " + _hms(elapsed * (self.total - self.done) / self.done)
        else:
            eta = "ETA ?"
        return f"{self.done}/{self.total} tokens ({pct:.0f} %), {_hms(elapsed)} elapsed, {eta} · {label}"
