"""What this machine has: NVIDIA GPUs (NVML), RAM and cores (psutil), CPU features."""

from __future__ import annotations

import functools
from pathlib import Path


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
