"""The speculative decoding engine: the public API front ends use.

`Engine.generate(GenerationRequest) -> Generation`: iterate it for `TokenEvent`s; it has
its own `cancel()`, live `stats` (a `SpecStats`), `close()` and `with` use. Nothing here
knows about the TUI, the server or the CLI.
"""

from __future__ import annotations

from localspec.engine.engine import Engine, EngineInfo
from localspec.engine.generation import Generation
from localspec.engine.metrics import SpecStats
from localspec.engine.request import PreparedRequest
from localspec.types import (
    DEFAULT_GAMMA, ChatMessage, Constraint, GenerationRequest, ModelSpec, TokenEvent, TokenSource,
)

__all__ = [
    "DEFAULT_GAMMA", "ChatMessage", "Constraint", "Engine", "EngineInfo", "Generation", "GenerationRequest", "ModelSpec",
    "PreparedRequest", "SpecStats", "TokenEvent", "TokenSource",
]
