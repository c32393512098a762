"""The CUDA kernel's math (cuda/accept_math.cuh) compiled for the host, against the reference."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.kernels.reference import accept_ref, probs_from_logits
from localspec.types import AcceptResult, SamplingParams, TokenSource

from .cases import (PARAMS, Case, batch_items, batches, compare, compare_batch, float32_probs, fragile_reasons, grid,
                    make_case, mixed_batch, special_cases)


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


# ------------------------------------------------- batches: lsk_accept_batch_host


def test_host_batch_equals_per_item_host_calls(host_kernel: object) -> None:
    """The packed entry point (the device kernel's layout, batch_row and decide_batch_row)
    against one lsk_accept_host call per item: mixed batches, V 1000 and 32000, sizes 1..8."""
    n = 0
    for cases in batches(seed=40):
        items = batch_items(cases)
        got = host_kernel.accept_batch(items)  # type: ignore[attr-defined]
        assert got == [host_kernel.accept(*item.args()) for item in items], cases[0].label  # type: ignore[attr-defined]
        n += len(items)
    assert n == 72


def test_host_batch_long_drafts_and_many_items(host_kernel: object) -> None:
    """k up to 32 (MAX_GAMMA) and 24 items in one call; the kernel's own limit of 64 too."""
    rng = np.random.default_rng(41)
    cases = mixed_batch(rng, 24, 4099, "views", max_k=32)
    cases.append(make_case(rng, 64, 4099, SamplingParams(0.8), True))
    cases.append(make_case(rng, 64, 4099, SamplingParams(0.0), False))
    items = batch_items(cases)
    assert host_kernel.accept_batch(items) == [host_kernel.accept(*i.args()) for i in items]  # type: ignore[attr-defined]


def test_host_batch_matches_the_reference(host_kernel: object) -> None:
    total = 0
    justified_all: list[str] = []
    for cases in batches(seed=42, vocabs=(1000, 4099)):
        n, justified, wrong = compare_batch(cases, host_kernel.accept_batch(batch_items(cases)))  # type: ignore[attr-defined]
        assert not wrong, "\n".join(wrong)
        total += n
        justified_all += justified
    assert len(justified_all) <= total // 50, "\n".join(justified_all)


def test_host_batch_special_cases_in_one_call(host_kernel: object) -> None:
    """Ties, -inf logits, q == p, n-gram rejections, all in one batch (V differs per case,
    so one batch per V)."""
    for case in special_cases():
        items = batch_items([case, case])
        assert host_kernel.accept_batch(items) == [case.run(host_kernel.accept)] * 2  # type: ignore[attr-defined]


def test_host_batch_validation(host_kernel: object) -> None:
    from localspec.kernels import AcceptItem

    assert host_kernel.accept_batch([]) == []  # type: ignore[attr-defined]
    rng = np.random.default_rng(43)
    good = make_case(rng, 2, 30, SamplingParams(0.8), True)
    long = make_case(rng, 65, 30, SamplingParams(0.8), False)
    items = [AcceptItem(good.target, good.drafts, good.q, good.uniforms, good.params), AcceptItem(long.target, long.drafts, None, long.uniforms, long.params)]
    with pytest.raises(ValueError, match="^item 1: the CUDA kernel takes at most 64 draft tokens"):
        host_kernel.accept_batch(items)  # type: ignore[attr-defined]


def test_layout_check_rejects_a_bad_packing(host_kernel: object) -> None:
    """The C entry point checks the per-item layout itself (a caller other than _Batch)."""
    import ctypes

    lib = host_kernel._lib  # type: ignore[attr-defined]
    target = np.zeros((3, 8), dtype=np.float32)
    f32 = target.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    i32 = ctypes.POINTER(ctypes.c_int)

    def call(row_offset: list[int], q_offset: list[int], n_draft_rows: int = 0) -> int:
        ro = np.array(row_offset, dtype=np.int32)
        qo = np.array(q_offset, dtype=np.int32)
        drafts = np.zeros(8, dtype=np.int32)
        u = np.zeros(8)
        t = np.full(len(q_offset), 0.8, dtype=np.float32)
        k = np.zeros(len(q_offset), dtype=np.int32)
        p = np.ones(len(q_offset), dtype=np.float32)
        out = np.zeros(16, dtype=np.int32)
        return int(lib.lsk_accept_batch_host(len(q_offset), 8, f32, f32 if n_draft_rows else None, n_draft_rows,
                                             ro.ctypes.data_as(i32), qo.ctypes.data_as(i32), drafts.ctypes.data_as(i32),
                                             u.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                                             t.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), k.ctypes.data_as(i32),
                                             p.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), out.ctypes.data_as(i32)))

    assert call([0, 1, 3], [-1, -1]) == 0
    assert call([0, 1, 3], [-1, 0], n_draft_rows=1) == 0
    assert call([1, 2, 3], [-1, -1]) == 1  # row_offset[0] != 0
    assert call([0, 2, 2], [-1, -1]) == 1  # an item with no row
    assert call([0, 1, 3], [-1, 0], n_draft_rows=0) == 1  # q rows beyond the draft buffer
    assert call([0, 1, 3], [-1, 1], n_draft_rows=1) == 1


def test_zero_copy_when_the_rows_lie_back_to_back() -> None:
    from localspec.kernels._cuda import _rows_pointer

    buf = np.arange(5 * 4, dtype=np.float32).reshape(5, 4)
    pointer, copy = _rows_pointer([buf[:2], buf[2:3], buf[3:]], 4)
    assert copy is None and pointer[0] == 0.0 and pointer[19] == 19.0
    pointer, copy = _rows_pointer([buf[:2], buf[3:]], 4)  # a gap: packed once
    assert copy is not None and copy.shape == (4, 4) and copy[2, 0] == 12.0
    pointer, copy = _rows_pointer([buf[:2].astype(np.float64), buf[2:]], 4)
    assert copy is not None and copy.dtype == np.float32
    strided = buf[:, ::2]
    _, copy = _rows_pointer([strided[:2], strided[2:]], 2)  # not contiguous
    assert copy is not None
