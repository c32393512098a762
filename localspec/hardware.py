"""What this machine has: NVIDIA GPUs (NVML), RAM and cores (psutil), CPU features.

`probe()` never raises for a missing GPU: it returns an empty `gpus` list and says why in
`gpu_error` ("no NVIDIA GPU found: ..."). pynvml is imported only here.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_nvml_lock = threading.Lock()


@functools.cache
def cpu_flags() -> frozenset[str]:
    """CPU feature flags from /proc/cpuinfo (empty where it does not exist)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_has_amx() -> bool:
    """True on CPUs with AMX tiles, where llama.cpp's AMX buffer type crashes (llama.cpp #20824)."""
    return "amx_tile" in cpu_flags()


@dataclass(frozen=True)
class GpuInfo:
    """One NVIDIA GPU as NVML reports it."""

    index: int
    name: str
    vram_total_bytes: int
    vram_free_bytes: int
    compute_capability: tuple[int, int]
    driver_version: str
    cuda_driver_version: int | None
    """CUDA version the driver supports, as NVML encodes it (13000 = 13.0)."""
    memory_bandwidth_bytes_s: float | None = None
    """Peak memory bandwidth from bus width x max memory clock (None when NVML does not say)."""

    @property
    def cuda_driver_version_str(self) -> str:
        """"13.0" style, or "unknown"."""
        v = self.cuda_driver_version
        return f"{v // 1000}.{(v % 1000) // 10}" if v else "unknown"


@dataclass(frozen=True)
class HardwareReport:
    """GPUs, RAM and CPU of this machine."""

    gpus: list[GpuInfo]
    gpu_error: str | None
    """Why no GPU is listed ("no NVIDIA GPU found: ..."), None when NVML worked."""
    ram_total_bytes: int
    ram_available_bytes: int
    cpu_cores_physical: int
    cpu_threads: int
    has_amx: bool
    cpu_flags: frozenset[str] = field(default_factory=frozenset, repr=False)

    @property
    def best_gpu(self) -> GpuInfo | None:
        """The GPU with the most total VRAM (llama.cpp's main device for one-GPU use)."""
        return max(self.gpus, key=lambda g: g.vram_total_bytes, default=None)


def _nvml() -> Any:
    """Initialised pynvml module. Raises ImportError or pynvml.NVMLError."""
    import pynvml

    with _nvml_lock:
        pynvml.nvmlInit()  # reference-counted by NVML; cheap after the first call
    return pynvml


@functools.cache
def _nvml_for_polling() -> Any:
    """pynvml after one successful init, or None; cached so a missing driver costs one try."""
    try:
        return _nvml()
    except Exception as exc:
        log.debug("NVML unavailable for memory polling: %s", exc)
        return None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _gpu(nv: Any, index: int, driver: str, cuda: int | None) -> GpuInfo:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    mem = nv.nvmlDeviceGetMemoryInfo(h)
    try:
        cc = tuple(int(x) for x in nv.nvmlDeviceGetCudaComputeCapability(h))
    except nv.NVMLError:
        cc = (0, 0)
    bandwidth = None
    try:
        bus_bits = nv.nvmlDeviceGetMemoryBusWidth(h)
        mem_mhz = nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)
        if bus_bits and mem_mhz:
            bandwidth = bus_bits / 8 * mem_mhz * 1e6 * 2  # double data rate
    except (nv.NVMLError, AttributeError):
        pass
    return GpuInfo(
        index=index, name=_text(nv.nvmlDeviceGetName(h)), vram_total_bytes=int(mem.total),
        vram_free_bytes=int(mem.free), compute_capability=(cc[0], cc[1]), driver_version=driver,
        cuda_driver_version=cuda, memory_bandwidth_bytes_s=bandwidth,
    )


def probe_gpus() -> tuple[list[GpuInfo], str | None]:
    """(GPUs, None) or ([], "no NVIDIA GPU found: <reason>")."""
    try:
        nv = _nvml()
    except ImportError as exc:
        return [], f"no NVIDIA GPU found: nvidia-ml-py is not installed ({exc})"
    except Exception as exc:  # pynvml.NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return [], f"no NVIDIA GPU found: {type(exc).__name__}: {exc} (is the NVIDIA driver installed?)"
    try:
        driver = _text(nv.nvmlSystemGetDriverVersion())
        try:
            cuda: int | None = int(nv.nvmlSystemGetCudaDriverVersion())
        except nv.NVMLError:
            cuda = None
        count = nv.nvmlDeviceGetCount()
        gpus = [_gpu(nv, i, driver, cuda) for i in range(count)]
    except nv.NVMLError as exc:
        return [], f"no NVIDIA GPU found: NVML failed while listing devices: {exc}"
    if not gpus:
        return [], "no NVIDIA GPU found: the driver reports 0 devices"
    return gpus, None


def probe() -> HardwareReport:
    """GPUs (NVML), RAM and cores (psutil), AMX. Never raises for a missing GPU."""
    import psutil

    gpus, error = probe_gpus()
    vm = psutil.virtual_memory()
    threads = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or threads
    return HardwareReport(
        gpus=gpus, gpu_error=error, ram_total_bytes=int(vm.total), ram_available_bytes=int(vm.available),
        cpu_cores_physical=int(physical), cpu_threads=int(threads), has_amx=cpu_has_amx(),
        cpu_flags=cpu_flags(),
    )


@dataclass(frozen=True)
class MemoryInUse:
    """This process's memory for the stats panel."""

    rss_bytes: int
    gpu_used_bytes: int | None
    """VRAM this process uses (all GPUs), or the device's used VRAM when per-process figures
    are unavailable; None without NVML."""
    gpu_total_bytes: int | None


def memory_in_use() -> MemoryInUse:
    """Process RSS and (if NVML works) GPU memory in use; cheap enough to poll twice a second."""
    import psutil

    rss = int(psutil.Process().memory_info().rss)
    nv = _nvml_for_polling()
    if nv is None:
        return MemoryInUse(rss, None, None)
    try:
        pid = os.getpid()
        used = total = 0
        own = 0
        found_own = False
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            used += int(mem.used)
            total += int(mem.total)
            try:
                for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                    if p.pid == pid and p.usedGpuMemory is not None:
                        own += int(p.usedGpuMemory)
                        found_own = True
            except nv.NVMLError:
                pass
        return MemoryInUse(rss, own if found_own else used, total)
    except nv.NVMLError as exc:
        log.debug("NVML memory query failed: %s", exc)
        return MemoryInUse(rss, None, None)
