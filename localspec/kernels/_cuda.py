"""The custom CUDA acceptance kernel through ctypes: the only module that loads native CUDA.

`CudaBackend` runs `cuda/accept.cu` (built at first use by `_build.py` with the user's nvcc),
`HostKernel` runs the same math compiled for the CPU (tests and debugging). `cuda_status()`
says why the device kernel cannot run here (no nvcc, a compile error, no driver, no GPU).

`accept_batch` packs a batch (`_Batch`) for one call of `lsk_accept_batch` (one kernel launch
for every sequence) or `lsk_accept_batch_host`: the items' target logits rows become one
[sum(k_i + 1), V] float32 buffer, which is a zero-copy view when the items' rows already lie
back to back in memory (views of one verify batch, as a batched target call returns them),
else one host copy; draft logits likewise; drafts, uniforms and per-item parameters are
small arrays.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from localspec.errors import KernelUnavailableError
from localspec.kernels import AcceptItem, _build, batch_vocab
from localspec.kernels.reference import _check_shapes
from localspec.types import AcceptResult, SamplingParams, TokenSource

log = logging.getLogger(__name__)

CUDA_ERROR_INSUFFICIENT_DRIVER = 35
CUDA_ERROR_NO_DEVICE = 100
MAX_K = 64
_SOURCES = {0: TokenSource.PLAIN, 2: TokenSource.RECOVERED, 3: TokenSource.BONUS}

_f32p = ctypes.POINTER(ctypes.c_float)
_f64p = ctypes.POINTER(ctypes.c_double)
_i32p = ctypes.POINTER(ctypes.c_int)
_ACCEPT_ARGTYPES: list[Any] = [_f32p, _f32p, _i32p, _f64p, ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_int,
                    ctypes.c_float, _i32p]
_BATCH_ARGTYPES: list[Any] = [ctypes.c_int, ctypes.c_int, _f32p, _f32p, ctypes.c_int, _i32p, _i32p, _i32p, _f64p,
                              _f32p, _i32p, _f32p, _i32p]


def _ptr(array: np.ndarray | None, ctype: Any) -> Any:
    return None if array is None else array.ctypes.data_as(ctypes.POINTER(ctype))


class _Inputs:
    """Validated, contiguous views of one step's inputs (no copy when already float32/C).

    `as_given=True` (a batch item) leaves the logits arrays as given (any dtype or strides):
    `_Batch` packs them, converting while it copies.
    """

    def __init__(self, target_logits: npt.ArrayLike, draft_tokens: npt.ArrayLike,
                 draft_logits: npt.ArrayLike | None, uniforms: npt.ArrayLike, params: SamplingParams,
                 as_given: bool = False) -> None:
        rows = np.asarray if as_given else functools.partial(np.ascontiguousarray, dtype=np.float32)
        self.logits = rows(target_logits)
        self.drafts = np.ascontiguousarray(np.asarray(draft_tokens).reshape(-1), dtype=np.int32)
        self.k = int(self.drafts.shape[0])
        self.params = params
        greedy = params.greedy
        self.q = None if draft_logits is None or greedy else rows(draft_logits)
        self.u = np.ascontiguousarray(np.asarray(uniforms, dtype=np.float64).reshape(-1))
        _check_shapes(self.logits, self.drafts, self.q, None if greedy else self.u)
        if self.k > MAX_K:
            raise ValueError(f"the CUDA kernel takes at most {MAX_K} draft tokens, got {self.k}")
        if greedy and self.u.shape[0] < self.k + 1:
            self.u = np.zeros(self.k + 1)
        self.n_vocab = int(self.logits.shape[1])

    def call(self, fn: Any, params: SamplingParams) -> AcceptResult:
        out = np.zeros(self.k + 3, dtype=np.int32)
        err = fn(_ptr(self.logits, ctypes.c_float), _ptr(self.q, ctypes.c_float), _ptr(self.drafts, ctypes.c_int),
                 _ptr(self.u, ctypes.c_double), self.k, self.n_vocab, float(params.temperature), int(params.top_k),
                 float(params.top_p), _ptr(out, ctypes.c_int))
        if err:
            raise KernelUnavailableError(f"the acceptance kernel failed: {_error_text(err)}")
        num_accepted = int(out[0])
        tokens = tuple(int(t) for t in out[2 : 3 + num_accepted])
        return AcceptResult(tokens, num_accepted, _SOURCES[int(out[1])])


def _rows_pointer(arrays: list[np.ndarray], n_vocab: int) -> tuple[Any, np.ndarray | None]:
    """(float* to the rows of `arrays` stacked [sum(n_i), V], a packed copy or None).

    float32 C-contiguous [n_i, V] arrays that lie back to back in memory are passed as a
    pointer to the first one (no copy: the bytes there are exactly the stacked rows);
    otherwise they are concatenated (and converted to float32) in one copy. The caller keeps
    `arrays` alive across the call.
    """
    row_bytes = 4 * n_vocab
    address = arrays[0].ctypes.data
    adjacent = True
    for array in arrays:
        if array.dtype != np.float32 or not array.flags.c_contiguous or array.ctypes.data != address:
            adjacent = False
            break
        address += array.shape[0] * row_bytes
    if adjacent:
        return ctypes.cast(arrays[0].ctypes.data, _f32p), None
    packed = np.concatenate(arrays, axis=0, dtype=np.float32)
    return _ptr(packed, ctypes.c_float), packed


class _Batch:
    """A batch packed for `lsk_accept_batch` (layout: BatchArgs in cuda/accept_math.cuh)."""

    def __init__(self, items: Sequence[AcceptItem]) -> None:
        self.n_vocab = batch_vocab(items)
        self.inputs: list[_Inputs] = []
        for index, item in enumerate(items):
            try:
                self.inputs.append(_Inputs(*item.args(), as_given=True))
            except ValueError as exc:
                raise ValueError(f"item {index}: {exc}") from exc
        n = len(self.inputs)
        ks = np.fromiter((i.k for i in self.inputs), dtype=np.int32, count=n)
        self.row_offset = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(ks + 1, out=self.row_offset[1:])
        self.q_offset = np.full(n, -1, dtype=np.int32)
        with_q = [i for i in self.inputs if i.q is not None and i.k > 0]
        q_rows = 0
        for index, inp in enumerate(self.inputs):
            if inp.q is not None and inp.k > 0:
                self.q_offset[index] = q_rows
                q_rows += inp.k
        self.n_draft_rows = q_rows
        self.target, self._target_copy = _rows_pointer([i.logits for i in self.inputs], self.n_vocab)
        self.draft: Any = None
        self._draft_copy: np.ndarray | None = None
        if with_q:
            self.draft, self._draft_copy = _rows_pointer([i.q for i in with_q if i.q is not None], self.n_vocab)
        self.drafts = np.concatenate([i.drafts for i in self.inputs]).astype(np.int32, copy=False)
        # greedy items may carry more (or, from _Inputs, zero) uniforms: keep k + 1 each
        self.uniforms = np.concatenate([i.u[: i.k + 1] for i in self.inputs])
        self.temperature = np.array([i.params.temperature for i in self.inputs], dtype=np.float32)
        self.top_k = np.array([i.params.top_k for i in self.inputs], dtype=np.int32)
        self.top_p = np.array([i.params.top_p for i in self.inputs], dtype=np.float32)

    def call(self, fn: Any) -> list[AcceptResult]:
        n = len(self.inputs)
        out = np.zeros(int(self.row_offset[-1]) + 2 * n, dtype=np.int32)
        err = fn(n, self.n_vocab, self.target, self.draft, self.n_draft_rows, _ptr(self.row_offset, ctypes.c_int),
                 _ptr(self.q_offset, ctypes.c_int), _ptr(self.drafts, ctypes.c_int), _ptr(self.uniforms, ctypes.c_double),
                 _ptr(self.temperature, ctypes.c_float), _ptr(self.top_k, ctypes.c_int),
                 _ptr(self.top_p, ctypes.c_float), _ptr(out, ctypes.c_int))
        if err:
            raise KernelUnavailableError(f"the batched acceptance kernel failed: {_error_text(err)}")
        results = []
        for index in range(n):
            at = int(self.row_offset[index]) + 2 * index
            num_accepted = int(out[at])
            tokens = tuple(int(t) for t in out[at + 2 : at + 3 + num_accepted])
            results.append(AcceptResult(tokens, num_accepted, _SOURCES[int(out[at + 1])]))
        return results


_LIB: ctypes.CDLL | None = None


def _error_text(err: int) -> str:
    if _LIB is None:
        return f"error {err}"
    name = _LIB.lsk_error_name(err).decode()
    text = _LIB.lsk_error_string(err).decode()
    return f"error {err} ({name}: {text})"


def load_library(path: Path) -> ctypes.CDLL:
    """Load a built device library and declare its C signatures."""
    lib = ctypes.CDLL(str(path))
    lib.lsk_device_count.argtypes = [_i32p]
    lib.lsk_device_count.restype = ctypes.c_int
    lib.lsk_device_capability.argtypes = [ctypes.c_int, _i32p, _i32p]
    lib.lsk_device_capability.restype = ctypes.c_int
    lib.lsk_runtime_version.argtypes = [_i32p]
    lib.lsk_runtime_version.restype = ctypes.c_int
    lib.lsk_error_name.argtypes = [ctypes.c_int]
    lib.lsk_error_name.restype = ctypes.c_char_p
    lib.lsk_error_string.argtypes = [ctypes.c_int]
    lib.lsk_error_string.restype = ctypes.c_char_p
    lib.lsk_accept.argtypes = _ACCEPT_ARGTYPES
    lib.lsk_accept.restype = ctypes.c_int
    lib.lsk_accept_batch.argtypes = _BATCH_ARGTYPES
    lib.lsk_accept_batch.restype = ctypes.c_int
    return lib


def device_count(lib: ctypes.CDLL) -> tuple[int, int]:
    """(cudaError, number of devices) from `cudaGetDeviceCount` inside the library."""
    count = ctypes.c_int(0)
    err = lib.lsk_device_count(ctypes.byref(count))
    return int(err), int(count.value)


def explain_device_error(err: int, name: str, text: str) -> str:
    """A sentence a user can act on for a cudaGetDeviceCount failure."""
    if err == CUDA_ERROR_INSUFFICIENT_DRIVER:
        return (f"cudaGetDeviceCount returned {err} ({name}: {text}): no NVIDIA driver is installed, or it is "
                "older than this nvcc's CUDA runtime needs (CUDA 13 needs driver R580+); install or update "
                "the driver, or use LOCALSPEC_KERNEL=torch")
    if err == CUDA_ERROR_NO_DEVICE:
        return f"cudaGetDeviceCount returned {err} ({name}: {text}): no CUDA GPU is visible (check CUDA_VISIBLE_DEVICES)"
    return f"cudaGetDeviceCount returned {err} ({name}: {text}); the CUDA kernel cannot run"


@functools.cache
def _probe() -> tuple[ctypes.CDLL | None, str | None, dict[str, str]]:
    """(library, reason it cannot run or None, facts) — built, loaded and asked once per process."""
    facts: dict[str, str] = {}
    nvcc = _build.find_nvcc()
    if nvcc is None:
        return None, "nvcc not found: install the CUDA toolkit to build the kernel, or use LOCALSPEC_KERNEL=torch", facts
    facts["nvcc"] = f"{nvcc} ({_build.tool_version(nvcc)})"
    try:
        path = _build.build_device_library()
    except KernelUnavailableError as exc:
        return None, str(exc), facts
    facts["library"] = str(path)
    try:
        lib = load_library(path)
    except OSError as exc:
        return None, f"could not load {path}: {exc}", facts
    global _LIB
    _LIB = lib
    err, count = device_count(lib)
    if err:
        name, text = lib.lsk_error_name(err).decode(), lib.lsk_error_string(err).decode()
        return None, explain_device_error(err, name, text), facts
    if count == 0:
        return None, "no CUDA GPU found (cudaGetDeviceCount = 0)", facts
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    if lib.lsk_device_capability(0, ctypes.byref(major), ctypes.byref(minor)) == 0:
        facts["device"] = f"{count} GPU(s), device 0 compute capability {major.value}.{minor.value}"
    return lib, None, facts


def cuda_status() -> str | None:
    """Why the CUDA kernel cannot run here, or None when it can (builds it on first call)."""
    return _probe()[1]


def cuda_facts() -> dict[str, str]:
    """What the probe learnt: nvcc path and version, library path, device (for `doctor`)."""
    return dict(_probe()[2])


def reset_probe() -> None:
    """Forget the cached probe (tests change PATH or the cache folder)."""
    global _LIB
    _probe.cache_clear()
    _LIB = None


def driver_info() -> str:
    """The NVIDIA driver as libcuda reports it ('CUDA 13.0 driver API'), or why it is absent."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver (libcuda.so.1 not found)"
    version = ctypes.c_int(0)
    err = libcuda.cuDriverGetVersion(ctypes.byref(version))
    if err:
        return f"libcuda.so.1 present, cuDriverGetVersion failed ({err})"
    v = version.value
    return f"driver supports CUDA {v // 1000}.{(v % 1000) // 10}"


class CudaBackend:
    """The fused kernel of `cuda/accept.cu` on GPU 0. Raises KernelUnavailableError if it cannot run."""

    name = "cuda"

    def __init__(self) -> None:
        lib, reason, _ = _probe()
        if lib is None:
            raise KernelUnavailableError(f"CUDA acceptance kernel unavailable: {reason}")
        self._lib = lib

    def accept(
        self,
        target_logits: npt.ArrayLike,
        draft_tokens: npt.ArrayLike,
        draft_logits: npt.ArrayLike | None,
        uniforms: npt.ArrayLike,
        params: SamplingParams,
    ) -> AcceptResult:
        """Shapes as `reference.accept_ref`: target [k+1, V], drafts [k], q [k, V] | None, uniforms [k+1]."""
        return _Inputs(target_logits, draft_tokens, draft_logits, uniforms, params).call(self._lib.lsk_accept, params)

    def accept_batch(self, items: Sequence[AcceptItem]) -> list[AcceptResult]:
        """Every item in one kernel launch (`lsk_accept_batch`); result i == `accept(*items[i].args())`.

        A one-item batch takes the single-step path (`lsk_accept`: also one launch, with less
        packing, and the greedy kernel's lighter registers); both run the same row code.
        """
        if not items:
            return []
        if len(items) == 1:
            batch_vocab(items)
            try:
                return [self.accept(*items[0].args())]
            except ValueError as exc:
                raise ValueError(f"item 0: {exc}") from exc
        return _Batch(items).call(self._lib.lsk_accept_batch)


class HostKernel:
    """`cuda/accept_math.cuh` compiled for the CPU (`accept_host.cu`): the kernel's math on one thread."""

    name = "cuda-host"

    def __init__(self, path: Path | None = None) -> None:
        lib = ctypes.CDLL(str(path or _build.build_host_library()))
        lib.lsk_accept_host.argtypes = _ACCEPT_ARGTYPES
        lib.lsk_accept_host.restype = ctypes.c_int
        lib.lsk_accept_batch_host.argtypes = _BATCH_ARGTYPES
        lib.lsk_accept_batch_host.restype = ctypes.c_int
        lib.lsk_probs_host.argtypes = [_f32p, ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_int,
                                       ctypes.c_float, _f64p]
        lib.lsk_probs_host.restype = ctypes.c_int
        self._lib = lib

    def accept(
        self,
        target_logits: npt.ArrayLike,
        draft_tokens: npt.ArrayLike,
        draft_logits: npt.ArrayLike | None,
        uniforms: npt.ArrayLike,
        params: SamplingParams,
    ) -> AcceptResult:
        """Shapes as `reference.accept_ref`."""
        return _Inputs(target_logits, draft_tokens, draft_logits, uniforms, params).call(self._lib.lsk_accept_host,
                                                                                          params)

    def accept_batch(self, items: Sequence[AcceptItem]) -> list[AcceptResult]:
        """The packed batch through `lsk_accept_batch_host` (the device kernel's layout and row code)."""
        if not items:
            return []
        return _Batch(items).call(self._lib.lsk_accept_batch_host)

    def probs(self, logits: npt.ArrayLike, params: SamplingParams) -> npt.NDArray[np.float64]:
        """The kernel's processed probabilities. logits: [n, V] float32 -> float64 [n, V]."""
        x = np.ascontiguousarray(logits, dtype=np.float32)
        if x.ndim != 2:
            raise ValueError(f"logits must be [n, V], got {x.shape}")
        out = np.empty(x.shape, dtype=np.float64)
        self._lib.lsk_probs_host(_ptr(x, ctypes.c_float), x.shape[0], x.shape[1], float(params.temperature),
                                 int(params.top_k), float(params.top_p), _ptr(out, ctypes.c_double))
        return out
