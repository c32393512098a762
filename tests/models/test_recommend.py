"""localspec.recommend: fits checked by hand, faked NVML GPUs, no GPU, compat property, calibration."""

from __future__ import annotations

import pytest
from test_hardware import fake_nvml

from localspec.catalog import load_catalog
from localspec.engine.metrics import SpecStats
from localspec.hardware import probe
from localspec.recommend import budget_from, compatible_drafters, place, recommend
from localspec.recommend.calibrate import calibrate, measurement_from
from localspec.recommend.fit import (
    CUDA_CONTEXT_BYTES,
    GIB,
    N_UBATCH,
    RAM_USABLE_FRACTION,
    RPC_ROUND_TRIP_S,
    RPC_USABLE_FRACTION,
    VRAM_USABLE_FRACTION,
    Budget,
    RpcWorker,
    rpc_layers,
)
from localspec.theory import speedup

TASKS = ("code", "chat", "summarize", "math", "rag", "translate", "reasoning")


def _budget(vram_gib: float, ram_gib: float = 64) -> Budget:
    return Budget(int(vram_gib * GIB), int(ram_gib * GIB), "test", 1008e9, 14e9, "test")


def test_place_hand_computed_full_gpu() -> None:
    cat = load_catalog()
    t, d = cat.model("qwen2.5-coder-7b-instruct"), cat.model("qwen2.5-coder-0.5b-instruct")
    tf, df = t.file_for("Q4_K_M"), d.file_for("Q4_K_M")
    # KV f16 at 4096: 2 (K,V) * layers * ctx * kv_heads * head_dim * 2 bytes
    kv_t = 2 * 28 * 4096 * 4 * 128 * 2
    kv_d = 2 * 24 * 4096 * 2 * 64 * 2
    assert t.kv_bytes(4096) == kv_t == 224 << 20 and d.kv_bytes(4096) == kv_d == 48 << 20
    buf_t = N_UBATCH * 4 * (152064 + 8 * 3584)
    buf_d = N_UBATCH * 4 * (151936 + 8 * 896)
    need = CUDA_CONTEXT_BYTES + tf.size + kv_t + buf_t + df.size + kv_d + buf_d
    p = place(t, tf, d, df, 4096, _budget(8))
    assert p.kind == "gpu" and p.vram_bytes == need and need <= 8 * GIB * VRAM_USABLE_FRACTION
    assert p.target_gpu_layers == 29  # -ngl 29 = 28 layers + output


def test_place_hand_computed_partial_offload() -> None:
    cat = load_catalog()
    t, d = cat.model("qwen2.5-coder-32b-instruct"), cat.model("qwen2.5-coder-0.5b-instruct")
    tf, df = t.file_for("Q4_K_M"), d.file_for("Q4_K_M")
    p = place(t, tf, d, df, 4096, _budget(12))
    assert p.kind == "partial"
    draft_side = CUDA_CONTEXT_BYTES + df.size + d.kv_bytes(4096) + N_UBATCH * 4 * (151936 + 8 * 896) \
        + N_UBATCH * 4 * (152064 + 8 * 5120)
    per_layer = tf.size / 65 + 2 * 4096 * 8 * 128 * 2
    assert p.target_gpu_layers == int((12 * GIB * VRAM_USABLE_FRACTION - draft_side) // per_layer)
    assert 20 < p.target_gpu_layers < 64
    assert p.vram_bytes <= 12 * GIB * VRAM_USABLE_FRACTION
    assert p.target_token_s > p.target_all_gpu_token_s * 1.5  # RAM-resident layers cost
    assert p.ram_bytes <= 64 * GIB * RAM_USABLE_FRACTION


def test_place_nothing_fits_returns_none() -> None:
    cat = load_catalog()
    t, d = cat.model("qwen2.5-coder-32b-instruct"), cat.model("qwen2.5-coder-0.5b-instruct")
    assert place(t, t.file_for("Q8_0"), d, d.file_for("Q4_K_M"), 4096, Budget(0, 8 * GIB, None, 0, 14e9, "x")) is None


def _workers(*free_gib: float) -> tuple[RpcWorker, ...]:
    return tuple(RpcWorker(f"10.0.0.{i + 2}:50052", int(g * GIB), int(g * GIB) + GIB) for i, g in enumerate(free_gib))


def test_place_rpc_hand_computed_all_layers_on_the_workers() -> None:
    """A 32B Q4_K_M (~18.5 GiB) does not fit 8 GiB of RAM; two workers with 12 GiB free each
    take all 65 layers (64 + output) and the drafter stays in RAM."""
    import dataclasses

    cat = load_catalog()
    t, d = cat.model("qwen2.5-coder-32b-instruct"), cat.model("qwen2.5-coder-0.5b-instruct")
    tf, df = t.file_for("Q4_K_M"), d.file_for("Q4_K_M")
    here = Budget(0, 8 * GIB, None, 0, 14e9, "no GPU")
    assert place(t, tf, d, df, 4096, here) is None
    p = place(t, tf, d, df, 4096, dataclasses.replace(here, rpc_workers=_workers(12, 12)))
    assert p is not None and p.kind == "rpc"
    buf_t = N_UBATCH * 4 * (152064 + 8 * 5120)
    per_layer = tf.size / 65 + 2 * 4096 * 8 * 128 * 2  # weights + f16 KV of one layer
    assert int((24 * GIB * RPC_USABLE_FRACTION - 2 * buf_t) // per_layer) >= 65
    assert p.target_gpu_layers == p.target_layers == 65  # -ngl 65: everything on the workers
    assert p.rpc_bytes == int(tf.size + t.kv_bytes(4096))
    draft_side = df.size + d.kv_bytes(4096) + N_UBATCH * 4 * (151936 + 8 * 896)
    assert p.ram_bytes == int(buf_t + draft_side) and p.vram_bytes == 0
    # the target's step: all of it at this machine's CPU rate, plus one round trip per worker
    assert p.target_time is not None and p.target_time.fixed_s == pytest.approx(2 * RPC_ROUND_TRIP_S)
    assert p.target_token_s == pytest.approx(tf.size * t.active / t.params / 14e9 + 2 * RPC_ROUND_TRIP_S)


def test_place_rpc_hand_computed_split_between_workers_and_ram() -> None:
    cat = load_catalog()
    t, d = cat.model("qwen2.5-coder-32b-instruct"), cat.model("qwen2.5-coder-0.5b-instruct")
    tf, df = t.file_for("Q4_K_M"), d.file_for("Q4_K_M")
    workers = _workers(6, 4)
    p = place(t, tf, d, df, 4096, Budget(0, 16 * GIB, None, 0, 14e9, "no GPU", rpc_workers=workers))
    assert p is not None and p.kind == "rpc"
    buf_t = N_UBATCH * 4 * (152064 + 8 * 5120)
    per_layer = tf.size / 65 + 2 * 4096 * 8 * 128 * 2
    layers = int((10 * GIB * RPC_USABLE_FRACTION - 2 * buf_t) // per_layer)
    assert p.target_gpu_layers == rpc_layers(t, tf, 4096, workers) == layers and 20 < layers < 64
    local = tf.size - layers * tf.size / 65 + t.kv_bytes(4096, 64 - layers) + buf_t
    draft_side = df.size + d.kv_bytes(4096) + N_UBATCH * 4 * (151936 + 8 * 896)
    assert p.ram_bytes == int(local + draft_side) <= 16 * GIB * RAM_USABLE_FRACTION
    assert p.rpc_bytes <= 10 * GIB * RPC_USABLE_FRACTION


def test_place_rpc_with_a_local_gpu_keeps_the_drafter_there() -> None:
    """The target's layers go to the workers only (as `--rpc` places them at load), timed at
    this machine's GPU speed; the drafter sits on the local GPU."""
    cat = load_catalog()
    t, d = cat.model("qwen2.5-coder-32b-instruct"), cat.model("qwen2.5-coder-0.5b-instruct")
    tf, df = t.file_for("Q4_K_M"), d.file_for("Q4_K_M")
    budget = Budget(8 * GIB, 16 * GIB, "test", 1008e9, 14e9, "test", rpc_workers=_workers(16, 16))
    p = place(t, tf, d, df, 4096, budget)
    assert p is not None and p.kind == "rpc" and p.target_gpu_layers == 65
    assert p.vram_bytes == CUDA_CONTEXT_BYTES + df.size + d.kv_bytes(4096) + N_UBATCH * 4 * (151936 + 8 * 896)
    assert p.target_token_s == pytest.approx(p.target_all_gpu_token_s + 2 * RPC_ROUND_TRIP_S)


def test_workers_too_small_for_a_layer_leave_the_target_here() -> None:
    cat = load_catalog()
    t, d = cat.model("qwen2.5-coder-7b-instruct"), cat.model("qwen2.5-coder-0.5b-instruct")
    tf, df = t.file_for("Q4_K_M"), d.file_for("Q4_K_M")
    p = place(t, tf, d, df, 4096, Budget(0, 32 * GIB, None, 0, 14e9, "x", rpc_workers=_workers(0.1)))
    assert p is not None and p.kind == "cpu" and p.target_gpu_layers == 0 and p.rpc_bytes == 0


def test_recommend_with_workers_fits_bigger_targets() -> None:
    """More worker memory, bigger targets: the biggest target recommended grows with it."""
    cat = load_catalog()
    biggest = []
    for free in (0, 16, 64):
        workers = _workers(free / 2, free / 2) if free else ()
        recs = recommend(cat, Budget(0, 8 * GIB, None, 0, 14e9, "x", rpc_workers=workers), task="code",
                         limit=100, min_tokens_per_s=0)
        biggest.append(max(cat.model(r.target).params for r in recs))
        assert all(r.placement in ("rpc", "cpu") for r in recs)
        assert all(r.rpc_bytes <= free * GIB * RPC_USABLE_FRACTION for r in recs)
    assert biggest == sorted(biggest) and biggest[-1] > biggest[0]


@pytest.mark.parametrize("gib", [8, 12, 24, 32])
def test_recommend_with_faked_gpu_fits_its_vram(monkeypatch: pytest.MonkeyPatch, gib: int) -> None:
    fake_nvml(monkeypatch, [(f"Fake {gib}GB", gib)])
    budget = budget_from(probe(), ram_gb=32)
    assert budget.vram_bytes == gib * GIB and budget.source == f"NVML: Fake {gib}GB"
    cat = load_catalog()
    recs = recommend(cat, budget, task="code", n_ctx=8192, limit=50)
    assert recs and [r.rank for r in recs] == list(range(1, len(recs) + 1))
    for r in recs:
        assert r.vram_bytes <= gib * GIB * VRAM_USABLE_FRACTION
        t, d = cat.model(r.target), cat.model(r.draft)
        assert d.params <= t.params / 3
        s = speedup(r.alpha, r.gamma, r.c, lambda g: 1 + r.b_slope * g)
        assert s == pytest.approx(r.speedup, rel=1e-2) and r.speedup >= 1.0
        assert r.spec_tokens_per_s == pytest.approx(r.plain_tokens_per_s * r.speedup, rel=1e-2)
        assert r.why and r.alpha_source
    full_gpu = [r for r in recs if r.placement == "gpu"]
    assert full_gpu, "some pair must fit entirely"


def test_recommend_bigger_gpu_gets_a_bigger_best_fully_offloaded_target(monkeypatch: pytest.MonkeyPatch) -> None:
    cat = load_catalog()
    biggest = []
    for gib in (8, 12, 24, 32):
        recs = recommend(cat, _budget(gib), task="code", n_ctx=4096, limit=100)
        biggest.append(max(cat.model(r.target).params for r in recs if r.placement == "gpu"))
    assert biggest == sorted(biggest) and biggest[-1] > biggest[0]


def test_recommend_without_gpu_is_cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    budget = budget_from(probe(), ram_gb=16) if not probe().gpus else Budget(0, 16 * GIB, None, 0, 14e9, "no GPU")
    assert not budget.has_gpu
    recs = recommend(load_catalog(), budget, task="chat", limit=30)
    assert recs and all(r.placement == "cpu" and r.target_gpu_layers == 0 and r.vram_bytes == 0 for r in recs)
    assert all(r.ram_bytes <= 16 * GIB * RAM_USABLE_FRACTION for r in recs)


def test_recommend_task_filters_families() -> None:
    cat = load_catalog()
    recs = recommend(cat, _budget(24), task="translate", limit=100)
    assert recs and all("translate" in cat.families[cat.model(r.target).family].tasks for r in recs)
    assert not any(cat.model(r.target).family == "qwen2.5-coder" for r in recs)


def test_recommend_never_lists_an_incompatible_pair() -> None:
    """Property over the whole catalog, every task and several machines."""
    cat = load_catalog()
    from localspec.compat import pair_problems

    for budget in (_budget(8), _budget(24), _budget(48), Budget(0, 64 * GIB, None, 0, 14e9, "cpu")):
        for task in TASKS:
            for r in recommend(cat, budget, task=task, n_ctx=2048, limit=1000, min_tokens_per_s=0):
                t, d = cat.model(r.target), cat.model(r.draft)
                assert pair_problems(cat.vocab_info(t), cat.vocab_info(d)) == []
                tt, td = cat.tokenizer_of(t), cat.tokenizer_of(d)
                assert tt.id == td.id or (tt.fingerprint and tt.fingerprint == td.fingerprint)


def test_compatible_drafters_over_whole_catalog_respect_the_rule() -> None:
    cat = load_catalog()
    for t in cat.models:
        for d in cat.models:
            ok = d in compatible_drafters(cat, t)
            if ok:
                assert not cat.pair_problems(t, d)
            if cat.tokenizer_of(t).id != cat.tokenizer_of(d).id and not cat.tokenizer_of(t).fingerprint:
                assert not ok
    names = {d.id for d in compatible_drafters(cat, cat.model("qwen2.5-coder-32b-instruct"))}
    assert "qwen2.5-coder-0.5b-instruct" in names and "qwen2.5-0.5b-instruct" in names
    assert not names & {"qwen3-0.6b", "deepseek-r1-distill-qwen-1.5b", "smollm2-135m-instruct"}


def _stats(steps: int, drafted: list[int], accepted: list[int], t_draft: float, t_verify: float, tokens: int,
           t_gen: float) -> SpecStats:
    s = SpecStats(num_steps=steps, num_draft_tokens=sum(drafted), num_accepted_tokens=sum(accepted),
                  drafted_per_position=drafted, accepted_per_position=accepted, t_draft_s=t_draft,
                  t_verify_s=t_verify, num_generated_tokens=tokens, t_generate_s=t_gen)
    s.num_drafts = steps if drafted else 0
    return s


def test_measurement_from_hand_values() -> None:
    plain = _stats(100, [], [], 0.0, 7.7, 100, 8.0)  # 77 ms per target token
    # γ=4, 50 steps, acceptance per position 40, 32, 26, 20 → α = 118 / (50+40+32+26)
    spec = _stats(50, [50] * 4, [40, 32, 26, 20], 50 * 4 * 0.044, 50 * 0.164, 168, 12.0)
    m = measurement_from("code", 4, plain, spec)
    assert m.alpha == pytest.approx(118 / 148)
    assert m.c == pytest.approx(0.044 / 0.077)
    assert m.b_gamma == pytest.approx(0.164 / 0.077)
    assert m.measured_speedup == pytest.approx((168 / 12.0) / (100 / 8.0))
    assert m.predicted_speedup == pytest.approx(speedup(m.alpha, 4, m.c, m.b_gamma))


def test_calibrate_drives_the_engine_api_with_a_fake() -> None:
    calls = []

    class FakeEngine:
        def __init__(self, target, draft) -> None:
            calls.append(("init", target.path, draft.path))
            self._last = None

        def generate(self, request):
            calls.append(("generate", request.drafter, request.gamma, request.temperature))
            self._last = request
            yield from ()

        def stats(self) -> SpecStats:
            if self._last.drafter == "none":
                return _stats(64, [], [], 0.0, 64 * 0.05, 64, 3.3)
            return _stats(20, [20] * 3, [18, 15, 12], 60 * 0.005, 20 * 0.055, 65, 1.4)

        def close(self) -> None:
            calls.append(("close",))

    m = calibrate("t.gguf", "d.gguf", task="code", gamma=3, max_tokens=64, engine_factory=FakeEngine)
    assert calls[0] == ("init", "t.gguf", "d.gguf")
    # plain, then one short model request (the draft model's lazy prompt prefill), then the measured one
    assert calls[1] == ("generate", "none", 0, 0.0) and calls[2] == ("generate", "model", 1, 0.0)
    assert calls[3] == ("generate", "model", 3, 0.0)
    assert calls[-1] == ("close",)
    assert m.alpha == pytest.approx(45 / 53) and m.c == pytest.approx(0.1) and m.gamma == 3


@pytest.mark.models
@pytest.mark.slow
def test_calibrate_on_the_real_engine_smollm2_drafting_for_itself(smollm2_path) -> None:
    """A model drafting for itself under greedy decoding accepts everything: α = 1, c ≈ 1."""
    m = calibrate(str(smollm2_path), str(smollm2_path), task="code", gamma=3, max_tokens=24, n_ctx=512)
    assert m.alpha == pytest.approx(1.0)
    assert m.mean_acceptance_length == pytest.approx(4.0, abs=0.5)
    assert 0.3 < m.c < 3.0 and m.b_gamma > 0.5
    assert m.plain_tokens_per_s > 0 and m.spec_tokens_per_s > 0 and m.num_tokens > 0
