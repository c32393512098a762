"""From raw per-generation stats to per-arm totals and the speed model's inputs.

Everything is pooled as sums of counts and seconds (never averages of ratios), so
AL = 1 + Σ accepted / Σ steps and tok/s = Σ generated / Σ generate-seconds.

Model inputs (the speed model of localspec.theory, Leviathan et al. 2023), measured per
(temperature, category):
- α: per-token acceptance probability from the per-position counts (theory.estimate_alpha),
  pooled over the γ arms of one drafter by summing successes and trials.
- c: drafter decode seconds per drafted token / target decode seconds per plain step.
- b(γ): verify seconds per step at γ / verify seconds per step of plain decoding.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from localspec import theory

SUM_FIELDS = (
    "num_steps", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_output_tokens",
    "num_generated_tokens", "num_prompt_tokens", "num_cached_prompt_tokens", "num_requests",
    "t_prefill_s", "t_draft_s", "t_verify_s", "t_accept_s", "t_generate_s",
    "t_decode_target_s", "t_decode_draft_s",
)


def _add_lists(dst: list[int], src: Sequence[int]) -> None:
    if len(dst) < len(src):
        dst.extend([0] * (len(src) - len(dst)))
    for i, v in enumerate(src):
        dst[i] += int(v)


def pool_stats(stats: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Sum the raw counters of several `SpecStats.to_dict()` and derive the rates.

    Returns the summed fields plus `drafted_per_position`, `accepted_per_position`,
    `gamma_counts`, and derived `al`, `acceptance_rate`, `per_position_acceptance`,
    `tokens_per_s`, `num_generations`.
    """
    out: dict[str, Any] = {k: 0 for k in SUM_FIELDS}
    drafted: list[int] = []
    accepted: list[int] = []
    gamma_counts: dict[str, int] = {}
    n = 0
    for s in stats:
        n += 1
        for k in SUM_FIELDS:
            out[k] += s.get(k, 0)
        _add_lists(drafted, s.get("drafted_per_position", []))
        _add_lists(accepted, s.get("accepted_per_position", []))
        for g, c in s.get("gamma_counts", {}).items():
            gamma_counts[str(g)] = gamma_counts.get(str(g), 0) + int(c)
    _add_lists(accepted, [0] * len(drafted))
    steps = out["num_steps"]
    out.update(
        num_generations=n,
        drafted_per_position=drafted,
        accepted_per_position=accepted,
        gamma_counts=gamma_counts,
        al=1.0 + out["num_accepted_tokens"] / steps if steps else 0.0,
        acceptance_rate=out["num_accepted_tokens"] / out["num_draft_tokens"] if out["num_draft_tokens"] else 0.0,
        per_position_acceptance=[a / d if d else 0.0 for a, d in zip(accepted, drafted)],
        tokens_per_s=out["num_generated_tokens"] / out["t_generate_s"] if out["t_generate_s"] > 0 else 0.0,
    )
    return out


def alpha_trials(accepted_per_position: Sequence[int], drafted_per_position: Sequence[int]) -> tuple[float, float]:
    """(successes, trials) behind `theory.estimate_alpha`, so several arms can be pooled:
    α_pooled = Σ successes / Σ trials. trials = successes / α (all of position 0's drafts
    when nothing was accepted)."""
    successes = float(sum(accepted_per_position[: len(drafted_per_position)]))
    if not drafted_per_position or drafted_per_position[0] <= 0:
        return 0.0, 0.0
    alpha = theory.estimate_alpha(accepted_per_position, drafted_per_position)
    if alpha <= 0.0:
        return 0.0, float(drafted_per_position[0])
    return successes, successes / alpha


def pooled_alpha(arms: Iterable[Mapping[str, Any]]) -> float:
    """α over several pooled arms (each with per-position counts); 0.0 without drafts."""
    s_sum = t_sum = 0.0
    for a in arms:
        s, t = alpha_trials(a["accepted_per_position"], a["drafted_per_position"])
        s_sum += s
        t_sum += t
    return s_sum / t_sum if t_sum > 0 else 0.0


def cost_ratio(draft_arms: Iterable[Mapping[str, Any]], plain: Mapping[str, Any]) -> float | None:
    """c = (Σ drafter decode s / Σ drafted tokens) / (target decode s per plain step)."""
    t_draft = n_draft = 0.0
    for a in draft_arms:
        t_draft += a["t_decode_draft_s"]
        n_draft += a["num_draft_tokens"]
    if n_draft <= 0 or plain["num_steps"] <= 0 or plain["t_decode_target_s"] <= 0:
        return None
    return float((t_draft / n_draft) / (plain["t_decode_target_s"] / plain["num_steps"]))


def batch_cost(arm: Mapping[str, Any], plain: Mapping[str, Any]) -> float | None:
    """b(γ) = verify seconds per step of this arm / verify seconds per plain step."""
    if arm["num_steps"] <= 0 or plain["num_steps"] <= 0 or plain["t_verify_s"] <= 0:
        return None
    return float((arm["t_verify_s"] / arm["num_steps"]) / (plain["t_verify_s"] / plain["num_steps"]))


def interpolated_cost(points: Mapping[int, float]) -> theory.BatchCost:
    """b(γ) through (0, 1) and the measured points, linear between them and continued
    with the last segment's slope beyond the largest measured γ."""
    xs = [0, *sorted(g for g in points if g > 0)]
    ys = [1.0, *(points[g] for g in xs[1:])]

    def b(gamma: int) -> float:
        if gamma <= 0:
            return 1.0
        if gamma >= xs[-1]:
            if len(xs) < 2:
                return 1.0
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            return ys[-1] + max(0.0, slope) * (gamma - xs[-1])
        return float(np.interp(gamma, xs, ys))

    return b


def accepted_histogram(accepted_per_position: Sequence[int], num_steps: int) -> list[int]:
    """[i] = steps that accepted exactly i drafts (recovered from the per-position counts:
    a step accepts draft i only if it accepted every earlier one)."""
    reach = [num_steps, *accepted_per_position]
    return [reach[i] - (reach[i + 1] if i + 1 < len(reach) else 0) for i in range(len(reach))]


def al_step_se(accepted_per_position: Sequence[int], num_steps: int) -> float:
    """Standard error of AL treating steps as independent (a lower bound on the true
    uncertainty: steps within one answer are correlated)."""
    if num_steps < 2:
        return math.nan
    hist = np.asarray(accepted_histogram(accepted_per_position, num_steps), dtype=float)
    k = np.arange(len(hist), dtype=float)
    mean = float((hist * k).sum() / num_steps)
    var = float((hist * (k - mean) ** 2).sum() / (num_steps - 1))
    return math.sqrt(var / num_steps)


def _resampled_sums(
    per_prompt: Sequence[Sequence[float]], n_boot: int, seed: int
) -> npt.NDArray[np.float64] | None:
    """Column sums over prompts resampled with replacement, [n_boot, columns]; None with
    fewer than 2 prompts (no interval to speak of)."""
    if len(per_prompt) < 2:
        return None
    arr = np.asarray(per_prompt, dtype=float)  # [n_prompts, columns]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(arr), size=(n_boot, len(arr)))
    return np.stack([arr[idx, j].sum(axis=1) for j in range(arr.shape[1])], axis=1)


def _ci95(values: npt.NDArray[np.float64]) -> tuple[float, float]:
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def al_bootstrap(
    per_prompt: Sequence[tuple[int, int]], n_boot: int = 2000, seed: int = 0
) -> tuple[float, float] | None:
    """95 % percentile CI of AL = 1 + Σ accepted / Σ steps, resampling prompts.
    `per_prompt` = (accepted, steps) per prompt; None with fewer than 2 prompts."""
    s = _resampled_sums(per_prompt, n_boot, seed)
    return None if s is None else _ci95(1.0 + s[:, 0] / np.maximum(s[:, 1], 1.0))


def ratio_bootstrap(
    per_prompt: Sequence[tuple[float, float]], n_boot: int = 2000, seed: int = 0
) -> tuple[float, float] | None:
    """95 % percentile CI of Σ num / Σ den over prompts resampled with replacement
    (for α: per-prompt (successes, trials)); None with fewer than 2 prompts."""
    s = _resampled_sums(per_prompt, n_boot, seed)
    if s is None:
        return None
    return _ci95(np.where(s[:, 1] > 0, s[:, 0] / np.maximum(s[:, 1], 1e-12), 0.0))


def speedup_bootstrap(
    per_prompt: Sequence[tuple[float, float, float, float]], n_boot: int = 2000, seed: int = 0
) -> tuple[float, float] | None:
    """95 % percentile CI of an arm's speedup over plain decoding, (Σ tokens ÷ Σ seconds of
    the arm) ÷ (the same of plain), resampling prompts in pairs: each prompt keeps its arm
    and its plain run together, so how fast a prompt is does not widen the interval, only
    how the two runs of it differ (the machine's noise, the arm's own variation).
    `per_prompt` = (arm tokens, arm seconds, plain tokens, plain seconds); None with fewer
    than 2 prompts."""
    s = _resampled_sums(per_prompt, n_boot, seed)
    if s is None:
        return None
    arm = s[:, 0] / np.maximum(s[:, 1], 1e-12)
    plain = s[:, 2] / np.maximum(s[:, 3], 1e-12)
    return _ci95(np.where(plain > 0, arm / np.maximum(plain, 1e-12), 0.0))


def al_split_half(per_prompt: Sequence[tuple[int, int]]) -> float | None:
    """|AL(even prompts) − AL(odd prompts)|; None with fewer than 2 prompts."""
    if len(per_prompt) < 2:
        return None
    halves = [per_prompt[0::2], per_prompt[1::2]]
    als = []
    for h in halves:
        steps = sum(s for _, s in h)
        als.append(1.0 + sum(a for a, _ in h) / steps if steps else 1.0)
    return abs(als[0] - als[1])


def theory_for(
    alpha: float, c: float, b_points: Mapping[int, float], gammas: Sequence[int]
) -> dict[str, Any]:
    """The speed model at the measured inputs: predicted AL and S(γ) for each measured γ,
    the best γ over the integers 0..max(gammas), and the best among {0} ∪ gammas."""
    b = interpolated_cost(b_points)
    predicted = {
        str(g): {
            "al": theory.expected_tokens_per_step(alpha, g),
            "speedup": theory.speedup(alpha, g, c, b),
        }
        for g in gammas
    }
    best = theory.best_gamma(alpha, c, b, max_gamma=max(gammas))
    measured_set = [(0, 1.0)] + [(g, predicted[str(g)]["speedup"]) for g in gammas]
    best_in_set = max(measured_set, key=lambda x: (x[1], -x[0]))
    return {
        "predicted": predicted,
        "best_gamma": best.gamma,
        "best_speedup": best.speedup,
        "best_gamma_in_set": best_in_set[0],
        "best_speedup_in_set": best_in_set[1],
    }
