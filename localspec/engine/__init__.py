"""The speculative decoding engine: the public API front ends use.

`Engine.generate(GenerationRequest) -> Iterator[TokenEvent]`, `Engine.cancel()`,
`Engine.stats() -> SpecStats`. Nothing here knows about the TUI, the server or the CLI.
"""

from __future__ import annotations

from localspec.engine.loop import DEFAULT_GAMMA, Engine, EngineInfo
from localspec.engine.metrics import SpecStats
from localspec.types import ChatMessage, GenerationRequest, ModelSpec, TokenEvent, TokenSource

__all__ = [
    "DEFAULT_GAMMA", "ChatMessage", "Engine", "EngineInfo", "GenerationRequest", "ModelSpec",
    "SpecStats", "TokenEvent", "TokenSource",
]
