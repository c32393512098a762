"""The speculative-decoding speed model of Leviathan et al. 2023 (arXiv 2211.17192, §3).

Symbols:
- α: probability that the target accepts one draft token (assumed i.i.d. per position).
- γ: draft length (tokens proposed per step); γ = 0 is plain decoding.
- c: drafter cost per token / target cost per token.
- b(γ): cost of a (γ+1)-token verify batch relative to one target token; b(0) = 1.
  ≈ 1 on a GPU (memory-bound), ≈ 2–3.5 on a small CPU for γ = 4–8.

Pure functions on floats; the recommender and the benchmark both use them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from localspec.types import MAX_GAMMA

BatchCost = Callable[[int], float]
"""b(γ): relative cost of verifying γ draft tokens plus one, with b(0) == 1."""


def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """Expected tokens emitted per target forward: (1 − α^(γ+1)) / (1 − α) (= AL)."""
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def linear_batch_cost(slope: float) -> BatchCost:
    """b(γ) = 1 + slope·γ: slope ≈ 0.01–0.03 on a GPU, ≈ 0.3 on a 2-core CPU (measured
    there with the offline Qwen2.5-Coder 1.5B: a batch of 5 costs 2.13×, a batch of 9
    3.48× one token)."""

    def b(gamma: int) -> float:
        return 1.0 + slope * gamma

    return b


def _as_cost(b: BatchCost | float) -> BatchCost:
    if callable(b):
        return b
    value = float(b)
    # a constant b applies to γ ≥ 1; a γ = 0 step is one plain forward
    return lambda gamma: 1.0 if gamma == 0 else value


def speedup(alpha: float, gamma: int, c: float, b: BatchCost | float) -> float:
    """S(γ) = (1 − α^(γ+1)) / ((1 − α)(γc + b(γ))): wall-time speedup over plain decoding."""
    cost = _as_cost(b)
    return expected_tokens_per_step(alpha, gamma) / (gamma * c + cost(gamma))


@dataclass(frozen=True)
class GammaChoice:
    """The best draft length and what the model predicts for it."""

    gamma: int
    speedup: float
    tokens_per_step: float


def best_gamma(alpha: float, c: float, b: BatchCost | float, max_gamma: int = MAX_GAMMA) -> GammaChoice:
    """Integer search over γ = 0..max_gamma; γ = 0 (S = 1) is always a candidate, so the
    answer never predicts a slowdown. Ties go to the smaller γ."""
    best = GammaChoice(0, speedup(alpha, 0, c, b), 1.0)
    for gamma in range(1, max_gamma + 1):
        s = speedup(alpha, gamma, c, b)
        if s > best.speedup + 1e-12:
            best = GammaChoice(gamma, s, expected_tokens_per_step(alpha, gamma))
    return best


def estimate_alpha(accepted_per_position: Sequence[int], drafted_per_position: Sequence[int]) -> float:
    """α from per-position counts (not from the acceptance rate, which early stops bias).

    `drafted_per_position[i]` = steps that drafted more than i tokens,
    `accepted_per_position[i]` = steps whose draft i was accepted. Position i is a trial
    only for steps that accepted every earlier draft and drafted > i tokens; with a fixed γ
    that is exactly `accepted[i-1]`, with a varying γ it is estimated as
    `accepted[i-1] · drafted[i] / drafted[i-1]`. α = successes / trials (the MLE of the
    geometric model). Returns 0.0 when nothing was drafted.
    """
    successes = 0.0
    trials = 0.0
    for i, drafted in enumerate(drafted_per_position):
        if drafted <= 0:
            break
        accepted = accepted_per_position[i] if i < len(accepted_per_position) else 0
        if i == 0:
            reached = float(drafted)
        else:
            prev = drafted_per_position[i - 1]
            reached = accepted_per_position[i - 1] * (drafted / prev) if prev else 0.0
        successes += accepted
        trials += reached
    if trials <= 0:
        return 0.0
    return min(1.0, successes / trials)


def fit_batch_slope(gamma: int, b_measured: float) -> float:
    """Slope of the linear b(γ) through b(0) = 1 and one measured point b(γ)."""
    if gamma <= 0:
        raise ValueError("need gamma >= 1 to fit a batch-cost slope")
    return max(0.0, (b_measured - 1.0) / gamma)
