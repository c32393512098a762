"""Numerics modes: which llama.cpp settings make a row's logits independent of its batch.

A verify batch evaluates [last, d_1..d_γ] together, plain decoding one row at a time, and the
prompt in chunks. The greedy output is bit-identical to plain decoding only if every row
gets the same logits whichever batch it sits in. On llama.cpp's CPU backend four kernels
break that, each for some batch sizes only:

- repacked weights ("extra buffer types": Q4_0/Q4_K/IQ4_NL/... re-laid for gemm) compute a
  row in a batch (gemm) differently than alone (gemv);
- the tiled K-quant matmul takes batches of 8+ rows (switch: GGML_CPU_TILED_MM=0);
- llamafile's sgemm takes F16/F32 matmuls (attention without flash attention) of 2+ rows,
  while one row goes through ggml's vec_dot (only a build option turns it off:
  -DGGML_LLAMAFILE=OFF, which `make setup` uses);
- CPU flash attention tiles 64+ query rows and splits the KV cache across threads for one
  row once 512+ cells are in use.

`exact` turns all four off (plain buffers, no tiled matmul, flash attention off, a build
without llamafile) and keeps host ops on the CPU (a CUDA build would run prompt batches on
the GPU). Every remaining kernel computes one dot product per (row, column) in a fixed order,
so any split of the work gives the same bits. `fast` leaves llama.cpp's choices alone. When
exact cannot be ensured (GPU layers: CUDA picks matmul kernels by batch size; a build with
llamafile), the model runs as `fast` and says so: the mode reported is the mode that ran.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from localspec.errors import InvalidRequestError
from localspec.types import NUMERICS_MODES, ModelSpec

TILED_MM_ENV = "GGML_CPU_TILED_MM"
"""ggml's switch for its tiled K-quant matmul, read once per process ("0" = off)."""


@dataclass(frozen=True)
class NumericsPlan:
    """llama.cpp settings for one model."""

    mode: str
    """The mode that will really run (may be `fast` when `exact` was asked and cannot be ensured)."""
    use_extra_bufts: bool
    flash_attn: bool | None
    """None = llama.cpp decides."""
    op_offload: bool
    reasons: tuple[str, ...] = ()
    """Why `exact` was not possible (empty when it runs as asked)."""


def plan_numerics(
    requested: str, *, on_gpu: bool, flash_attn: bool | None, build: frozenset[str], cpu_amx: bool,
    tiled_env: str | None,
) -> NumericsPlan:
    """Settings for `requested` given the facts: GPU layers, the user's -fa, the build's
    CPU features (llama_print_system_info), AMX on this CPU, the tiled-matmul switch."""
    if requested not in NUMERICS_MODES:
        raise InvalidRequestError(f"numerics must be one of {', '.join(NUMERICS_MODES)}, got {requested!r}",
                                  param="numerics")
    # llama.cpp's AMX buffer type segfaults in ggml_backend_amx_mul_mat (llama.cpp #20824)
    # when the build has AMX kernels and the CPU runs them: no extra buffers there.
    fast = NumericsPlan("fast", use_extra_bufts=not (cpu_amx and "AMX_INT8" in build), flash_attn=flash_attn,
                        op_offload=True)
    if requested == "fast":
        return fast
    if flash_attn and not on_gpu:
        raise InvalidRequestError(
            "--flash-attn and --numerics exact do not go together on the CPU: llama.cpp's CPU flash "
            "attention uses other kernels for one row and for 64+ rows. Drop -fa, or use --numerics fast.",
            param="flash_attn",
        )
    reasons = []
    if on_gpu:
        reasons.append("GPU layers: CUDA picks matmul kernels by batch size")
    if "LLAMAFILE" in build:
        reasons.append("this llama.cpp build has llamafile's sgemm (rebuild with -DGGML_LLAMAFILE=OFF, "
                       "as `make setup` does)")
    if tiled_env is None or tiled_env.strip() != "0":
        reasons.append(f"{TILED_MM_ENV}={tiled_env if tiled_env is not None else '(unset)'}: the tiled "
                       "K-quant matmul is on")
    if reasons:
        return NumericsPlan(fast.mode, fast.use_extra_bufts, fast.flash_attn, fast.op_offload, tuple(reasons))
    return NumericsPlan("exact", use_extra_bufts=False, flash_attn=False, op_offload=False)


@dataclass(frozen=True)
class ModeCost:
    """Timings of one numerics mode on one model (medians over interleaved rounds)."""

    mode: str
    decode_tok_s: float
    """Plain decoding: one row per llama_decode."""
    verify_rows: int
    verify_cost: float
    """Seconds of a verify batch of `verify_rows` rows relative to one row: b(γ)."""
    batch_invariant: bool
    """A batch's rows were bit-identical to the same rows evaluated one at a time."""


def describe() -> dict[str, object]:
    """Static facts: what each mode runs with here, and why."""
    from localspec.engine.llama.backend import build_features, numerics_plan
    from localspec.hardware import cpu_has_amx

    plans = {m: numerics_plan(m, on_gpu=False, flash_attn=None) for m in NUMERICS_MODES}
    exact = plans["exact"]
    return {
        "modes": list(NUMERICS_MODES),
        "default": ModelSpec("").numerics,
        "exact": ("plain CPU weight buffers, no tiled matmul, flash attention off: a row's logits do not "
                  "depend on its batch (greedy output identical to plain decoding)") if exact.mode == "exact"
                 else "not possible here: " + "; ".join(exact.reasons) + " (runs as fast)",
        "fast": ("llama.cpp's own choices, repacked CPU weights included: a row in a verify batch can "
                 "differ from the row alone") if plans["fast"].use_extra_bufts else
                ("llama.cpp's own choices but plain weight buffers: this build has AMX kernels and the "
                 "CPU runs them, and llama.cpp's AMX buffer type crashes (llama.cpp #20824)"),
        "cpu_amx": cpu_has_amx(),
        "build_features": sorted(build_features()),
        "gpu_layers": "GPU-offloaded targets run as 'fast': CUDA picks matmul kernels by batch size",
    }


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def measure_costs(path: str, *, n_threads: int | None = None, rows: int = 5, rounds: int = 3,
                  tokens: int = 16) -> list[ModeCost]:
    """Load `path` once per mode and time both side by side (alternating rounds, so the
    machine's noise hits both alike). Takes some seconds per round on a 1.5B CPU model."""
    import numpy as np

    from localspec.engine.llama.backend import LlamaCppBackend

    backends = {m: LlamaCppBackend(ModelSpec(path, n_ctx=512, n_threads=n_threads, numerics=m))
                for m in NUMERICS_MODES}
    try:
        prompt = backends["exact"].tokenize("def quicksort(xs):\n    \"\"\"Sort a list.\"\"\"\n" * 2)
        one: dict[str, list[float]] = {m: [] for m in backends}
        batch: dict[str, list[float]] = {m: [] for m in backends}
        invariant = dict.fromkeys(backends, True)
        for _ in range(rounds):
            for mode, b in backends.items():
                b.truncate(0)
                b.decode(prompt)
                n0 = b.n_past
                tok = int(prompt[-1])
                t0 = time.perf_counter()
                for _ in range(tokens):
                    tok = int(np.argmax(b.decode([tok])[-1]))
                one[mode].append((time.perf_counter() - t0) / tokens)
                seq = b.tokens[n0:n0 + rows]
                b.truncate(n0)
                t0 = time.perf_counter()
                batched = b.decode(seq, all_logits=True).copy()
                batch[mode].append(time.perf_counter() - t0)
                b.truncate(n0)
                alone = np.stack([b.decode([t])[-1].copy() for t in seq])
                invariant[mode] &= bool(np.array_equal(batched, alone))
        return [
            ModeCost(mode=m, decode_tok_s=1.0 / _median(one[m]), verify_rows=rows,
                     verify_cost=_median(batch[m]) / _median(one[m]), batch_invariant=invariant[m])
            for m in backends
        ]
    finally:
        for b in backends.values():
            b.close()
