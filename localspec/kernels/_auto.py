"""`auto`: time the available backends once per shape class, then use the fastest.

A shape class is (k, V, greedy, drafts with q). The first step of a class runs each
candidate on the live inputs (they agree, since each implements the same rule) and keeps
the fastest; that costs one step per backend, a few milliseconds, once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from localspec.types import AcceptResult, SamplingParams

if TYPE_CHECKING:
    from localspec.kernels import AcceptanceBackend

log = logging.getLogger(__name__)

ShapeClass = tuple[int, int, bool, bool]
"""(k, n_vocab, greedy, has draft logits)."""

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
            result, choice = self._choose(shape, logits, draft_tokens, draft_logits, uniforms, params)
            self.choices[shape] = choice
            self._last = choice.backend
            return result
        self._last = choice.backend
        return self._by_name[choice.backend].accept(logits, draft_tokens, draft_logits, uniforms, params)

    def _choose(
        self,
        shape: ShapeClass,
        logits: np.ndarray,
        draft_tokens: npt.ArrayLike,
        draft_logits: npt.ArrayLike | None,
        uniforms: npt.ArrayLike,
        params: SamplingParams,
    ) -> tuple[AcceptResult, AutoChoice]:
        timings: dict[str, float] = {}
        results: dict[str, AcceptResult] = {}
        for backend in self.candidates:
            if backend.name != "reference":
                # The first call pays one-off setup (allocations, thread pools, lazy init).
                results[backend.name] = backend.accept(logits, draft_tokens, draft_logits, uniforms, params)
            best = float("inf")
            spent = 0.0
            runs = 0
            while runs < 3 and (runs == 0 or spent < _TIMING_BUDGET_S):
                t0 = time.perf_counter()
                results[backend.name] = backend.accept(logits, draft_tokens, draft_logits, uniforms, params)
                dt = time.perf_counter() - t0
                spent += dt
                best = min(best, dt)
                runs += 1
            timings[backend.name] = best
        fastest = min(timings, key=timings.__getitem__)
        k, n_vocab, greedy, with_q = shape
        log.info(
            "acceptance backend auto: k=%d V=%d %s%s -> %s (%s)", k, n_vocab, "greedy" if greedy else "sampling",
            " with q" if with_q else "", fastest, ", ".join(f"{n} {t * 1e3:.2f} ms" for n, t in timings.items()),
        )
        return results[fastest], AutoChoice(fastest, timings)
