"""Time each available acceptance backend per speculative step (`localspec bench kernels`).

The workload is the expensive case for every backend: the draft logits equal the target's
(q == p) and each draft is its row's argmax, so every draft is accepted and all k + 1 rows
are processed (greedy: all argmaxes; sampling: the k ratio tests and the bonus token).

`bench_batch` times a continuous-batching step: B sequences, each such a step, once as B
`accept` calls and once as one `accept_batch` call (for `cuda`: one kernel launch). The
items' logits are views of one [B(γ+1), V] array, as a batched target call returns them.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import numpy as np

from localspec.errors import KernelUnavailableError
from localspec.kernels import AcceptItem
from localspec.types import SamplingParams

log = logging.getLogger(__name__)

GAMMAS = (1, 4, 8, 16)
VOCABS = (49_152, 151_936, 262_144)
TEMPERATURES = (0.0, 0.8)
BATCH_SIZES = (1, 4, 8)
BATCH_GAMMA = 4
BATCH_VOCAB = 151_936


@dataclass(frozen=True)
class KernelTiming:
    """Median seconds per step of one backend on one shape; `speedup` = reference / this."""

    backend: str
    gamma: int
    n_vocab: int
    temperature: float
    median_s: float
    runs: int
    speedup: float | None
    """reference median / this median (None when the reference was not timed)."""

    def as_dict(self) -> dict[str, object]:
        """Plain-data form for `--json`."""
        return asdict(self)


@dataclass(frozen=True)
class BatchTiming:
    """Median seconds for a batch of `batch` sequences on one backend: `per_item_s` = one
    `accept` call per sequence, in a loop; `batch_s` = one `accept_batch` call."""

    backend: str
    batch: int
    gamma: int
    n_vocab: int
    temperature: float
    per_item_s: float
    batch_s: float
    runs: int
    """Timed runs of the batched call (the per-item loop had at least 3 as well)."""

    @property
    def batch_speedup(self) -> float:
        """per_item_s / batch_s: > 1 when one batched call beats the loop of single calls."""
        return self.per_item_s / self.batch_s if self.batch_s > 0 else float("inf")

    def as_dict(self) -> dict[str, object]:
        """Plain-data form for `--json`."""
        return {**asdict(self), "batch_speedup": self.batch_speedup}


def step_inputs(gamma: int, n_vocab: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(target [γ+1, V] float32, drafts [γ], draft logits [γ, V] float32, uniforms [γ+1])."""
    rng = np.random.default_rng(seed)
    target = (rng.standard_normal((gamma + 1, n_vocab), dtype=np.float32) * 3.0).astype(np.float32)
    drafts = target[:gamma].argmax(axis=1).astype(np.int64)
    draft_logits = np.ascontiguousarray(target[:gamma])
    uniforms = rng.random(gamma + 1)
    return target, drafts, draft_logits, uniforms


def time_step(fn: Callable[[], object], min_runs: int = 3, max_runs: int = 30, budget_s: float = 0.25) -> tuple[float, int]:
    """(median seconds, runs) of `fn` after one warm-up call: at least `min_runs`, then
    more while under `budget_s`, at most `max_runs`."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(times)


def available_backends(names: Iterable[str] | None = None) -> tuple[dict[str, object], dict[str, str]]:
    """({name: backend} that can run, {name: reason} for the others) among `names`
    (default: every concrete backend)."""
    from localspec.kernels import _make, backend_status

    status = backend_status()
    wanted = list(names) if names else list(status)
    ready: dict[str, object] = {}
    missing: dict[str, str] = {}
    for name in wanted:
        reason = status.get(name)
        if reason is None:
            try:
                ready[name] = _make(name)
                continue
            except KernelUnavailableError as exc:
                reason = str(exc)
        missing[name] = reason
    return ready, missing


def bench_kernels(
    backends: dict[str, object],
    gammas: Iterable[int] = GAMMAS,
    vocabs: Iterable[int] = VOCABS,
    temperatures: Iterable[float] = TEMPERATURES,
    budget_s: float = 0.25,
    progress: Callable[[str], None] | None = None,
) -> list[KernelTiming]:
    """Time every backend on every (γ, V, T); one process, median of repeated runs."""
    rows: list[KernelTiming] = []
    for n_vocab in vocabs:
        for gamma in gammas:
            target, drafts, q, uniforms = step_inputs(gamma, n_vocab)
            for temperature in temperatures:
                params = SamplingParams(temperature=temperature)
                medians: dict[str, tuple[float, int]] = {}
                for name, backend in backends.items():
                    if progress:
                        progress(f"{name} γ={gamma} V={n_vocab} T={temperature}")

                    def call(b: object = backend) -> object:
                        return b.accept(target, drafts, q, uniforms, params)  # type: ignore[attr-defined]

                    medians[name] = time_step(call, budget_s=budget_s)
                ref = medians.get("reference")
                for name, (median, runs) in medians.items():
                    speedup = ref[0] / median if ref and median > 0 else None
                    rows.append(KernelTiming(name, gamma, n_vocab, temperature, median, runs, speedup))
    return rows


def batch_inputs(batch: int, gamma: int, n_vocab: int, params: SamplingParams, seed: int = 0) -> list[AcceptItem]:
    """`batch` items of the `step_inputs` workload (every draft accepted), their target and
    draft logits views of one array each, back to back (a batched target call's layout)."""
    steps = [step_inputs(gamma, n_vocab, seed=seed + i) for i in range(batch)]
    target = np.concatenate([s[0] for s in steps])  # [batch (γ+1), V]
    draft = np.concatenate([s[2] for s in steps])  # [batch γ, V]
    rows = gamma + 1
    return [AcceptItem(target[i * rows : (i + 1) * rows], drafts, draft[i * gamma : (i + 1) * gamma], uniforms, params)
            for i, (_, drafts, _, uniforms) in enumerate(steps)]


def bench_batch(
    backends: dict[str, object],
    batch_sizes: Iterable[int] = BATCH_SIZES,
    gamma: int = BATCH_GAMMA,
    n_vocab: int = BATCH_VOCAB,
    temperatures: Iterable[float] = TEMPERATURES,
    budget_s: float = 0.25,
    progress: Callable[[str], None] | None = None,
) -> list[BatchTiming]:
    """Per backend, batch size and temperature: median of the per-item loop vs one batched call."""
    rows: list[BatchTiming] = []
    for batch in batch_sizes:
        for temperature in temperatures:
            items = batch_inputs(batch, gamma, n_vocab, SamplingParams(temperature=temperature))
            for name, backend in backends.items():
                if progress:
                    progress(f"{name} batch={batch} γ={gamma} V={n_vocab} T={temperature}")

                def per_item(b: object = backend) -> object:
                    return [b.accept(*item.args()) for item in items]  # type: ignore[attr-defined]

                def batched(b: object = backend) -> object:
                    return b.accept_batch(items)  # type: ignore[attr-defined]

                loop_s, _ = time_step(per_item, budget_s=budget_s)
                batch_s, runs = time_step(batched, budget_s=budget_s)
                rows.append(BatchTiming(name, batch, gamma, n_vocab, temperature, loop_s, batch_s, runs))
    return rows
