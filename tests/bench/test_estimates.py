"""Estimators and the speed model, against values computed by hand."""

from __future__ import annotations

import math

import pytest

from localspec import theory
from localspec.bench import estimates as est


def _arm(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {k: 0 for k in est.SUM_FIELDS}
    base.update(drafted_per_position=[], accepted_per_position=[], gamma_counts={})
    base.update(kw)
    return base


def test_pool_stats_sums_counts_and_derives_rates() -> None:
    a = _arm(num_steps=10, num_accepted_tokens=12, num_draft_tokens=20, num_generated_tokens=22,
             t_generate_s=2.0, drafted_per_position=[10, 10], accepted_per_position=[7, 5], gamma_counts={"2": 10})
    b = _arm(num_steps=5, num_accepted_tokens=3, num_draft_tokens=5, num_generated_tokens=8,
             t_generate_s=1.0, drafted_per_position=[5], accepted_per_position=[3], gamma_counts={"1": 5})
    p = est.pool_stats([a, b])
    assert p["num_steps"] == 15 and p["num_accepted_tokens"] == 15 and p["num_generations"] == 2
    assert p["drafted_per_position"] == [15, 10] and p["accepted_per_position"] == [10, 5]
    assert p["gamma_counts"] == {"2": 10, "1": 5}
    assert p["al"] == pytest.approx(1 + 15 / 15)
    assert p["acceptance_rate"] == pytest.approx(15 / 25)
    assert p["per_position_acceptance"] == pytest.approx([10 / 15, 5 / 10])
    assert p["tokens_per_s"] == pytest.approx(30 / 3.0)


def test_alpha_trials_fixed_gamma_by_hand() -> None:
    # γ = 3, 10 steps: position 0 tried 10×, position 1 tried 8× (accepted at 0), position 2 6×
    s, t = est.alpha_trials([8, 6, 3], [10, 10, 10])
    assert (s, t) == pytest.approx((17.0, 24.0))
    assert s / t == pytest.approx(theory.estimate_alpha([8, 6, 3], [10, 10, 10]))


def test_pooled_alpha_adds_successes_and_trials() -> None:
    arms = [
        {"accepted_per_position": [8, 6, 3], "drafted_per_position": [10, 10, 10]},
        {"accepted_per_position": [15], "drafted_per_position": [20]},
    ]
    assert est.pooled_alpha(arms) == pytest.approx(32 / 44)
    # not the acceptance rate (32 / 50), which early stops bias downwards
    assert est.pooled_alpha(arms) != pytest.approx(32 / 50)


def test_pooled_alpha_nothing_accepted_and_nothing_drafted() -> None:
    assert est.pooled_alpha([{"accepted_per_position": [0, 0], "drafted_per_position": [4, 4]}]) == 0.0
    assert est.pooled_alpha([{"accepted_per_position": [], "drafted_per_position": []}]) == 0.0


def test_cost_ratio_and_batch_cost_by_hand() -> None:
    plain = _arm(num_steps=20, t_decode_target_s=4.0, t_verify_s=2.0)
    d1 = _arm(num_draft_tokens=30, t_decode_draft_s=3.0, num_steps=20, t_verify_s=6.0)
    d2 = _arm(num_draft_tokens=10, t_decode_draft_s=1.0)
    # drafter: 4 s / 40 tokens = 0.1 s; target: 4 s / 20 steps = 0.2 s
    assert est.cost_ratio([d1, d2], plain) == pytest.approx(0.5)
    # verify 6 s / 20 steps = 0.3 s vs plain 2 s / 20 = 0.1 s
    assert est.batch_cost(d1, plain) == pytest.approx(3.0)
    assert est.cost_ratio([_arm()], plain) is None
    assert est.batch_cost(d1, _arm()) is None


def test_interpolated_cost_through_one_and_measured_points() -> None:
    b = est.interpolated_cost({2: 1.5, 4: 2.5})
    assert [b(g) for g in range(5)] == pytest.approx([1.0, 1.25, 1.5, 2.0, 2.5])
    assert b(6) == pytest.approx(3.5)  # continues the last slope


def test_accepted_histogram_and_step_se_by_hand() -> None:
    assert est.accepted_histogram([8, 6, 3], 10) == [2, 2, 3, 3]
    # mean accepted 1.7; sample variance 12.1 / 9
    assert est.al_step_se([8, 6, 3], 10) == pytest.approx(math.sqrt(12.1 / 9 / 10))
    assert math.isnan(est.al_step_se([1], 1))


def test_al_bootstrap_and_split_half() -> None:
    assert est.al_bootstrap([(10, 10), (10, 10)]) == pytest.approx((2.0, 2.0))
    assert est.al_bootstrap([(10, 10)]) is None
    lo, hi = est.al_bootstrap([(0, 10), (10, 10), (20, 10), (5, 10)], seed=1) or (0, 0)
    assert 1.0 <= lo < 1.875 < hi <= 3.0
    assert est.al_split_half([(10, 10), (0, 10), (20, 10)]) == pytest.approx(1.5)
    assert est.al_split_half([(1, 1)]) is None


def test_theory_for_matches_the_formula_by_hand() -> None:
    out = est.theory_for(0.9, 0.1, {1: 1.1, 2: 1.2, 4: 1.4}, [1, 2, 4])
    # S(γ) = (1 − α^(γ+1)) / ((1 − α)(γc + b(γ)))
    assert out["predicted"]["2"]["al"] == pytest.approx((1 - 0.9**3) / 0.1)
    assert out["predicted"]["2"]["speedup"] == pytest.approx(2.71 / (0.2 + 1.2))
    assert out["predicted"]["4"]["speedup"] == pytest.approx(4.0951 / 1.8)
    assert (out["best_gamma"], out["best_gamma_in_set"]) == (4, 4)
    assert out["best_speedup"] == pytest.approx(4.0951 / 1.8)


def test_theory_for_expensive_drafter_picks_plain_decoding() -> None:
    out = est.theory_for(0.8, 0.5, {2: 2.0}, [2])
    assert out["predicted"]["2"]["speedup"] == pytest.approx(2.44 / 3.0)
    assert out["best_gamma"] == 0 and out["best_speedup"] == 1.0
    assert out["best_gamma_in_set"] == 0


def test_ratio_bootstrap_pools_numerators_and_denominators() -> None:
    assert est.ratio_bootstrap([(1, 2), (2, 4)]) == pytest.approx((0.5, 0.5))
    assert est.ratio_bootstrap([(1, 2)]) is None
    lo, hi = est.ratio_bootstrap([(0, 10), (10, 10), (5, 10)], seed=2) or (0, 0)
    assert 0.0 <= lo < 0.5 < hi <= 1.0


def test_speedup_bootstrap_pairs_each_prompt_with_its_plain_run() -> None:
    # every prompt 2× as fast as its plain run, prompts of very different speed: the pairs
    # cancel the prompts' own speed, so the interval is the point
    same = [(64, 2.0, 64, 4.0), (64, 8.0, 64, 16.0), (32, 0.5, 32, 1.0)]
    assert est.speedup_bootstrap(same) == pytest.approx((2.0, 2.0))
    assert est.speedup_bootstrap(same[:1]) is None
    # noisy pairs: the interval holds the pooled ratio and is wider than a point
    noisy = [(64, 4.0, 64, 4.4), (64, 4.0, 64, 3.8), (64, 4.2, 64, 4.0), (64, 3.9, 64, 4.1)]
    pooled = (256 / 16.1) / (256 / 16.3)
    lo, hi = est.speedup_bootstrap(noisy, seed=1) or (0.0, 0.0)
    assert lo < pooled < hi and hi - lo > 0.02
