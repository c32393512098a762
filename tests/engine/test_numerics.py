"""The numerics plan: which llama.cpp settings each mode gets, for every kind of host.

The plan is a pure function of the facts (CPU AMX, build features, GPU layers, -fa, the
tiled-matmul switch), so both the AMX and the non-AMX paths are tested on any machine.
"""

from __future__ import annotations

import pytest

from localspec.engine.numerics import plan_numerics
from localspec.errors import InvalidRequestError

GOOD_BUILD = frozenset({"AVX2", "FMA", "REPACK", "OPENMP"})
"""What `make setup` builds: no native AMX kernels, no llamafile."""
NATIVE_AMX_BUILD = GOOD_BUILD | {"AMX_INT8", "AVX512"}
LLAMAFILE_BUILD = GOOD_BUILD | {"LLAMAFILE"}


def plan(requested: str, *, on_gpu: bool = False, fa: bool | None = None, build: frozenset[str] = GOOD_BUILD,
         amx: bool = False, tiled: str | None = "0"):  # type: ignore[no-untyped-def]
    return plan_numerics(requested, on_gpu=on_gpu, flash_attn=fa, build=build, cpu_amx=amx, tiled_env=tiled)


@pytest.mark.parametrize("amx", [False, True], ids=["epyc", "amx-xeon"])
def test_exact_on_the_cpu_turns_every_batch_dependent_kernel_off(amx: bool) -> None:
    p = plan("exact", amx=amx, build=NATIVE_AMX_BUILD if amx else GOOD_BUILD)
    assert (p.mode, p.use_extra_bufts, p.flash_attn, p.op_offload, p.reasons) == ("exact", False, False, False, ())


@pytest.mark.parametrize("amx", [False, True], ids=["epyc", "amx-xeon"])
def test_fast_uses_repacked_weights_unless_they_would_crash(amx: bool) -> None:
    # make setup's build has no AMX kernels: repacked buffers are safe on an AMX CPU too
    assert plan("fast", amx=amx).use_extra_bufts
    # a native build on an AMX CPU would segfault in ggml_backend_amx_mul_mat (llama.cpp #20824)
    assert plan("fast", amx=amx, build=NATIVE_AMX_BUILD).use_extra_bufts is (not amx)


def test_fast_keeps_the_users_flash_attention_choice() -> None:
    assert [plan("fast", fa=fa).flash_attn for fa in (None, True, False)] == [None, True, False]
    assert plan("fast").op_offload


@pytest.mark.parametrize(
    "facts,why",
    [
        (dict(on_gpu=True), "GPU layers"),
        (dict(build=LLAMAFILE_BUILD), "llamafile"),
        (dict(tiled="1"), "GGML_CPU_TILED_MM=1"),
        (dict(tiled=None), "GGML_CPU_TILED_MM=(unset)"),
    ],
    ids=["gpu", "llamafile-build", "tiled-on", "tiled-unset"],
)
def test_exact_that_cannot_be_ensured_runs_as_fast_and_says_why(facts: dict[str, object], why: str) -> None:
    p = plan("exact", **facts)  # type: ignore[arg-type]
    assert p.mode == "fast" and p.use_extra_bufts  # the user gets fast's speed, not a half-exact
    assert any(why in r for r in p.reasons), p.reasons


def test_exact_with_flash_attention_on_the_cpu_is_refused_with_the_way_out() -> None:
    with pytest.raises(InvalidRequestError, match="--numerics fast"):
        plan("exact", fa=True)
    assert plan("exact", fa=True, on_gpu=True).mode == "fast"  # on a GPU it is fast anyway


def test_unknown_mode_is_a_clear_error() -> None:
    with pytest.raises(InvalidRequestError, match="exact, fast"):
        plan("bitwise")
