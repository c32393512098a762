"""localspec.hardware: NVML probe with faked GPUs, the no-GPU path, memory_in_use."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml
import pytest

from localspec import hardware
from localspec.hardware import GpuInfo, memory_in_use, probe

GIB = 1 << 30


def fake_nvml(monkeypatch: pytest.MonkeyPatch, gpus: list[tuple[str, int]], bus_bits: int = 384, mem_mhz: int = 10501) -> None:
    """Make pynvml report `gpus` = [(name, total GiB)] with a 13.0 driver."""
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: "580.65.06")
    monkeypatch.setattr(pynvml, "nvmlSystemGetCudaDriverVersion", lambda: 13000)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: len(gpus))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", lambda h: gpus[h][0])
    monkeypatch.setattr(
        pynvml, "nvmlDeviceGetMemoryInfo",
        lambda h: SimpleNamespace(total=gpus[h][1] * GIB, free=gpus[h][1] * GIB - (300 << 20), used=300 << 20),
    )
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCudaComputeCapability", lambda h: (8, 9))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryBusWidth", lambda h: bus_bits)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxClockInfo", lambda h, t: mem_mhz)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", lambda h: [])
    hardware._nvml_for_polling.cache_clear()


@pytest.mark.parametrize("gib", [8, 12, 24, 32])
def test_probe_reports_faked_gpu(monkeypatch: pytest.MonkeyPatch, gib: int) -> None:
    fake_nvml(monkeypatch, [(f"NVIDIA GeForce Test {gib}GB", gib)])
    report = probe()
    assert report.gpu_error is None
    (gpu,) = report.gpus
    assert gpu == GpuInfo(0, f"NVIDIA GeForce Test {gib}GB", gib * GIB, gib * GIB - (300 << 20), (8, 9), "580.65.06",
                          13000, 384 / 8 * 10501e6 * 2)
    assert gpu.cuda_driver_version_str == "13.0"
    assert report.best_gpu == gpu
    assert report.ram_total_bytes > 0 and report.cpu_threads >= report.cpu_cores_physical >= 1


def test_probe_best_gpu_is_the_largest(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, [("small", 8), ("big", 24)])
    assert probe().best_gpu.name == "big"


def test_probe_without_driver_says_why() -> None:
    """Real path on this machine: no NVIDIA driver → NVMLError_LibraryNotFound."""
    try:
        pynvml.nvmlInit()
        pytest.skip("this machine has an NVIDIA driver")
    except pynvml.NVMLError:
        pass
    report = probe()
    assert report.gpus == []
    assert report.gpu_error.startswith("no NVIDIA GPU found: ")
    assert "LibraryNotFound" in report.gpu_error


def test_probe_nvml_error_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    report = probe()
    assert report.gpus == [] and "DriverNotLoaded" in report.gpu_error


def test_probe_zero_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, [])
    report = probe()
    assert report.gpus == [] and "0 devices" in report.gpu_error


def test_memory_in_use_rss_and_faked_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, [("g", 12)])
    m = memory_in_use()
    assert m.rss_bytes > 10 << 20
    assert m.gpu_used_bytes == 300 << 20 and m.gpu_total_bytes == 12 * GIB
    hardware._nvml_for_polling.cache_clear()


def test_cpu_has_amx_reads_flags() -> None:
    assert hardware.cpu_has_amx() == ("amx_tile" in hardware.cpu_flags())
