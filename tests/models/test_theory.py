"""localspec.theory: the Leviathan et al. speed model and the α estimator."""

from __future__ import annotations

import random

import pytest

from localspec.theory import (
    best_gamma,
    estimate_alpha,
    expected_tokens_per_step,
    fit_batch_slope,
    linear_batch_cost,
    speedup,
)


def test_expected_tokens_per_step_matches_geometric_sum() -> None:
    assert expected_tokens_per_step(0.8, 0) == pytest.approx(1.0)
    assert expected_tokens_per_step(0.8, 4) == pytest.approx(1 + 0.8 + 0.64 + 0.512 + 0.4096)
    assert expected_tokens_per_step(1.0, 5) == 6.0
    assert expected_tokens_per_step(0.0, 7) == 1.0


def test_speedup_hand_computed() -> None:
    # (1 - 0.8^5) / (0.2 * (4*0.1 + 1.08)) = 0.67232 / 0.296
    assert speedup(0.8, 4, 0.1, linear_batch_cost(0.02)) == pytest.approx(0.67232 / 0.2 / (0.4 + 1.08))
    assert speedup(0.5, 0, 0.3, 2.5) == pytest.approx(1.0)


def test_best_gamma_never_predicts_a_slowdown() -> None:
    # this CPU: c ≈ 0.57, b(γ) = 1 + 0.3γ, α = 0.6 → drafting loses, γ = 0 wins
    choice = best_gamma(0.6, 0.57, linear_batch_cost(0.3))
    assert choice.gamma == 0 and choice.speedup == 1.0
    gpu = best_gamma(0.8, 0.05, linear_batch_cost(0.02))
    assert gpu.gamma >= 4 and gpu.speedup > 2.0
    brute = max(range(17), key=lambda g: speedup(0.8, g, 0.05, linear_batch_cost(0.02)))
    assert gpu.gamma == brute


def test_estimate_alpha_recovers_alpha_fixed_and_variable_gamma() -> None:
    rng = random.Random(0)
    for alpha in (0.3, 0.7, 0.9):
        for variable in (False, True):
            drafted = [0] * 8
            accepted = [0] * 8
            for _ in range(20000):
                k = rng.randint(1, 8) if variable else 5
                for i in range(k):
                    drafted[i] += 1
                for i in range(k):
                    if rng.random() < alpha:
                        accepted[i] += 1
                    else:
                        break
            est = estimate_alpha(accepted, drafted)
            assert est == pytest.approx(alpha, abs=0.02), (alpha, variable, est)
            # the plain acceptance rate is biased low by early stops: the estimator must differ
            rate = sum(accepted) / sum(drafted)
            assert rate < est


def test_estimate_alpha_nothing_drafted() -> None:
    assert estimate_alpha([], []) == 0.0


def test_fit_batch_slope() -> None:
    assert fit_batch_slope(4, 2.2) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        fit_batch_slope(0, 1.0)
