"""App-wide messages. Thread workers post them (post_message is thread-safe) and handlers
on the UI thread update widgets, as Textual's worker guide advises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

from localspec.types import TokenSource

if TYPE_CHECKING:
    from localspec.engine import Engine, SpecStats


@dataclass
class EngineLoading(Message):
    """A pair started loading in the background."""

    description: str


@dataclass
class EngineLoaded(Message):
    """A pair finished loading; `engine` replaces the current one."""

    engine: Engine
    description: str
    owned: bool = True
    """True when the app built the engine (and so must close it)."""


@dataclass
class EngineLoadFailed(Message):
    """Loading a pair failed; the previous engine (if any) stays in use."""

    error: str
    title: str = "Could not load the models"


@dataclass
class TokensStreamed(Message):
    """New reply text: (text, source, step) pieces in order."""

    pieces: list[tuple[str, TokenSource, int]] = field(default_factory=list)


@dataclass
class GenerationFinished(Message):
    """A generation ended (stop, length or cancelled)."""

    purpose: str
    """"chat" (a reply) or "plain" (the plain-decoding measurement)."""
    finish_reason: str
    stats: SpecStats


@dataclass
class GenerationFailed(Message):
    """A generation raised; the prompt is restored."""

    purpose: str
    error: str


@dataclass
class DownloadProgressed(Message):
    """Bytes done of one file of a download."""

    key: str
    phase: str
    """"download", "verify" (hashing) or "done"."""
    done: int
    total: int


@dataclass
class DownloadFinished(Message):
    """A download completed; `path` is the local file."""

    key: str
    path: str


@dataclass
class DownloadFailed(Message):
    """A download failed or was cancelled; nothing partial is left where the app loads from."""

    key: str
    error: str
    cancelled: bool = False
