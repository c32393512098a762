"""Tokens to text, incrementally: UTF-8 safe across token boundaries, with stop strings.

A token may end in the middle of a multi-byte character (emoji, CJK); the decoder holds
those bytes until the character completes. Text that might be the start of a stop string
is held back until it is clear it is not, so the caller never sees a stop string.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class IncrementalDetokenizer:
    """Feed token bytes, get the newly completed text."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        """Bytes of one token -> text completed by it (maybe "")."""
        return self._decoder.decode(piece)

    def flush(self) -> str:
        """End of stream: any dangling bytes become U+FFFD."""
        return self._decoder.decode(b"", final=True)


class StopMatcher:
    """Withholds text that could begin a stop string; reports when one appears."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._pending = ""
        self._hold = max((len(s) for s in self.stops), default=0)

    def push(self, text: str) -> tuple[str, bool]:
        """Add text; return (text safe to emit, whether a stop string was hit).
        After a hit the returned text is everything before the stop string."""
        if not self.stops:
            return text, False
        buf = self._pending + text
        cut = min((i for i in (buf.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self._pending = ""
            return buf[:cut], True
        # keep the longest suffix that is a prefix of some stop string
        keep = 0
        for n in range(min(len(buf), self._hold - 1), 0, -1):
            tail = buf[-n:]
            if any(s.startswith(tail) for s in self.stops):
                keep = n
                break
        self._pending = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        """End of generation: release what was held back."""
        out, self._pending = self._pending, ""
        return out
