"""One engine, one generation at a time, a bounded queue in front of it.

The engine is synchronous: each admitted generation drains `engine.generate(...)` in its
own worker thread and hands events to the event loop, so the loop never blocks. Events
are handed over in batches: the worker wakes the loop once per burst (a speculative step
emits up to γ+1 tokens at once), and the stream sends one chunk per batch. Requests
beyond `max_queue` waiting ones are refused at once (`QueueFullError` -> 429 with
Retry-After). `Generation.cancel()` (client gone) stops the engine at its next
speculative step (`engine.cancel()`), or after the current event if the
generation had not reached the engine yet; the worker then closes the iterator, which
releases the engine, and only then is the next request admitted.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from localspec.engine import Engine, SpecStats, TokenEvent
from localspec.server.errors import APIError

log = logging.getLogger(__name__)


class QueueFullError(APIError):
    """Too many requests are waiting for the engine."""

    def __init__(self, max_queue: int, retry_after_s: int) -> None:
        super().__init__(
            429, f"the server is busy: {max_queue} request(s) already wait for the model; retry shortly",
            code="queue_full", type="rate_limit_error", headers={"Retry-After": str(retry_after_s)},
        )


@dataclass
class _Failed:
    exc: BaseException


_END = object()
_MAX_EVENTS_AFTER_CANCEL = 256
"""A step emits at most γ+1 tokens; past this the iterator is closed instead."""


class Generation:
    """A running generation: iterate `events()` on the event loop; `cancel()` from anywhere."""

    def __init__(self, engine: Engine, iterator: Iterator[TokenEvent], loop: asyncio.AbstractEventLoop,
                 on_done: Callable[[], None], queue_s: float) -> None:
        self._engine = engine
        self._iterator = iterator
        self._loop = loop
        self._on_done = on_done
        self._events: asyncio.Queue[list[object]] = asyncio.Queue()
        self._pending: deque[object] = deque()
        """Items put by the worker that the loop has not taken yet (guarded by `_hand_off`)."""
        self._hand_off = threading.Lock()
        self._wake_scheduled = False
        self._stop = threading.Event()
        self._guard = threading.Lock()
        self._finished = False
        self._started = False
        self.queue_s = queue_s
        """Seconds this request waited for the engine."""
        self.t_start = time.perf_counter()
        self.t_first_token: float | None = None
        self.stats: SpecStats | None = None
        """The engine's stats of this generation, set when it ends."""
        self.finish_reason: str | None = None
        self.done_callbacks: list[Callable[[Generation], None]] = []
        """Run on the event loop after the worker has released the engine."""
        self._thread = threading.Thread(target=self._work, name="localspec-generation", daemon=True)

    def start(self) -> None:
        """Start the worker thread."""
        self._thread.start()

    @property
    def cancelled(self) -> bool:
        """True once `cancel()` was called."""
        return self._stop.is_set()

    def cancel(self) -> None:
        """Stop this generation (thread-safe; no effect once it has ended)."""
        with self._guard:
            if self._finished or self._stop.is_set():
                return
            self._stop.set()
            # Safe: the next generation cannot start before this one is marked finished.
            self._engine.cancel()

    def _put(self, item: object) -> None:
        """Hand `item` to the loop; wakes it only if no hand-off is already scheduled."""
        with self._hand_off:
            self._pending.append(item)
            if self._wake_scheduled:
                return
            self._wake_scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._take)
        except RuntimeError:  # the loop is closed (server shutting down)
            self._stop.set()

    def _take(self) -> None:
        """On the loop: move everything the worker put so far into the events queue."""
        with self._hand_off:
            batch = list(self._pending)
            self._pending.clear()
            self._wake_scheduled = False
        self._events.put_nowait(batch)

    def _work(self) -> None:
        try:
            after_cancel = 0
            for event in self._iterator:
                self._started = True
                if event.finish_reason is not None:
                    self.finish_reason = event.finish_reason
                elif self.t_first_token is None and event.token_id >= 0:
                    self.t_first_token = time.perf_counter()
                self._put(event)
                if self._stop.is_set():
                    # The engine has started (an event came), so this cancel cannot be
                    # lost: it ends the generation at the next step with "cancelled".
                    if after_cancel == 0:
                        self._engine.cancel()
                    after_cancel += 1
                    if after_cancel > _MAX_EVENTS_AFTER_CANCEL:
                        break
        except BaseException as exc:  # delivered to the consumer, which maps it
            self._put(_Failed(exc))
        finally:
            with self._guard:
                self._finished = True
            try:
                close = getattr(self._iterator, "close", None)
                if close is not None:
                    close()  # releases the engine's lock if we stopped early
                if self._started:  # else the engine's stats are still the previous request's
                    self.stats = self._engine.stats()
            except BaseException:  # pragma: no cover - engine bug; keep the queue moving
                log.exception("closing a generation failed")
            if self.finish_reason is None:
                self.finish_reason = "cancelled" if self._stop.is_set() else "stop"
            self._put(_END)
            try:
                self._loop.call_soon_threadsafe(self._done_on_loop)
            except RuntimeError:
                pass

    def _done_on_loop(self) -> None:
        try:
            for callback in self.done_callbacks:
                try:
                    callback(self)
                except Exception:
                    log.exception("a generation callback failed")
        finally:
            self._on_done()

    async def batches(self) -> AsyncIterator[list[TokenEvent]]:
        """The generation's events, in order, in the batches the worker handed over (each
        non-empty); re-raises an engine failure after the events before it."""
        while True:
            batch: list[TokenEvent] = []
            for item in await self._events.get():
                if item is _END or isinstance(item, _Failed):
                    if batch:
                        yield batch
                    if isinstance(item, _Failed):
                        raise item.exc
                    return
                assert isinstance(item, TokenEvent)
                batch.append(item)
            if batch:
                yield batch

    async def events(self) -> AsyncIterator[TokenEvent]:
        """The generation's events, in order; re-raises an engine failure."""
        async for batch in self.batches():
            for event in batch:
                yield event

    async def wait_closed(self) -> None:
        """Wait until the worker thread has released the engine."""
        await asyncio.to_thread(self._thread.join)


class GenerationQueue:
    """Admission and serialization of generations on one engine."""

    def __init__(self, engine: Engine, max_queue: int, retry_after_s: int = 1) -> None:
        self.engine = engine
        self.max_queue = max_queue
        self.retry_after_s = retry_after_s
        self._lock: asyncio.Lock | None = None
        self.waiting = 0
        """Requests waiting for the engine now."""
        self.running = 0
        """Generations running now (0 or 1)."""

    async def start(self, iterator: Iterator[TokenEvent],
                    on_finish: Callable[[Generation], None] | None = None) -> Generation:
        """Wait for the engine (or raise QueueFullError) and start draining `iterator`;
        `on_finish(generation)` runs on the loop once the engine is free again."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        lock = self._lock
        if lock.locked() and self.waiting >= self.max_queue:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
            raise QueueFullError(self.max_queue, self.retry_after_s)
        t0 = time.perf_counter()
        self.waiting += 1
        try:
            await lock.acquire()
        finally:
            self.waiting -= 1
        self.running += 1

        def release() -> None:
            self.running -= 1
            lock.release()

        try:
            gen = Generation(self.engine, iterator, asyncio.get_running_loop(), release, time.perf_counter() - t0)
            if on_finish is not None:
                gen.done_callbacks.append(on_finish)
            gen.start()
        except BaseException:
            release()
            raise
        return gen
