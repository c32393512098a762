"""Backend choice: names, forced backends, auto's timing and fallback, the real no-driver path."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

import localspec.kernels as kernels
from localspec.errors import KernelUnavailableError
from localspec.kernels import _build, _cuda
from localspec.kernels._auto import AutoBackend
from localspec.kernels.reference import accept_ref
from localspec.types import AcceptResult, SamplingParams

from .cases import make_case


class FakeBackend:
    """Delegates to the reference after sleeping `delay_s`; counts calls."""

    def __init__(self, name: str, delay_s: float) -> None:
        self.name = name
        self.delay_s = delay_s
        self.calls = 0

    def accept(self, *args: object) -> AcceptResult:
        self.calls += 1
        time.sleep(self.delay_s)
        return accept_ref(*args)  # type: ignore[arg-type]


def _inputs(k: int = 2, n_vocab: int = 50, temperature: float = 0.8) -> tuple:
    case = make_case(np.random.default_rng(k + n_vocab), k, n_vocab, SamplingParams(temperature), True)
    return case.target, case.drafts, case.q, case.uniforms, case.params


def test_get_backend_names(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kernels.get_backend("reference").name == "reference"
    assert kernels.get_backend("torch-cpu").name == "torch-cpu"
    assert kernels.get_backend("torch").name in ("torch-cpu", "torch-cuda")
    monkeypatch.setenv("LOCALSPEC_KERNEL", "reference")
    assert kernels.get_backend().name == "reference"
    monkeypatch.setenv("LOCALSPEC_KERNEL", "torch-cpu")
    assert kernels.get_backend().name == "torch-cpu"
    with pytest.raises(KernelUnavailableError, match="unknown acceptance backend 'bogus'"):
        kernels.get_backend("bogus")


def test_forced_cuda_without_nvcc_raises_with_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_build, "find_nvcc", lambda: None)
    _cuda.reset_probe()
    try:
        monkeypatch.setenv("LOCALSPEC_KERNEL", "cuda")
        with pytest.raises(KernelUnavailableError, match="nvcc not found"):
            kernels.get_backend()
        status = kernels.backend_status()
        assert status["reference"] is None and "nvcc not found" in (status["cuda"] or "")
    finally:
        _cuda.reset_probe()


def test_auto_picks_the_fastest_once_per_shape_class() -> None:
    slow, fast = FakeBackend("slow", 0.003), FakeBackend("fast", 0.0)
    auto = AutoBackend([slow, fast])
    assert auto.name == "auto"
    args = _inputs()
    first = auto.accept(*args)
    assert first == accept_ref(*args) and auto.name == "auto:fast"
    slow_calls = slow.calls
    for _ in range(5):
        auto.accept(*args)
    assert slow.calls == slow_calls, "timing happens once per shape class"
    assert auto.choices[(2, 50, False, True)].backend == "fast"
    # a new shape class (greedy) is timed again
    auto.accept(*_inputs(temperature=0.0))
    assert slow.calls > slow_calls and len(auto.choices) == 2


def test_auto_timing_is_cheap() -> None:
    auto = kernels.get_backend("auto")
    args = _inputs(k=8, n_vocab=49_152)
    t0 = time.perf_counter()
    auto.accept(*args)
    assert time.perf_counter() - t0 < 1.0  # milliseconds in practice; generous for a loaded CI box
    assert auto.name.startswith("auto:")


def test_no_driver_error_35_for_real() -> None:
    """This machine has nvcc and no driver: the built library's cudaGetDeviceCount says 35."""
    if _build.find_nvcc() is None:
        pytest.skip("nvcc not found")
    if "libcuda.so.1 not found" not in _cuda.driver_info():
        pytest.skip(f"an NVIDIA driver is present ({_cuda.driver_info()})")
    _cuda.reset_probe()
    lib = _cuda.load_library(_build.build_device_library())
    err, count = _cuda.device_count(lib)
    assert (err, count) == (_cuda.CUDA_ERROR_INSUFFICIENT_DRIVER, 0)
    reason = _cuda.cuda_status()
    assert reason is not None and "returned 35" in reason and "cudaErrorInsufficientDriver" in reason
    with pytest.raises(KernelUnavailableError, match="returned 35"):
        kernels.get_backend("cuda")


def test_auto_falls_back_without_a_driver_and_logs_once(caplog: pytest.LogCaptureFixture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    if _cuda.cuda_status() is None:
        pytest.skip("the CUDA kernel runs here")
    monkeypatch.setattr(kernels, "_logged_fallbacks", set())
    with caplog.at_level(logging.INFO, logger="localspec.kernels"):
        first = kernels.get_backend("auto")
        kernels.get_backend("auto")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("acceptance backend cuda unavailable")]
    assert len(lines) == 1
    assert isinstance(first, AutoBackend) and "cuda" in first.unavailable
    assert "cuda" not in [b.name for b in first.candidates]
    args = _inputs()
    assert first.accept(*args) == accept_ref(*args)
    assert first.name in ("auto:reference", "auto:torch-cpu")


def test_cuda_explanations_name_the_next_step() -> None:
    assert "driver" in _cuda.explain_device_error(35, "cudaErrorInsufficientDriver", "x")
    assert "no CUDA GPU" in _cuda.explain_device_error(100, "cudaErrorNoDevice", "x")
