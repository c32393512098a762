"""The NumPy acceptance reference: hand-checked cases and the distribution guarantee."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from localspec.kernels.reference import (
    accept_greedy_ref,
    accept_ref,
    accept_stochastic_ref,
    probs_from_logits,
    sample_from_weights,
)
from localspec.types import SamplingParams, TokenSource

T1 = SamplingParams(temperature=1.0)


def _logits_for(probs: list[list[float]]) -> np.ndarray:
    """Logits whose softmax at T=1 is `probs` (zeros -> -inf)."""
    p = np.asarray(probs, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log(p)


class TestGreedy:
    def test_accept_greedy_all_accepted_gives_bonus(self) -> None:
        logits = np.array([[0, 5, 1], [3, 0, 0], [0, 0, 9]], dtype=np.float32)
        r = accept_greedy_ref(logits, [1, 0])
        assert r.tokens == (1, 0, 2) and r.num_accepted == 2 and r.last_source is TokenSource.BONUS

    def test_accept_greedy_early_mismatch_recovers_target_argmax(self) -> None:
        logits = np.array([[0, 5, 1], [3, 0, 4], [0, 0, 9]], dtype=np.float32)
        r = accept_greedy_ref(logits, [1, 0])
        assert r.tokens == (1, 2) and r.num_accepted == 1 and r.last_source is TokenSource.RECOVERED

    def test_accept_greedy_first_mismatch(self) -> None:
        logits = np.array([[7, 5, 1], [3, 0, 4]], dtype=np.float32)
        r = accept_greedy_ref(logits, [1])
        assert r.tokens == (0,) and r.num_accepted == 0

    def test_accept_greedy_no_drafts_is_plain(self) -> None:
        r = accept_greedy_ref(np.array([[1, 2, 3]], dtype=np.float32), [])
        assert r.tokens == (2,) and r.last_source is TokenSource.PLAIN

    def test_accept_greedy_ties_pick_lowest_index(self) -> None:
        r = accept_greedy_ref(np.array([[4, 4, 1], [0, 2, 2]], dtype=np.float32), [1])
        assert r.tokens == (0,)  # argmax of row 0 is 0, so draft 1 is rejected

    def test_shapes_are_checked(self) -> None:
        with pytest.raises(ValueError, match=r"\[k\+1, V\]"):
            accept_greedy_ref(np.zeros((2, 4)), [1, 2])
        with pytest.raises(ValueError, match="draft token ids"):
            accept_greedy_ref(np.zeros((2, 4)), [9])
        with pytest.raises(ValueError, match="uniforms"):
            accept_stochastic_ref(np.zeros((2, 4)), [1], None, [0.5], T1)


class TestStochasticByHand:
    # p rows (target), q rows (draft) over a vocabulary of 3
    P = [[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.25, 0.25, 0.5]]
    Q = [[0.25, 0.5, 0.25], [0.1, 0.8, 0.1]]

    def test_ratio_test_accepts_when_p_exceeds_u_q(self) -> None:
        # d1 = 0: p/q = 2 -> always accepted; d2 = 1: p/q = 0.125, u = 0.1 -> accepted
        r = accept_stochastic_ref(_logits_for(self.P), [0, 1], _logits_for(self.Q), [0.99, 0.1, 0.0], T1)
        assert r.tokens[:2] == (0, 1) and r.num_accepted == 2 and r.last_source is TokenSource.BONUS
        assert r.tokens[2] == 0  # u=0 picks the first token with positive mass of p3

    def test_rejection_samples_recovered_from_residual(self) -> None:
        # d1 = 1: p/q = 0.6, u = 0.7 -> rejected; residual max(0, p-q) = [0.25, 0, 0] -> token 0
        r = accept_stochastic_ref(_logits_for(self.P), [1, 1], _logits_for(self.Q), [0.7, 0.0, 0.999], T1)
        assert r.tokens == (0,) and r.num_accepted == 0 and r.last_source is TokenSource.RECOVERED

    def test_second_position_residual(self) -> None:
        # d2 = 1: p/q = 0.125, u = 0.5 -> rejected; residual = [0, 0, 0.7] -> token 2 for any u
        r = accept_stochastic_ref(_logits_for(self.P), [0, 1], _logits_for(self.Q), [0.0, 0.5, 0.3], T1)
        assert r.tokens == (0, 2) and r.num_accepted == 1

    def test_without_q_accepts_with_probability_p(self) -> None:
        logits = _logits_for(self.P)
        assert accept_stochastic_ref(logits, [0, 2], None, [0.49, 0.79, 0.0], T1).num_accepted == 2
        r = accept_stochastic_ref(logits, [0, 2], None, [0.49, 0.81, 0.0], T1)
        # rejected at 2: recovered from p2 with d zeroed = [0.1, 0.1, 0] -> u=0 -> token 0
        assert r.tokens == (0, 0) and r.num_accepted == 1

    def test_inverse_cdf_boundaries(self) -> None:
        w = np.array([0.0, 0.25, 0.0, 0.75])
        assert sample_from_weights(w, 0.0) == 1
        assert sample_from_weights(w, 0.2499) == 1
        assert sample_from_weights(w, 0.25) == 3
        assert sample_from_weights(w, 0.999999) == 3


class TestProcessing:
    def test_temperature_scales_logits(self) -> None:
        p = probs_from_logits(np.array([[0.0, np.log(2.0)]]), SamplingParams(temperature=0.5))
        np.testing.assert_allclose(p[0], [0.2, 0.8])

    def test_top_k_keeps_ties(self) -> None:
        p = probs_from_logits(np.array([3.0, 1.0, 3.0, 0.0]), SamplingParams(1.0, top_k=1))
        np.testing.assert_allclose(p, [0.5, 0, 0.5, 0])

    def test_top_p_threshold(self) -> None:
        logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
        np.testing.assert_allclose(probs_from_logits(logits, SamplingParams(1.0, top_p=0.79)), [0.625, 0.375, 0, 0])
        np.testing.assert_allclose(probs_from_logits(logits, SamplingParams(1.0, top_p=0.81)),
                                   np.array([0.5, 0.3, 0.15, 0]) / 0.95)

    def test_top_p_beyond_candidate_head_is_exact(self) -> None:
        # a flat distribution over 5000 tokens: the nucleus is larger than the 1024-token head
        logits = np.zeros(5000)
        p = probs_from_logits(logits, SamplingParams(1.0, top_p=0.5))
        assert np.count_nonzero(p) == 5000  # all tie with the threshold: ties are kept

    def test_greedy_params_give_one_hot(self) -> None:
        p = probs_from_logits(np.array([[1.0, 3.0, 2.0]]), SamplingParams(0.0))
        np.testing.assert_array_equal(p, [[0, 1, 0]])


def _sample_first_tokens(p_logits: np.ndarray, q_logits: np.ndarray | None, params: SamplingParams,
                         n: int, seed: int) -> np.ndarray:
    """First output token of many steps; drafts sampled from q as a drafter would."""
    rng = np.random.default_rng(seed)
    k = p_logits.shape[0] - 1
    q = probs_from_logits(q_logits, params) if q_logits is not None else None
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        if q is not None:
            drafts = [sample_from_weights(q[j], rng.random()) for j in range(k)]
        else:
            drafts = list(rng.integers(0, p_logits.shape[1], size=k))  # n-gram: arbitrary tokens
        r = accept_ref(p_logits, drafts, q_logits, rng.random(k + 1), params)
        out[i] = r.tokens[0]
    return out


@pytest.mark.parametrize(
    "params",
    [SamplingParams(1.0), SamplingParams(0.8, top_k=5), SamplingParams(1.3, top_p=0.7)],
    ids=["T1", "T0.8-topk5", "T1.3-topp0.7"],
)
@pytest.mark.parametrize("with_q", [True, False], ids=["q", "no-q"])
def test_stochastic_output_has_target_distribution(params: SamplingParams, with_q: bool) -> None:
    """χ² goodness of fit: the first output token ~ processed p_1 (Leviathan et al. thm 1)."""
    rng = np.random.default_rng(7)
    V, k, n = 8, 3, 4000
    p_logits = rng.normal(0, 1.5, size=(k + 1, V))
    q_logits = rng.normal(0, 1.5, size=(k, V)) if with_q else None
    expected = probs_from_logits(p_logits[0], params)
    seen = _sample_first_tokens(p_logits, q_logits, params, n, seed=11)
    support = expected > 0
    assert np.all(np.isin(seen, np.flatnonzero(support))), "sampled a token outside the processed support"
    counts = np.bincount(seen, minlength=V)[support]
    result = stats.chisquare(counts, expected[support] * n)
    assert result.pvalue > 1e-3, (counts, expected[support] * n)


def test_distribution_check_can_fail() -> None:
    """The χ² check above rejects a wrong distribution (the drafter's q instead of p)."""
    rng = np.random.default_rng(7)
    p_logits = rng.normal(0, 1.5, size=(4, 8))
    q_logits = rng.normal(0, 1.5, size=(3, 8))
    q = probs_from_logits(q_logits[0], T1)
    seen = np.array([sample_from_weights(q, u) for u in np.random.default_rng(1).random(4000)])
    expected = probs_from_logits(p_logits[0], T1)
    assert stats.chisquare(np.bincount(seen, minlength=8), expected * 4000).pvalue < 1e-6
