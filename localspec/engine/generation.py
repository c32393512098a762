"""`Generation`: the handle `Engine.generate()` returns, one per request.

    with engine.generate(GenerationRequest(prompt="def fib(n):")) as gen:
        for event in gen:
            print(event.text, end="")
    gen.stats  # this generation's SpecStats

A generation takes the engine when its iteration starts (waiting for the one that runs,
or raising EngineBusyError when made with `wait=False`) and gives it back when its last
event has been produced, on `close()` / leaving the `with` block, or when the handle is
dropped. `cancel()` works from any thread, before or during iteration: the generation
ends at its next step boundary with a last event whose finish_reason is "cancelled".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator
from types import TracebackType

from localspec.engine.metrics import SpecStats
from localspec.engine.request import PreparedRequest
from localspec.errors import EngineBusyError
from localspec.types import TokenEvent, TokenSource

StepLoop = Callable[[SpecStats, threading.Event], Iterator[TokenEvent]]
"""The engine's loop for one generation: fills the stats, stops when the event is set.
Called with the engine's lock held."""

WAIT_POLL_S = 0.05
"""While waiting for the engine, how often a cancel is noticed."""


class _Progress:
    """Where the generation is; shared with its event generator (which must not hold the
    handle itself, so that dropping the handle closes the generator and frees the engine)."""

    def __init__(self) -> None:
        self.started = False
        """The engine was taken."""
        self.ended = False
        """The last event was produced or the generation was closed."""


def _events(lock: threading.Lock, wait: bool, loop: StepLoop, stats: SpecStats, cancel: threading.Event,
            progress: _Progress) -> Generator[TokenEvent, None, None]:
    """Take the engine, run the loop, give the engine back (also on close or error)."""
    try:
        if not cancel.is_set():
            if not wait:
                if not lock.acquire(blocking=False):
                    raise EngineBusyError("the engine is generating for another request")
                progress.started = True
            else:
                while not cancel.is_set():
                    if lock.acquire(timeout=WAIT_POLL_S):
                        progress.started = True
                        break
        if not progress.started:  # cancelled before it ran: no engine needed
            stats.finish_reason = "cancelled"
            yield TokenEvent(-1, "", TokenSource.PLAIN, 0, "cancelled")
            return
        try:
            yield from loop(stats, cancel)
        finally:
            lock.release()
    finally:
        progress.ended = True


class Generation:
    """One generation: an iterator of TokenEvents (the last has `finish_reason` set) with its
    own `cancel()`, live `stats` and the validated `request` it runs."""

    def __init__(self, request: PreparedRequest, lock: threading.Lock, loop: StepLoop, *, wait: bool = True,
                 kernel: str = "") -> None:
        self.request = request
        """The validated request (prompt tokens, sampling, budget, drafter)."""
        self._cancel = threading.Event()
        self._stats = SpecStats(kernel=kernel, num_requests=1)
        self._progress = _Progress()
        self._events = _events(lock, wait, loop, self._stats, self._cancel, self._progress)
        self._iterating = threading.Lock()
        """Held inside `__next__`; `close()` from another thread then only cancels."""

    def __iter__(self) -> Generation:
        return self

    def __next__(self) -> TokenEvent:
        with self._iterating:
            return next(self._events)

    def __enter__(self) -> Generation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def stats(self) -> SpecStats:
        """A snapshot of this generation's stats (live while it runs)."""
        return self._stats.snapshot()

    @property
    def finish_reason(self) -> str | None:
        """'stop', 'length' or 'cancelled' once ended; None before."""
        return self._stats.finish_reason

    @property
    def cancelled(self) -> bool:
        """True once `cancel()` was called (or the generation was closed early)."""
        return self._cancel.is_set()

    @property
    def started(self) -> bool:
        """True once the generation has taken the engine."""
        return self._progress.started

    @property
    def ended(self) -> bool:
        """True once its last event was produced or it was closed."""
        return self._progress.ended

    def cancel(self) -> None:
        """End at the next step boundary (thread-safe; no effect once ended)."""
        if not self._progress.ended:
            self._cancel.set()

    def close(self) -> None:
        """End now and give the engine back (idempotent). Meant for the iterating thread;
        while another thread is inside `next()` it only cancels."""
        if self._progress.ended:
            return
        self._cancel.set()
        if not self._iterating.acquire(blocking=False):
            return
        try:
            if not self._progress.started:
                self._stats.finish_reason = "cancelled"
                self._progress.ended = True
            self._events.close()
        finally:
            self._iterating.release()
