"""`BatchRunner`: several generations at once on one target context (continuous batching).

The target (and the drafter model, if any) hold `n_seq` sequences in one llama.cpp context.
One driver thread runs every active generation's `StepLoop` in lockstep:

    admit waiting requests into free slots (the slot whose cache shares the longest prefix)
    for each generation still prefilling: its next prompt chunk (<= prefill_chunk rows)
    for each generation decoding: plan its step (policy choice with the batch in view, draft)
    one target decode over all of it: every chunk and every [last, d_1..d_k], in slot order
    one acceptance call over every decoding generation (the CUDA kernel: one launch)
    for each generation decoding: commit, roll back its own sequence, emit events

so a new request joins between steps, a finished one leaves between steps, and a long prompt
stalls the others by at most one chunk per step. Each generation keeps its own random
stream, sampling parameters, stop strings and budget; nothing of one sequence reaches
another's cache (each has its own KV stream). Events reach the consumer through a queue;
closing the consumer's iterator cancels that generation at its next step.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from localspec.engine.backend import ModelBackend, common_prefix_len
from localspec.engine.loop import StepLoop
from localspec.engine.metrics import SpecStats
from localspec.engine.request import PreparedRequest
from localspec.kernels import AcceptItem
from localspec.types import AcceptResult, TokenEvent, TokenSource

log = logging.getLogger(__name__)

REUSE_MIN = 32
"""A cached prefix shorter than this does not pick the slot: the lowest free slot does
(llama.cpp batches consecutive sequence ids together in exact numerics)."""
PREFILL_CHUNK = 128
"""Prompt rows one generation adds to a step's batch while it prefills."""
POLL_S = 0.05


def _reuse(n: int) -> int:
    return n if n >= REUSE_MIN else 0


class MultiSequenceBackend(ModelBackend, Protocol):
    """A model whose context holds several sequences (llama.cpp: `LlamaCppBackend(n_seq=N)`)."""

    n_seq: int

    def sequence(self, i: int) -> ModelBackend:
        """The view of sequence i (0 is the model itself)."""
        ...

    def decode_many(self, parts: Sequence[tuple[ModelBackend, Sequence[int], bool]]) -> list[npt.NDArray[np.float32]]:
        """Evaluate (view, tokens, all_logits) parts in one call; logits rows per part."""
        ...


LoopFactory = Callable[[int, PreparedRequest, SpecStats, threading.Event], StepLoop]
"""(slot, request, stats, cancel) -> the request's loop on that slot's sequence views."""


@dataclass
class _Job:
    request: PreparedRequest
    stats: SpecStats
    cancel: threading.Event
    events: queue.SimpleQueue[TokenEvent | BaseException | None] = field(default_factory=queue.SimpleQueue)
    loop: StepLoop | None = None
    slot: int = -1
    rest: list[int] = field(default_factory=list)
    """Prompt tokens still to prefill."""
    prefilling: bool = True


@dataclass
class BatchStats:
    """What the driver did, for /metrics."""

    steps: int = 0
    rows: int = 0
    """Verify + prompt rows decoded."""
    sequences: int = 0
    """Sum over steps of the sequences verified in the step."""

    @property
    def mean_batch(self) -> float:
        """Mean sequences per step."""
        return self.sequences / self.steps if self.steps else 0.0


class BatchRunner:
    """Runs up to `n_seq` generations together; `events()` is one generation's stream."""

    def __init__(self, target: MultiSequenceBackend, make_loop: LoopFactory, *, prefill_chunk: int = PREFILL_CHUNK,
                 on_finish: Callable[[SpecStats], None] | None = None) -> None:
        self.target = target
        self.n_seq = target.n_seq
        self.views = [target.sequence(i) for i in range(self.n_seq)]
        self._make_loop = make_loop
        self.prefill_chunk = max(1, prefill_chunk)
        self._on_finish = on_finish
        self._waiting: deque[_Job] = deque()
        self._active: dict[int, _Job] = {}
        self._cond = threading.Condition()
        self._closed = False
        self.stats = BatchStats()
        self.last_stats: SpecStats | None = None
        """The stats of the generation admitted last."""
        self._thread = threading.Thread(target=self._drive, name="localspec-batch", daemon=True)
        self._thread.start()

    # -- the consumer's side -----------------------------------------------------------
    @property
    def busy(self) -> bool:
        """True while any generation runs or waits."""
        with self._cond:
            return bool(self._active or self._waiting)

    @property
    def full(self) -> bool:
        """True when every slot is taken."""
        with self._cond:
            return len(self._active) + len(self._waiting) >= self.n_seq

    def cancel_all(self) -> None:
        """Cancel every running and waiting generation."""
        with self._cond:
            for job in [*self._active.values(), *self._waiting]:
                job.cancel.set()

    def events(self, request: PreparedRequest, stats: SpecStats, cancel: threading.Event) -> Iterator[TokenEvent]:
        """Queue `request` and yield its events as the driver produces them; leaving early
        cancels it (the driver drops it at its next step)."""
        job = _Job(request, stats, cancel)
        with self._cond:
            if self._closed:
                raise RuntimeError("the engine is closed")
            self._waiting.append(job)
            self._cond.notify_all()
        done = False
        try:
            while True:
                try:
                    item = job.events.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if item is None or isinstance(item, BaseException):
                    done = True
                    if item is not None:
                        raise item
                    return
                done = item.finish_reason is not None
                yield item
                if done:
                    return
        finally:
            if not done:  # left early: the driver ends it at its next step
                cancel.set()

    def close(self) -> None:
        """Cancel everything and stop the driver (waits for its current step)."""
        with self._cond:
            self._closed = True
            for job in [*self._active.values(), *self._waiting]:
                job.cancel.set()
            self._cond.notify_all()
        self._thread.join()

    # -- the driver ----------------------------------------------------------------------
    def _drive(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._active and not self._waiting:
                    self._cond.wait()
                if self._closed and not self._active and not self._waiting:
                    return
                self._admit()
                jobs = list(self._active.values())
            try:
                self._step(jobs)
            except BaseException as exc:  # a failed batch decode: every generation in it ends
                log.exception("a batched step failed")
                for job in jobs:
                    if job.slot in self._active:
                        self._end(job, exc)

    def _admit(self) -> None:
        """Move waiting requests into free slots (called with the condition held)."""
        while self._waiting and len(self._active) < self.n_seq:
            job = self._waiting.popleft()
            if job.cancel.is_set():
                job.stats.finish_reason = "cancelled"
                job.events.put(TokenEvent(-1, "", TokenSource.PLAIN, 0, "cancelled"))
                continue
            free = [i for i in range(self.n_seq) if i not in self._active]
            prompt = job.request.prompt_tokens
            slot = max(free, key=lambda i: (_reuse(common_prefix_len(self.views[i].tokens, prompt)), -i))
            job.slot = slot
            self._active[slot] = job
            self.last_stats = job.stats
            try:
                job.loop = self._make_loop(slot, job.request, job.stats, job.cancel)
                job.rest = job.loop.prefill_begin()
            except BaseException as exc:
                self._end(job, exc)

    def _end(self, job: _Job, item: TokenEvent | BaseException | None = None) -> None:
        """Hand out `item` (the last event or an error) and free the slot."""
        if item is not None:
            job.events.put(item)
        if isinstance(item, BaseException):
            job.events.put(None)
            if job.stats.finish_reason is None:
                job.stats.finish_reason = "error"
        with self._cond:
            self._active.pop(job.slot, None)
            self._cond.notify_all()
        if self._on_finish is not None:
            try:
                self._on_finish(job.stats)
            except Exception:
                log.exception("a finish callback failed")

    def _step(self, jobs: list[_Job]) -> None:
        """One batched decode: prompt chunks and verify rows of every active generation, in
        sequence order (llama.cpp's per-sequence caches take a run of consecutive ids with
        equal rows as one ubatch: sequences out of order cost one pass each)."""
        jobs = sorted(jobs, key=lambda j: j.slot)
        by_slot: dict[int, tuple[ModelBackend, Sequence[int], bool]] = {}
        chunks: list[tuple[_Job, int]] = []
        for job in jobs:
            if not job.prefilling:
                continue
            if job.cancel.is_set():
                assert job.loop is not None
                self._end(job, job.loop.finish_now("cancelled"))
                continue
            n = min(self.prefill_chunk, len(job.rest))
            if n:
                by_slot[job.slot] = (self.views[job.slot], job.rest[:n], False)
            chunks.append((job, n))
        decoding = [j for j in jobs if not j.prefilling]
        planned: list[_Job] = []
        rows = prefill_rows = sum(len(p[1]) for p in by_slot.values())
        undecided = len(decoding)
        tokens_decided = 0.0
        for job in decoding:
            loop = job.loop
            assert loop is not None
            undecided -= 1
            try:
                k_cap = loop.next_k()
                if isinstance(k_cap, TokenEvent):
                    self._end(job, k_cap)
                    continue
                # the policy sees the other sequences' verify rows, not the prompt chunks: a
                # chunk is work the step does anyway, and counted in the step's time it makes
                # drafting look cheap (a 128-row chunk "hid" a draft model's 1 s catch-up)
                verify = loop.plan(k_cap, batch_rows=rows - prefill_rows + undecided,
                                   batch_tokens=tokens_decided + undecided)
            except BaseException as exc:
                self._end(job, exc)
                continue
            tokens_decided += float(getattr(loop.policy, "expected_tokens", 1.0))
            by_slot[job.slot] = (self.views[job.slot], verify, True)
            rows += len(verify)
            planned.append(job)
        if not by_slot:
            for job, _ in chunks:
                self._prefilled(job)
            return
        slots = sorted(by_slot)
        t0 = time.perf_counter()
        outs = dict(zip(slots, self.target.decode_many([by_slot[s] for s in slots]), strict=True))
        dt = time.perf_counter() - t0
        self.stats.steps += 1
        self.stats.rows += rows
        self.stats.sequences += len(planned)
        for job, n in chunks:
            del job.rest[:n]
            if not job.rest:
                self._prefilled(job)
        verified = [outs[job.slot] for job in planned]
        accepted = self._accept(planned, verified)
        first = True
        for job, logits in zip(planned, verified, strict=True):
            assert job.loop is not None
            if job.slot not in accepted:
                continue  # ended by its failure
            try:
                events = job.loop.complete(logits, dt, batch_rows=rows if first else 0, batch=len(planned),
                                           accepted=accepted[job.slot])
            except BaseException as exc:
                self._end(job, exc)
                continue
            first = False
            for event in events[:-1]:
                job.events.put(event)
            if events and events[-1].finish_reason is not None:
                self._end(job, events[-1])
            elif events:
                job.events.put(events[-1])

    def _accept(self, planned: list[_Job], outs: Sequence[npt.NDArray[np.float32]]
                ) -> dict[int, tuple[AcceptResult, float]]:
        """Every planned generation's acceptance in one backend call (one kernel launch on a
        GPU), by slot: (result, its share of the call's seconds). A generation whose inputs
        fail ends alone; if the batched call fails, each is accepted on its own, so one bad
        sequence cannot end the others."""
        items: list[AcceptItem] = []
        ready: list[_Job] = []
        for job, logits in zip(planned, outs, strict=True):
            assert job.loop is not None
            try:
                items.append(job.loop.accept_item(logits))
                ready.append(job)
            except BaseException as exc:
                self._end(job, exc)
        if not ready:
            return {}
        assert ready[0].loop is not None
        acceptor = ready[0].loop.acceptor
        t0 = time.perf_counter()
        try:
            results = acceptor.accept_batch(items)
        except Exception:
            log.exception("batched acceptance failed; accepting sequence by sequence")
            out: dict[int, tuple[AcceptResult, float]] = {}
            for job, item in zip(ready, items, strict=True):
                try:
                    t1 = time.perf_counter()
                    out[job.slot] = (acceptor.accept_one(item), time.perf_counter() - t1)
                except BaseException as exc:
                    self._end(job, exc)
            return out
        share = (time.perf_counter() - t0) / len(ready)
        return {job.slot: (r, share) for job, r in zip(ready, results, strict=True)}

    def _prefilled(self, job: _Job) -> None:
        """The prompt is in: start the drafters; the generation steps from the next batch on."""
        assert job.loop is not None
        try:
            job.loop.prefill_end()
            job.prefilling = False
        except BaseException as exc:
            self._end(job, exc)
