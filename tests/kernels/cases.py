"""Shared grid of acceptance cases and the comparison against the NumPy reference.

Every backend computes in float32 (the CUDA kernel adds 64-bit fixed-point sums); the
reference in float64. Tokens must be identical given the same uniforms, except where a
decision of the reference is within float32 error of its boundary. `fragile_reasons`
detects such decisions explicitly (ratio test u*q(d) vs p(d), the inverse-CDF boundary of
the sampled token, the top-p nucleus boundary) with an error bound derived from float32
rounding of the same formulas; a mismatch is accepted only with such a reason, and the
tests also cap how many there may be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from localspec.kernels.reference import _probs_row, accept_ref, probs_from_logits
from localspec.types import AcceptResult, SamplingParams

EPS32 = 2.0**-24
"""Unit roundoff of float32."""

PARAMS = (
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=0.8),
    SamplingParams(temperature=1.0, top_k=40),
    SamplingParams(temperature=0.7, top_p=0.9),
    SamplingParams(temperature=1.3, top_k=200, top_p=0.95),
)
SMALL_VOCABS = (1, 7, 4099)
LARGE_VOCABS = (49_152, 151_936, 262_147)
KS = (0, 1, 4, 8, 16)


@dataclass(frozen=True)
class Case:
    """One step's inputs: target [k+1, V], drafts [k], q [k, V] | None, uniforms [k+1]."""

    target: np.ndarray
    drafts: np.ndarray
    q: np.ndarray | None
    uniforms: np.ndarray
    params: SamplingParams
    label: str

    def run(self, accept: Callable[..., AcceptResult]) -> AcceptResult:
        """Call a backend's `accept` on this case."""
        return accept(self.target, self.drafts, self.q, self.uniforms, self.params)


def make_case(rng: np.random.Generator, k: int, n_vocab: int, params: SamplingParams, with_q: bool,
              label: str = "") -> Case:
    """Peaked random logits (std 3), q = target + noise, drafts mostly plausible."""
    target = (rng.standard_normal((k + 1, n_vocab), dtype=np.float32) * 3.0).astype(np.float32)
    noise = rng.uniform(0.2, 2.0)
    q = (target[:k] + noise * rng.standard_normal((k, n_vocab), dtype=np.float32)).astype(np.float32) if with_q else None
    source = q if q is not None else target[:k]
    drafts = np.empty(k, dtype=np.int64)
    for i in range(k):
        roll = rng.random()
        if roll < 0.6:
            drafts[i] = int(np.argmax(source[i]))
        elif roll < 0.85:
            top = np.argpartition(source[i], -min(10, n_vocab))[-min(10, n_vocab):]
            drafts[i] = int(rng.choice(top))
        else:
            drafts[i] = int(rng.integers(n_vocab))
    uniforms = rng.random(k + 1)
    tag = label or f"k={k} V={n_vocab} T={params.temperature} top_k={params.top_k} top_p={params.top_p} q={with_q}"
    return Case(target, drafts, q, uniforms, params, tag)


def grid(seed: int = 0, large: bool = True) -> Iterator[Case]:
    """The comparison grid: every (k, params, q) on small odd vocabularies; on the large
    ones every k with a rotating subset of params (keeps the suite within its time budget)."""
    rng = np.random.default_rng(seed)
    for n_vocab in SMALL_VOCABS:
        for k in KS:
            for params in PARAMS:
                for with_q in (False, True):
                    yield make_case(rng, k, n_vocab, params, with_q)
    if not large:
        return
    for vi, n_vocab in enumerate(LARGE_VOCABS):
        for ki, k in enumerate(KS):
            for with_q in (False, True):
                params = PARAMS[(vi + ki + with_q) % len(PARAMS)]
                yield make_case(rng, k, n_vocab, params, with_q)
            yield make_case(rng, k, n_vocab, PARAMS[0], False)  # greedy on every large shape


SERVER_GAMMAS = (1, 2, 3, 4, 6, 8, 12, 16, 32)
"""Draft lengths a request may ask for, up to `types.MAX_GAMMA` = 32."""
REAL_VOCABS = (32_000, 128_256, 151_936, 262_144)
"""Llama-2 / Mistral, Llama-3, Qwen2.5, Gemma-3."""


def shape_grid(seed: int = 11) -> Iterator[Case]:
    """Every γ of `SERVER_GAMMAS` on every vocabulary of `REAL_VOCABS`: greedy, T=0.8 with
    draft logits, T=0.8 without (n-gram drafts) — the shapes the engine sends a backend."""
    rng = np.random.default_rng(seed)
    for n_vocab in REAL_VOCABS:
        for k in SERVER_GAMMAS:
            yield make_case(rng, k, n_vocab, SamplingParams(temperature=0.0), False)
            yield make_case(rng, k, n_vocab, SamplingParams(temperature=0.8), True)
            yield make_case(rng, k, n_vocab, SamplingParams(temperature=0.8), False)


def special_cases() -> Iterator[Case]:
    """Hand-made edge cases: ties, -inf logits, q == p (recovery fallback), V = 1."""
    rng = np.random.default_rng(7)
    tie = np.zeros((3, 10), dtype=np.float32)
    tie[:, [3, 5]] = 2.0
    yield Case(tie, np.array([3, 5]), None, rng.random(3), SamplingParams(0.0), "greedy ties: lowest index")
    yield Case(tie, np.array([3, 3]), tie[:2].copy(), rng.random(3), SamplingParams(1.0, top_k=2), "top-k ties kept")
    masked = (rng.standard_normal((5, 300)) * 2).astype(np.float32)
    masked[:, 100:] = -np.inf
    yield Case(masked, masked[:4].argmax(1), None, rng.random(5), SamplingParams(0.9), "-inf logits")
    same = (rng.standard_normal((5, 1000)) * 3).astype(np.float32)
    u = rng.random(5)
    u[:4] = np.nextafter(1.0, 0.0)  # every ratio test with q == p at u -> 1 still accepts
    yield Case(same, np.array([1, 2, 3, 4]), same[:4].copy(), u, SamplingParams(0.8), "q == p accepts")
    one = np.zeros((4, 1), dtype=np.float32)
    yield Case(one, np.zeros(3, dtype=np.int64), one[:3].copy(), rng.random(4), SamplingParams(0.8), "V = 1")
    far = (rng.standard_normal((3, 2000)) * 3).astype(np.float32)
    uu = np.array([0.999, 0.999, 0.3])
    yield Case(far, far[:2].argmin(1), None, uu, SamplingParams(0.5), "n-gram drafts rejected")


def _z_abs(row: np.ndarray, temperature: float) -> np.ndarray:
    z = row.astype(np.float64) / temperature
    finite = np.isfinite(z)
    out = np.zeros_like(z)
    out[finite] = np.abs(z[finite] - z[finite].max())
    return out


def _slack(z_abs: np.ndarray | float) -> np.ndarray | float:
    """Relative float32 error bound of exp((x - max) / T) normalised: a few roundings plus
    the error of (x - max) / T amplified by |z| through exp."""
    return EPS32 * (16.0 + 4.0 * np.asarray(z_abs))


def _quant(n_vocab: int) -> float:
    """Fixed-point quantization of the CUDA kernel, in probability units, over a whole row."""
    bits = min(48, 62 - int(n_vocab).bit_length())
    return 4.0 * n_vocab * 2.0**-bits


def fragile_reasons(case: Case, ref: AcceptResult, got: AcceptResult) -> list[str]:
    """Decisions of the reference within float32 error of their boundary, on the rows where
    the two results could have parted (up to the later of the two stopping rows)."""
    params = case.params
    if params.greedy:
        return []  # argmax over the same float32 logits: no rounding involved
    reasons: list[str] = []
    k = case.drafts.shape[0]
    n_vocab = case.target.shape[1]
    last = min(k, max(ref.num_accepted, got.num_accepted))
    for i in range(last + 1):
        rows = [("p", case.target[i])] + ([("q", case.q[i])] if case.q is not None and i < k else [])
        if params.top_p < 1.0:
            for tag, row in rows:
                pre = _probs_row(row, SamplingParams(params.temperature, params.top_k))
                srt = np.sort(pre)[::-1]
                csum = np.cumsum(srt)
                j = min(int(np.searchsorted(csum, params.top_p)), n_vocab - 1)
                tol = float(np.max(_slack(_z_abs(row, params.temperature)) * 1.0)) + _quant(n_vocab)
                near = [abs(csum[j] - params.top_p)] + ([abs(csum[j - 1] - params.top_p)] if j else [])
                if min(near) <= tol:
                    reasons.append(f"row {i} {tag}: top-p nucleus boundary within {min(near):.2e} (bound {tol:.2e})")
        p = _probs_row(case.target[i], params)
        zp = _z_abs(case.target[i], params.temperature)
        if i < k:
            d = int(case.drafts[i])
            u = float(case.uniforms[i])
            if case.q is None:
                lhs, rhs, zq = u, p[d], 0.0
            else:
                qv = _probs_row(case.q[i], params)
                lhs, rhs = u * qv[d], p[d]
                zq = float(_z_abs(case.q[i], params.temperature)[d])
            bound = float(_slack(max(float(zp[d]), zq))) * (lhs + rhs) + _quant(n_vocab)
            if abs(lhs - rhs) <= bound:
                reasons.append(f"row {i}: ratio test margin {abs(lhs - rhs):.2e} within bound {bound:.2e}")
        if i == ref.num_accepted and i == got.num_accepted:
            reasons.extend(_sampling_fragility(case, i, p, zp))
    return reasons


def _sampling_fragility(case: Case, i: int, p: np.ndarray, zp: np.ndarray) -> list[str]:
    params = case.params
    k = case.drafts.shape[0]
    n_vocab = p.shape[0]
    err = _slack(zp) * p
    if i == k:
        weights = p
    elif case.q is None:
        weights = p.copy()
        weights[int(case.drafts[i])] = 0.0
    else:
        qv = _probs_row(case.q[i], params)
        weights = np.maximum(p - qv, 0.0)
        err = err + _slack(_z_abs(case.q[i], params.temperature)) * qv
        if not weights.sum() > 0.0:
            weights = p
    csum = np.cumsum(weights)
    total = csum[-1]
    u = float(case.uniforms[k])
    t = u * total
    idx = min(int(np.searchsorted(csum, t, side="right")), n_vocab - 1)
    err_cum = np.cumsum(err) + _quant(n_vocab)
    bound = err_cum[idx] + u * err_cum[-1]
    lower = csum[idx - 1] if idx else 0.0
    margin = min(t - lower, csum[idx] - t)
    if margin <= bound:
        return [f"row {i}: sampled token {idx} within {margin:.2e} of its CDF boundary (bound {bound:.2e})"]
    return []


def compare(cases: Iterator[Case], accept: Callable[..., AcceptResult]) -> tuple[int, list[str], list[str]]:
    """Run `accept` on every case against the reference: (cases, justified mismatches,
    unjustified mismatches)."""
    n = 0
    justified: list[str] = []
    wrong: list[str] = []
    for case in cases:
        n += 1
        ref = case.run(accept_ref)
        got = case.run(accept)
        if got == ref:
            continue
        reasons = fragile_reasons(case, ref, got)
        line = f"{case.label}: reference {ref} got {got}"
        (justified if reasons else wrong).append(line + (f" [{'; '.join(reasons)}]" if reasons else ""))
    return n, justified, wrong


def float32_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The same processing in float32 NumPy on the reference's kept set: the float32 error
    scale a backend is compared with (flash-attn's 'twice the error of a low-precision
    reference')."""
    ref = probs_from_logits(logits, params)
    x = logits.astype(np.float32)
    m = x.max(axis=1, keepdims=True)
    w = np.exp((x - m) / np.float32(params.temperature)).astype(np.float32)
    w = np.where(ref > 0, w, np.float32(0))
    return (w / w.sum(axis=1, keepdims=True, dtype=np.float32)).astype(np.float64)


# ---------------------------------------------------------------------------- batches

BATCH_LAYOUTS = ("separate", "views", "strided")
"""How a batch's logits lie in memory: each item its own arrays; views of one [Σ(k_i+1), V]
buffer back to back (what a batched target call returns: the CUDA backend passes it without
a copy); every other column of wider float64 arrays (non-contiguous, not float32)."""


def mixed_batch(rng: np.random.Generator, size: int, n_vocab: int, layout: str = "separate",
                max_k: int = 8) -> list[Case]:
    """`size` cases sharing V, mixing greedy and sampled params, k in 0..max_k, with and
    without draft logits, their logits laid out as `layout` says."""
    cases = []
    for _ in range(size):
        params = PARAMS[int(rng.integers(len(PARAMS)))]
        k = int(rng.integers(max_k + 1))
        cases.append(make_case(rng, k, n_vocab, params, bool(rng.random() < 0.6)))
    if layout == "separate":
        return cases
    if layout == "views":
        target = np.concatenate([c.target for c in cases])
        with_q = [c for c in cases if c.q is not None]
        q_all = np.concatenate([c.q for c in with_q if c.q is not None]) if with_q else None
        out, row, q_row = [], 0, 0
        for c in cases:
            rows = c.target.shape[0]
            q = None
            if c.q is not None and q_all is not None:
                q = q_all[q_row : q_row + rows - 1]
                q_row += rows - 1
            out.append(Case(target[row : row + rows], c.drafts, q, c.uniforms, c.params, c.label + " [views]"))
            row += rows
        return out
    if layout == "strided":
        def widen(x: np.ndarray) -> np.ndarray:
            wide = np.zeros((x.shape[0], 2 * x.shape[1]), dtype=np.float64)
            wide[:, ::2] = x
            return wide[:, ::2]

        return [Case(widen(c.target), c.drafts, None if c.q is None else widen(c.q), c.uniforms, c.params,
                     c.label + " [strided]") for c in cases]
    raise ValueError(f"unknown layout {layout!r}")


def batch_items(cases: list[Case]) -> list:
    """AcceptItems of `cases`, in order."""
    from localspec.kernels import AcceptItem

    return [AcceptItem(c.target, c.drafts, c.q, c.uniforms, c.params) for c in cases]


def batches(seed: int, vocabs: tuple[int, ...] = (1000, 32_000), sizes: tuple[int, ...] = tuple(range(1, 9)),
            max_k: int = 8) -> Iterator[list[Case]]:
    """One mixed batch per (V, size), the layouts in rotation."""
    rng = np.random.default_rng(seed)
    for n_vocab in vocabs:
        for size in sizes:
            yield mixed_batch(rng, size, n_vocab, BATCH_LAYOUTS[size % len(BATCH_LAYOUTS)], max_k)


def compare_batch(cases: list[Case], results: list[AcceptResult]) -> tuple[int, list[str], list[str]]:
    """`compare` for results a batch call returned for `cases` (in order)."""
    by_case = {id(c.target): r for c, r in zip(cases, results, strict=True)}
    return compare(iter(cases), lambda target, *rest: by_case[id(target)])
