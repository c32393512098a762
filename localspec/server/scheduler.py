"""One engine, `engine.parallel` generations at a time (one unless `--parallel`), a bounded
queue in front of it.

The engine is synchronous: each admitted `Generation` (the handle `engine.generate(...)`
returns) is drained by a `Relay` in its own worker thread, which hands the events to the
event loop, so the loop never blocks. Events are handed over in batches: the worker wakes
the loop once per burst (a speculative step emits up to γ+1 tokens at once), and the stream
sends one chunk per batch. Requests beyond `max_queue` waiting ones are refused at once
(`QueueFullError` -> 429 with Retry-After). `Relay.cancel()` (client gone) cancels that
generation only; it ends at its next speculative step, the worker closes it, which releases
the engine, and only then is the next request admitted.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from localspec.engine import Engine, Generation, SpecStats, TokenEvent
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


class Relay:
    """One admitted generation: iterate `events()` / `batches()` on the event loop; `cancel()`
    from anywhere."""

    def __init__(self, generation: Generation, loop: asyncio.AbstractEventLoop, on_done: Callable[[], None],
                 queue_s: float) -> None:
        self.generation = generation
        self._loop = loop
        self._on_done = on_done
        self._events: asyncio.Queue[list[object]] = asyncio.Queue()
        self._pending: deque[object] = deque()
        """Items put by the worker that the loop has not taken yet (guarded by `_hand_off`)."""
        self._hand_off = threading.Lock()
        self._wake_scheduled = False
        self.queue_s = queue_s
        """Seconds this request waited for the engine."""
        self.t_start = time.perf_counter()
        self.t_first_token: float | None = None
        self.done_callbacks: list[Callable[[Relay], None]] = []
        """Run on the event loop after the worker has released the engine."""
        self._thread = threading.Thread(target=self._work, name="localspec-generation", daemon=True)

    def start(self) -> None:
        """Start the worker thread."""
        self._thread.start()

    @property
    def stats(self) -> SpecStats:
        """This generation's stats (final once its events have ended)."""
        return self.generation.stats

    @property
    def finish_reason(self) -> str | None:
        """The engine's finish reason ('stop', 'length', 'cancelled'); None after a failure."""
        return self.generation.finish_reason

    @property
    def cancelled(self) -> bool:
        """True once `cancel()` was called."""
        return self.generation.cancelled

    def cancel(self) -> None:
        """Stop this generation (thread-safe; no effect once it has ended)."""
        self.generation.cancel()

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
            self.generation.cancel()

    def _take(self) -> None:
        """On the loop: move everything the worker put so far into the events queue."""
        with self._hand_off:
            batch = list(self._pending)
            self._pending.clear()
            self._wake_scheduled = False
        self._events.put_nowait(batch)

    def _work(self) -> None:
        try:
            for event in self.generation:
                if self.t_first_token is None and event.token_id >= 0:
                    self.t_first_token = time.perf_counter()
                self._put(event)
        except BaseException as exc:  # delivered to the consumer, which maps it
            self._put(_Failed(exc))
        finally:
            self.generation.close()  # releases the engine now, whatever happened
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
    """Admission of generations on one engine: `engine.parallel` run at once (one, or a
    continuous batch), up to `max_queue` more wait."""

    def __init__(self, engine: Engine, max_queue: int, retry_after_s: int = 1) -> None:
        self.engine = engine
        self.max_queue = max_queue
        self.retry_after_s = retry_after_s
        self.slots = max(1, getattr(engine, "parallel", 1))
        """Generations that run at once."""
        self._slots: asyncio.Semaphore | None = None
        self.waiting = 0
        """Requests waiting for the engine now."""
        self.running = 0
        """Generations running now (0..slots)."""

    async def start(self, generation: Generation,
                    on_finish: Callable[[Relay], None] | None = None) -> Relay:
        """Wait for a free slot (or close `generation` and raise QueueFullError) and start
        relaying it; `on_finish(relay)` runs on the loop once its slot is free again."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.slots)
        slots = self._slots
        if slots.locked() and self.waiting >= self.max_queue:
            generation.close()
            raise QueueFullError(self.max_queue, self.retry_after_s)
        t0 = time.perf_counter()
        self.waiting += 1
        try:
            await slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1

        def release() -> None:
            self.running -= 1
            slots.release()

        try:
            relay = Relay(generation, asyncio.get_running_loop(), release, time.perf_counter() - t0)
            if on_finish is not None:
                relay.done_callbacks.append(on_finish)
            relay.start()
        except BaseException:
            release()
            raise
        return relay
