"""The CUDA kernel's math (cuda/accept_math.cuh) compiled for the host, against the reference."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.kernels.reference import accept_ref, probs_from_logits
from localspec.types import AcceptResult, SamplingParams, TokenSource

from .cases import PARAMS, Case, compare, float32_probs, fragile_reasons, grid, make_case, special_cases


def test_host_kernel_matches_reference_on_the_grid(host_kernel: object) -> None:
    n, justified, wrong = compare(grid(seed=0), host_kernel.accept)  # type: ignore[attr-defined]
    assert n > 150
    assert not wrong, "\n".join(wrong)
    # boundary straddles are possible but must stay rare, and each was explained
    assert len(justified) <= n // 50, "\n".join(justified)


def test_host_kernel_matches_reference_on_small_vocab_second_seed(host_kernel: object) -> None:
    n, justified, wrong = compare(grid(seed=1, large=False), host_kernel.accept)  # type: ignore[attr-defined]
    assert not wrong, "\n".join(wrong)
    assert len(justified) <= n // 50


def test_host_kernel_greedy_is_exact(host_kernel: object) -> None:
    rng = np.random.default_rng(3)
    for n_vocab in (1, 7, 4099, 151_936):
        for k in (0, 1, 4, 16):
            case = make_case(rng, k, n_vocab, SamplingParams(0.0), False)
            assert case.run(host_kernel.accept) == case.run(accept_ref)  # type: ignore[attr-defined]


def test_host_kernel_special_cases(host_kernel: object) -> None:
    n, justified, wrong = compare(special_cases(), host_kernel.accept)  # type: ignore[attr-defined]
    assert n == 6 and not justified and not wrong


def test_host_kernel_greedy_tie_takes_lowest_index(host_kernel: object) -> None:
    logits = np.zeros((2, 10), dtype=np.float32)
    logits[:, [3, 5]] = 2.0
    result = host_kernel.accept(logits, [3], None, [0.5, 0.5], SamplingParams(0.0))  # type: ignore[attr-defined]
    assert result == AcceptResult((3, 3), 1, TokenSource.BONUS)


@pytest.mark.parametrize("params", [p for p in PARAMS if not p.greedy], ids=str)
@pytest.mark.parametrize("n_vocab", [7, 4099, 262_147])
def test_host_kernel_probabilities_within_float32_error(host_kernel: object, params: SamplingParams,
                                                        n_vocab: int) -> None:
    rng = np.random.default_rng(n_vocab)
    logits = (rng.standard_normal((3, n_vocab)) * 3).astype(np.float32)
    ref = probs_from_logits(logits, params)
    got = host_kernel.probs(logits, params)  # type: ignore[attr-defined]
    assert got.shape == ref.shape and got.dtype == np.float64
    bits = min(48, 62 - n_vocab.bit_length())
    # Same kept set (top-k / top-p), except tail tokens below one fixed-point unit, which
    # the kernel rounds to weight 0 (their total mass is < n_vocab * 2^-bits).
    assert not np.any((got > 0) & (ref == 0))
    dropped = (ref > 0) & (got == 0)
    assert np.all(ref[dropped] < 2.0**-bits), ref[dropped].max()
    err32 = np.abs(float32_probs(logits, params) - ref).max()
    quant = 2.0 * n_vocab * 2.0**-bits  # the kernel's fixed-point sums
    err = np.abs(got - ref).max()
    assert err <= 2 * err32 + quant, (err, err32, quant)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-6)


def test_fragility_detector_flags_a_boundary_case() -> None:
    # u * q(d) == p(d) to float64 precision: the ratio test sits on its boundary
    logits = np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    params = SamplingParams(1.0)
    p = probs_from_logits(logits[:1], params)[0]
    q_logits = np.array([[2.0, 1.0, 0.0]], dtype=np.float32)
    q = probs_from_logits(q_logits, params)[0]
    u = np.array([p[1] / q[1] * (1 + 1e-12), 0.5])
    case = Case(logits, np.array([1]), q_logits, u, params, "boundary")
    ref = case.run(accept_ref)
    other = AcceptResult((1, 0), 1, TokenSource.BONUS) if ref.num_accepted == 0 else AcceptResult((2,), 0,
                                                                                                  TokenSource.RECOVERED)
    assert any("ratio test" in r for r in fragile_reasons(case, ref, other))


def test_fragility_detector_rejects_a_clear_mismatch() -> None:
    logits = np.array([[0.0, 5.0, 0.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    case = Case(logits, np.array([1]), None, np.array([0.1, 0.5]), SamplingParams(1.0), "clear")
    ref = case.run(accept_ref)
    assert ref.num_accepted == 1  # p(1) ~ 0.98 > 0.1
    assert fragile_reasons(case, ref, AcceptResult((0,), 0, TokenSource.RECOVERED)) == []
