"""libllama's staging ("ext") symbols from `src/llama-ext.h` that drafters reading the
target's hidden states need.

These are C++-linkage functions, exported under mangled names; each is resolved by trying
the plain, Itanium (Linux/macOS) and MSVC names, as llama-cpp-python's private
`llama_cpp_ext.py` does for the few it declares. A build lacking one raises `MissingSymbol`
when first called for, so the caller can refuse the drafter with a clear message.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import llama_cpp
import llama_cpp.llama_cpp as _llama_cpp_lib

_lib: Any = _llama_cpp_lib._lib
_ctx = llama_cpp.llama_context_p_ctypes
_model = llama_cpp.llama_model_p_ctypes
_f32p = ctypes.POINTER(ctypes.c_float)


class MissingSymbol(RuntimeError):
    """This libllama build does not export an ext function localspec needs."""


def _resolve(names: tuple[str, str, str], argtypes: list[Any], restype: Any) -> Callable[..., Any]:
    for name in names:
        fn = getattr(_lib, name, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = restype
            return fn  # type: ignore[no-any-return]

    def missing(*_: Any) -> Any:
        raise MissingSymbol(f"libllama exports none of {', '.join(names)}: this llama.cpp build is too old "
                            "for drafters that read the target's hidden states (update llama-cpp-python)")

    return missing


set_embeddings_layer_inp = _resolve(
    ("llama_set_embeddings_layer_inp", "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
     "?llama_set_embeddings_layer_inp@@YAXPEAUllama_context@@I_N@Z"),
    [_ctx, ctypes.c_uint32, ctypes.c_bool], None)
"""(ctx, layer id, on): capture the input of a target layer for every token of each decode."""

get_embeddings_layer_inp = _resolve(
    ("llama_get_embeddings_layer_inp", "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
     "?llama_get_embeddings_layer_inp@@YAPEAMPEAUllama_context@@I@Z"),
    [_ctx, ctypes.c_uint32], _f32p)
"""(ctx, layer id) -> float* [n_tokens of the last decode, n_embd]."""

set_embeddings_nextn = _resolve(
    ("llama_set_embeddings_nextn", "_Z26llama_set_embeddings_nextnP13llama_contextbb",
     "?llama_set_embeddings_nextn@@YAXPEAUllama_context@@_N1@Z"),
    [_ctx, ctypes.c_bool, ctypes.c_bool], None)
"""(ctx, on, masked): output the graph's `t_h_nextn` rows (masked: only rows with output set)."""

get_embeddings_nextn = _resolve(
    ("llama_get_embeddings_nextn", "_Z26llama_get_embeddings_nextnP13llama_context",
     "?llama_get_embeddings_nextn@@YAPEAMPEAUllama_context@@@Z"),
    [_ctx], _f32p)
"""(ctx) -> float* of the `t_h_nextn` rows of the last decode/encode."""

model_target_layer_ids = _resolve(
    ("llama_model_target_layer_ids", "_Z28llama_model_target_layer_idsPK11llama_model",
     "?llama_model_target_layer_ids@@YAPEBHPEBUllama_model@@@Z"),
    [_model], ctypes.POINTER(ctypes.c_int32))
"""(draft model) -> const int32* of the target layer ids it reads."""

model_target_layer_ids_n = _resolve(
    ("llama_model_target_layer_ids_n", "_Z30llama_model_target_layer_ids_nPK11llama_model",
     "?llama_model_target_layer_ids_n@@YAIPEBUllama_model@@@Z"),
    [_model], ctypes.c_uint32)
"""(draft model) -> number of target layer ids."""

model_dflash_selector_top_k = _resolve(
    ("llama_model_dflash_selector_top_k", "_Z33llama_model_dflash_selector_top_kPK11llama_model",
     "?llama_model_dflash_selector_top_k@@YAHPEBUllama_model@@@Z"),
    [_model], ctypes.c_int32)
"""(draft model) -> DFlash2 selector top-k (0 for DFlash/DSpark)."""


def check_available() -> None:
    """Raise MissingSymbol unless every ext function above resolved."""
    for fn in (set_embeddings_layer_inp, get_embeddings_layer_inp, set_embeddings_nextn, get_embeddings_nextn,
               model_target_layer_ids, model_target_layer_ids_n, model_dflash_selector_top_k):
        if getattr(fn, "__name__", "") == "missing":
            fn()
