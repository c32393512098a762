"""`auto`: time the available backends once per shape class, then use the fastest.

A shape class is (k, V, greedy, drafts with q). The first step of a class runs each
candidate on the live inputs (they agree, since each implements the same rule) and keeps
the fastest; that costs one step per backend, a few milliseconds, once.

Batches are timed apart: a one-launch batch (`cuda`) and a loop of single calls scale
differently with the number of sequences, so the choice for one step says little about a
batch. `accept_batch` keeps a choice per batch class (number of items, V, every item
greedy), made the same way on the first batch of that class by timing each candidate's
`accept_batch` on the live items; later batches of the class go to that backend's
`accept_batch` in one call. The class ignores the items' k (it varies step to step with
adaptive drafting; timing every mix would cost more than it saves). `name` reports the
backend of the latest call, single or batched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from localspec.types import AcceptResult, SamplingParams

if TYPE_CHECKING:
    from localspec.kernels import AcceptanceBackend, AcceptItem

log = logging.getLogger(__name__)
_R = TypeVar("_R")

ShapeClass = tuple[int, int, bool, bool]
"""(k, n_vocab, greedy, has draft logits)."""

BatchClass = tuple[int, int, bool]
"""(number of items, n_vocab, every item greedy)."""

_TIMING_BUDGET_S = 0.005
"""Per candidate: after one untimed warm-up call (not for the reference), repeat the timed
call while it has used less than this, at most 3 times, and keep the fastest run."""


@dataclass(frozen=True)
class AutoChoice:
    """What auto picked for one shape class, and the timings it based that on (seconds)."""

    backend: str
    timings: dict[str, float]


class AutoBackend:
    """Picks the fastest of `candidates` per shape class; `name` says what runs ('auto:torch-cpu')."""

    def __init__(self, candidates: list[AcceptanceBackend], unavailable: dict[str, str] | None = None) -> None:
        if not candidates:
            raise ValueError("auto needs at least one candidate backend")
        self.candidates = list(candidates)
        self.unavailable = dict(unavailable or {})
        """Backends auto could not use, with the reason (shown by stats and `doctor`)."""
        self.choices: dict[ShapeClass, AutoChoice] = {}
        self.batch_choices: dict[BatchClass, AutoChoice] = {}
        """What auto picked per batch class for `accept_batch`."""
        self._by_name = {b.name: b for b in self.candidates}
        self._last: str | None = None

    @property
    def name(self) -> str:
        """'auto:<backend>' for the backend of the latest step ('auto' before the first)."""
        return f"auto:{self._last}" if self._last else "auto"

    def accept(
        self,
        target_logits: npt.ArrayLike,
        draft_tokens: npt.ArrayLike,
        draft_logits: npt.ArrayLike | None,
        uniforms: npt.ArrayLike,
        params: SamplingParams,
    ) -> AcceptResult:
        """Shapes as `reference.accept_ref`: target [k+1, V], drafts [k], q [k, V] | None, uniforms [k+1]."""
        logits = np.asarray(target_logits)
        k = int(np.asarray(draft_tokens).reshape(-1).shape[0])
        shape: ShapeClass = (k, int(logits.shape[-1]), params.greedy, draft_logits is not None)
        choice = self.choices.get(shape)
        if choice is None:
            result, choice = self._choose(
                lambda b: b.accept(logits, draft_tokens, draft_logits, uniforms, params),
                f"k={shape[0]} V={shape[1]} {'greedy' if params.greedy else 'sampling'}"
                + (" with q" if draft_logits is not None else ""))
            self.choices[shape] = choice
            self._last = choice.backend
            return result
        self._last = choice.backend
        return self._by_name[choice.backend].accept(logits, draft_tokens, draft_logits, uniforms, params)

    def accept_batch(self, items: Sequence[AcceptItem]) -> list[AcceptResult]:
        """The batch on the backend chosen for its batch class (timed on the first such batch)."""
        from localspec.kernels import batch_vocab

        if not items:
            return []
        n_vocab = batch_vocab(items)
        greedy = all(item.params.greedy for item in items)
        key: BatchClass = (len(items), n_vocab, greedy)
        choice = self.batch_choices.get(key)
        if choice is None:
            results, choice = self._choose(
                lambda b: b.accept_batch(items),
                f"batch of {len(items)} V={n_vocab} {'greedy' if greedy else 'mixed/sampling'}")
            self.batch_choices[key] = choice
            self._last = choice.backend
            return results
        self._last = choice.backend
        return self._by_name[choice.backend].accept_batch(items)

    def _choose(self, call: Callable[[AcceptanceBackend], _R], what: str) -> tuple[_R, AutoChoice]:
        """Time `call` on each candidate; (the fastest one's result, the choice)."""
        timings: dict[str, float] = {}
        results: dict[str, _R] = {}
        for backend in self.candidates:
            if backend.name != "reference":
                # The first call pays one-off setup (allocations, thread pools, lazy init).
                results[backend.name] = call(backend)
            best = float("inf")
            spent = 0.0
            runs = 0
            while runs < 3 and (runs == 0 or spent < _TIMING_BUDGET_S):
                t0 = time.perf_counter()
                results[backend.name] = call(backend)
                dt = time.perf_counter() - t0
                spent += dt
                best = min(best, dt)
                runs += 1
            timings[backend.name] = best
        fastest = min(timings, key=timings.__getitem__)
        log.info(
            "acceptance backend auto: %s -> %s (%s)", what, fastest,
            ", ".join(f"{n} {t * 1e3:.2f} ms" for n, t in timings.items()),
        )
        return results[fastest], AutoChoice(fastest, timings)
