"""localspec.recommend.speed: decode cost follows active parameters; MoE verify batches read
the experts their tokens touch together; the predictor puts both into speedups."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.catalog import load_catalog
from localspec.gpus import GIB, find_gpu
from localspec.recommend import Budget, option_for, predict
from localspec.recommend.speed import (
    bytes_per_token,
    distinct_experts,
    expert_factor,
    read_factor,
    routed_share,
    token_time,
    verify_cost,
)


def test_distinct_experts_formula_and_a_simulation() -> None:
    assert distinct_experts(1, 256, 8) == pytest.approx(8)
    assert distinct_experts(10_000, 256, 8) == pytest.approx(256)
    assert distinct_experts(0, 256, 8) == 0.0
    rng = np.random.default_rng(0)
    n, trials = 5, 4000
    touched = [len({e for _ in range(n) for e in rng.choice(256, 8, replace=False)}) for _ in range(trials)]
    assert distinct_experts(n, 256, 8) == pytest.approx(np.mean(touched), rel=0.01)


def test_read_factor_dense_is_one_moe_grows_and_saturates() -> None:
    cat = load_catalog()
    dense, moe = cat.model("qwen3.6-27b"), cat.model("qwen3.6-35b-a3b")
    assert routed_share(dense) == 0.0 and read_factor(dense, 5) == 1.0 and expert_factor(dense, 5) == 1.0
    f = routed_share(moe)
    assert 0.2 < f < 0.5  # 1B of the 3B active parameters are routed experts
    factors = [read_factor(moe, n) for n in range(1, 9)]
    assert factors[0] == pytest.approx(1.0) and factors == sorted(factors)
    assert factors[4] == pytest.approx((1 - f) + f * distinct_experts(5, 256, 8) / 8)
    assert read_factor(moe, 100_000) == pytest.approx((1 - f) + f * 256 / 8)


def test_decode_cost_follows_active_parameters() -> None:
    cat = load_catalog()
    moe, dense = cat.model("qwen3.5-35b-a3b"), cat.model("qwen3.5-27b")
    mf, df = moe.file_for("Q4_K_M"), dense.file_for("Q4_K_M")
    assert bytes_per_token(moe, mf.size) == pytest.approx(mf.size * 3 / 35)
    assert bytes_per_token(dense, df.size) == df.size
    gpu = find_gpu("RTX 3090")
    t_moe = token_time(moe, mf.size, moe.n_layer + 1, gpu.bandwidth_bytes_s, 24e9)
    t_dense = token_time(dense, df.size, dense.n_layer + 1, gpu.bandwidth_bytes_s, 24e9)
    assert t_moe.total_s < t_dense.total_s / 2 < t_dense.total_s  # the bigger MoE decodes faster
    assert t_moe.cpu_s == 0.0 and t_moe.moe_s > 0.0 and t_dense.moe_s == 0.0


def test_moe_verify_costs_more_than_dense_verify() -> None:
    cat = load_catalog()
    moe, dense = cat.model("qwen3.6-35b-a3b"), cat.model("qwen3.6-27b")
    gpu = find_gpu("RTX 4090")
    b_moe = verify_cost(moe, token_time(moe, moe.files[0].size, 41, gpu.bandwidth_bytes_s, 24e9))
    b_dense = verify_cost(dense, token_time(dense, dense.files[0].size, 65, gpu.bandwidth_bytes_s, 24e9))
    assert b_moe(0) == b_dense(0) == 1.0
    for g in (1, 2, 4, 8):
        assert b_moe(g) > b_dense(g) > 1.0
    assert [b_dense(g) for g in range(6)] == sorted(b_dense(g) for g in range(6))


def _budget(gpu: str) -> Budget:
    spec = find_gpu(gpu)
    return Budget(spec.vram_bytes, 64 * GIB, spec.name, spec.bandwidth_bytes_s, 24e9, spec.name)


def test_speculation_gains_less_on_a_moe_target_than_on_its_dense_sibling() -> None:
    cat = load_catalog()
    gains = {}
    for tid in ("qwen3.6-35b-a3b", "qwen3.6-27b"):
        target = cat.model(tid)
        pred, _ = predict(cat, _budget("RTX 4090"), target, target.file_for("Q4_K_M"), option_for(cat, target, "mtp"),
                          task="code")  # type: ignore[misc]
        gains[tid] = pred.speedup
        assert not pred.runnable and "--drafter mtp" in pred.why_not  # built into the target GGUF, not a separate pick
    assert gains["qwen3.6-27b"] > gains["qwen3.6-35b-a3b"] + 0.3


def test_block_drafter_cost_is_per_step_and_gamma_stays_inside_the_block() -> None:
    cat = load_catalog()
    target = cat.model("qwen3-8b")
    pred, _ = predict(cat, _budget("RTX 4090"), target, target.file_for("Q4_K_M"),
                      option_for(cat, target, "deepspec-dflash-qwen3-8b"), task="code")  # type: ignore[misc]
    assert pred.kind == "dflash" and pred.c == 0.0 and 1 <= pred.gamma <= 6
    forced, _ = predict(cat, _budget("RTX 4090"), target, target.file_for("Q4_K_M"),
                        option_for(cat, target, "deepspec-dflash-qwen3-8b"), task="code", gamma=pred.gamma)  # type: ignore[misc]
    assert forced.speedup == pytest.approx(pred.speedup)
