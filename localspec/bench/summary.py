"""The benchmark's summary: per temperature, per category (and "all"), per arm, plus the
speed-model estimates and the theory-vs-measured best γ. Plain data, JSON-ready."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from localspec.bench import estimates as est
from localspec.bench.runner import BenchConfig, Sample

ALL = "all"
"""Pseudo-category pooling every category."""


def temp_key(t: float) -> str:
    """JSON key of a temperature: "0", "0.8"."""
    return f"{t:g}"


def _per_prompt(samples: Sequence[Sample], *fields: str) -> dict[str, list[float]]:
    """Per prompt, the sums of these stats fields over its turns."""
    out: dict[str, list[float]] = {}
    for s in samples:
        row = out.setdefault(s.question_id, [0.0] * len(fields))
        for i, f in enumerate(fields):
            row[i] += float(s.stats[f])
    return out


def _speedup_ci(samples: Sequence[Sample], plain: Sequence[Sample], seed: int) -> tuple[float, float] | None:
    """Paired bootstrap CI of the speedup over the prompts both arms measured."""
    speed = ("num_generated_tokens", "t_generate_s")
    arm, base = _per_prompt(samples, *speed), _per_prompt(plain, *speed)
    pairs = [(arm[q][0], arm[q][1], base[q][0], base[q][1]) for q in arm if q in base]
    return est.speedup_bootstrap(pairs, seed=seed)


def _per_round_speedup(samples: Sequence[Sample], plain: Sequence[Sample]) -> list[float] | None:
    """tok/s ÷ plain tok/s within each round (`BenchConfig.repeat` > 1), else None."""
    rounds = sorted({s.round for s in samples})
    if len(rounds) < 2:
        return None
    out = []
    for r in rounds:
        a = est.pool_stats(s.stats for s in samples if s.round == r)["tokens_per_s"]
        b = est.pool_stats(s.stats for s in plain if s.round == r)["tokens_per_s"]
        out.append(a / b if a and b else float("nan"))
    return out


def _arm_summary(
    samples: Sequence[Sample], plain_tps: float | None, seed: int, plain: Sequence[Sample] = ()
) -> dict[str, Any]:
    pooled = est.pool_stats(s.stats for s in samples)
    per_prompt = [(int(a), int(n)) for a, n in _per_prompt(samples, "num_accepted_tokens", "num_steps").values()]
    ci = est.al_bootstrap(per_prompt, seed=seed)
    sci = _speedup_ci(samples, plain, seed) if plain and plain_tps else None
    pooled.update(
        num_prompts=len(per_prompt),
        al_ci95=list(ci) if ci else None,
        speedup_ci95=list(sci) if sci else None,
        al_split_half_diff=est.al_split_half(per_prompt),
        al_step_se=est.al_step_se(pooled["accepted_per_position"], pooled["num_steps"]),
        speedup=pooled["tokens_per_s"] / plain_tps if plain_tps else None,
        speedup_per_round=_per_round_speedup(samples, plain) if plain and plain_tps else None,
    )
    return pooled


def _alpha_per_prompt(samples: Sequence[Sample], drafter: str) -> list[tuple[float, float]]:
    """(successes, trials) of α per prompt, over every fixed-γ arm of `drafter`."""
    groups: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        if s.drafter == drafter:
            groups.setdefault((s.question_id, s.arm), []).append(s)
    per: dict[str, list[float]] = {}
    for (qid, _), group in groups.items():
        pooled = est.pool_stats(g.stats for g in group)
        succ, trials = est.alpha_trials(pooled["accepted_per_position"], pooled["drafted_per_position"])
        row = per.setdefault(qid, [0.0, 0.0])
        row[0] += succ
        row[1] += trials
    return [(a, b) for a, b in per.values()]


def _drafter_estimates(
    arms: dict[str, dict[str, Any]], drafter: str, gammas: Sequence[int],
    samples: Sequence[Sample] = (), seed: int = 0,
) -> dict[str, Any] | None:
    plain = arms.get("plain")
    fixed = {g: arms[f"{drafter}@{g}"] for g in gammas if f"{drafter}@{g}" in arms}
    if plain is None or not fixed:
        return None
    alpha = est.pooled_alpha(fixed.values())
    c = est.cost_ratio(fixed.values(), plain)
    b = {g: v for g, a in fixed.items() if (v := est.batch_cost(a, plain)) is not None}
    measured = {"0": 1.0, **{str(g): a["speedup"] for g, a in fixed.items() if a["speedup"] is not None}}
    best_measured = max(measured.items(), key=lambda kv: (kv[1], -int(kv[0])))
    out: dict[str, Any] = {
        "alpha": alpha,
        "alpha_per_gamma": {
            str(g): est.pooled_alpha([a]) for g, a in fixed.items()
        },
        "alpha_ci95": (list(ci) if (ci := est.ratio_bootstrap(_alpha_per_prompt(samples, drafter), seed=seed)) else None),
        "c": c,
        "b": {str(g): v for g, v in b.items()},
        "measured_speedup": measured,
        "measured_best_gamma": int(best_measured[0]),
        "measured_best_speedup": best_measured[1],
        "theory": None,
    }
    if c is not None and b:
        out["theory"] = est.theory_for(alpha, c, b, sorted(fixed))
    return out


def summarize(samples: Sequence[Sample], config: BenchConfig) -> dict[str, Any]:
    """{temperature: {"categories": {cat: {"arms": {arm: pooled}, "estimates": {drafter: ...}}}}}.

    `samples` should be complete groups only (BenchRun.complete_samples()).
    """
    out: dict[str, Any] = {}
    arm_keys = [a.key for a in config.arms]
    fixed_drafters = [d for d in config.drafters if d not in ("none", "adaptive")]
    for t in config.temperatures:
        at_t = [s for s in samples if s.temperature == t]
        cats = list(dict.fromkeys(s.category for s in at_t))
        block: dict[str, Any] = {}
        for cat in [*cats, ALL] if cats else []:
            in_cat = at_t if cat == ALL else [s for s in at_t if s.category == cat]
            by_arm = {k: [s for s in in_cat if s.arm == k] for k in arm_keys}
            plain = by_arm.get("plain") or []
            plain_tps = est.pool_stats(s.stats for s in plain)["tokens_per_s"] if plain else None
            arms = {
                k: _arm_summary(v, plain_tps, config.seed, plain) for k, v in by_arm.items() if v
            }
            estimates = {
                d: e for d in fixed_drafters
                if (e := _drafter_estimates(arms, d, config.gammas, in_cat, config.seed)) is not None
            }
            block[cat] = {"arms": arms, "estimates": estimates}
        out[temp_key(t)] = {"categories": block}
    return out
