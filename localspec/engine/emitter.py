"""After a step: its committed tokens become TokenEvents (text, source, step), and the
generation ends at an end-of-generation token, a stop string or the token budget."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from localspec.engine.metrics import SpecStats
from localspec.engine.text import IncrementalDetokenizer, StopMatcher
from localspec.types import AcceptResult, TokenEvent, TokenSource


class Vocabulary(Protocol):
    """What emitting needs from the target's tokenizer (a `ModelBackend` is one)."""

    def token_bytes(self, token: int) -> bytes:
        """The raw bytes of one token's piece."""
        ...

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens."""
        ...


class Emitter:
    """Turns each step's AcceptResult into events; `finish_reason` is set once it must end."""

    def __init__(self, vocab: Vocabulary, stop: Sequence[str], max_tokens: int, stats: SpecStats) -> None:
        self._vocab = vocab
        self._detok = IncrementalDetokenizer()
        self._stops = StopMatcher(stop)
        self._max_tokens = max_tokens
        self._stats = stats
        self.num_generated = 0
        """Tokens delivered so far."""
        self.finish_reason: str | None = None
        """'stop' (EOG or stop string) or 'length' (budget) once the generation must end."""
        self.last_source = TokenSource.PLAIN
        """Source of the last token looked at (the final event carries it)."""

    def emit(self, result: AcceptResult, step: int) -> Iterator[TokenEvent]:
        """Accepted drafts first, then the recovered / bonus / plain token; stops early at
        an EOG token (not emitted), a stop string (text cut before it) or the budget."""
        for i, token in enumerate(result.tokens):
            source = TokenSource.ACCEPTED if i < result.num_accepted else result.last_source
            self.last_source = source
            if self._vocab.is_eog(token):
                self.finish_reason = "stop"
                return
            text, hit = self._stops.push(self._detok.feed(self._vocab.token_bytes(token)))
            self.num_generated += 1
            self._stats.num_generated_tokens = self.num_generated
            if hit:
                self.finish_reason = self._stats.finish_reason = "stop"
            elif self.num_generated >= self._max_tokens:
                self.finish_reason = "length"
            yield TokenEvent(token, text, source, step)
            if self.finish_reason is not None:
                return

    def final(self, reason: str, source: TokenSource, step: int) -> TokenEvent:
        """The last event: whatever text was held back (a possible stop-string start, an
        incomplete UTF-8 character) and the finish reason."""
        return TokenEvent(-1, self._stops.flush() + self._detok.flush(), source, step, reason)
