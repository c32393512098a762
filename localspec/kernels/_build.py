"""Building the acceptance kernel from `cuda/` at first use, cached by source + compiler + arch.

The sources come from `localspec.paths.packaged("cuda")` (the repo's `cuda/` or the wheel's
`localspec/_data/cuda`) and are compiled in place by their real path, so compiler errors
name the `.cu`/`.cuh` file and line. Results live under `cache_dir()/kernels/<key>/`.
No ctypes here: `_cuda.py` loads what this module builds.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from importlib import resources
from pathlib import Path

from localspec.errors import KernelUnavailableError
from localspec.paths import cache_dir, packaged

log = logging.getLogger(__name__)

DEVICE_SOURCE = "accept.cu"
HOST_SOURCE = "accept_host.cu"
DEVICE_LIBRARY = "liblocalspec_accept.so"
HOST_LIBRARY = "liblocalspec_accept_host.so"
TEST_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_120")
"""Architectures the compile test covers (nvcc 13 dropped everything before Turing)."""

_NVCC_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC")
_HOST_FLAGS = ("-O2", "-std=c++17", "-shared", "-fPIC", "-x", "c++")


class KernelBuildError(KernelUnavailableError):
    """The compiler rejected the kernel sources; the message carries its output."""


def find_nvcc() -> str | None:
    """Path of nvcc: `LOCALSPEC_NVCC`, `$CUDA_HOME/bin/nvcc`, PATH, /usr/local/cuda; None if absent."""
    candidates = [os.environ.get("LOCALSPEC_NVCC")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(str(Path(os.environ[var]) / "bin" / "nvcc"))
    candidates += [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    for cand in candidates:
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def find_host_compiler() -> str | None:
    """A C++ compiler for the host build (`CXX`, then c++, g++, clang++)."""
    for cand in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        path = shutil.which(cand) if cand else None
        if path:
            return path
    return None


@functools.cache
def tool_version(tool: str) -> str:
    """First informative line of `tool --version` (nvcc: 'release 13.0, V13.0.88')."""
    try:
        text = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    match = re.search(r"release [^\n]+", text)
    if match:
        return match.group(0).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[0].strip() if lines else "unknown"


def nvcc_release(version: str) -> tuple[int, int] | None:
    """(major, minor) from `tool_version(nvcc)`."""
    match = re.search(r"release (\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def source_digest() -> str:
    """sha256 over every file in the packaged `cuda/` folder (names and bytes)."""
    h = hashlib.sha256()
    folder = packaged("cuda")
    for node in sorted(folder.iterdir(), key=lambda n: n.name):
        if node.is_file() and node.name.endswith((".cu", ".cuh")):
            h.update(node.name.encode() + b"\0" + node.read_bytes() + b"\0")
    return h.hexdigest()


def target_arch() -> str:
    """`sm_XY` of GPU 0 from `localspec.hardware.probe()` (NVML) when it reports one,
    else `native` (nvcc asks the driver; without a GPU it warns and uses its default)."""
    try:
        from localspec import hardware

        probe = getattr(hardware, "probe", None)
        if probe is None:
            return "native"
        info = probe()
        gpus = getattr(info, "gpus", None)
        if gpus is None and isinstance(info, dict):
            gpus = info.get("gpus")
        for gpu in gpus or ():
            cc = gpu.get("compute_capability") if isinstance(gpu, dict) else getattr(gpu, "compute_capability", None)
            if isinstance(cc, str) and re.fullmatch(r"\d+\.\d+", cc):
                major, minor = cc.split(".")
                return f"sm_{major}{minor}"
            if isinstance(cc, (tuple, list)) and len(cc) == 2 and int(cc[0]) > 0:
                return f"sm_{int(cc[0])}{int(cc[1])}"
    except Exception as exc:  # a broken probe must not stop the kernel
        log.debug("hardware probe gave no compute capability: %s", exc)
    return "native"


def arch_flags(arch: str) -> list[str]:
    """nvcc flags for one arch: SASS plus PTX (so a newer GPU can JIT it)."""
    if arch == "native":
        return ["-arch=native"]
    num = arch.removeprefix("sm_")
    return ["-gencode", f"arch=compute_{num},code=[sm_{num},compute_{num}]"]


def _run_compiler(cmd: list[str], what: str) -> None:
    log.info("building %s: %s", what, " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelBuildError(f"could not run the compiler for {what}: {exc}") from exc
    if proc.returncode != 0:
        output = (proc.stderr + proc.stdout).strip()
        raise KernelBuildError(
            f"compiling {what} failed (exit {proc.returncode}):\n{output[-4000:]}\n"
            "Check the CUDA toolkit install (nvcc --version), or use LOCALSPEC_KERNEL=torch."
        )
    for line in proc.stderr.splitlines():
        if line.strip():
            log.debug("%s: %s", what, line)


def _build_cached(key_parts: list[str], library: str, build: Callable[[Path, Path], None]) -> Path:
    key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:20]
    out_dir = cache_dir() / "kernels" / key
    target = out_dir / library
    if target.is_file():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        src_dir = stack.enter_context(resources.as_file(packaged("cuda")))
        fd, tmp = tempfile.mkstemp(prefix=library + ".", suffix=".tmp", dir=out_dir)
        os.close(fd)
        try:
            build(Path(src_dir), Path(tmp))
            os.replace(tmp, target)  # atomic: a concurrent builder never sees half a file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return target


def build_device_library(arch: str | None = None) -> Path:
    """The kernel `.so` for `arch` (default `target_arch()`), built with nvcc if not cached.

    Raises KernelUnavailableError when nvcc is missing, KernelBuildError on a compile error.
    """
    nvcc = find_nvcc()
    if nvcc is None:
        raise KernelUnavailableError(
            "nvcc not found (looked at LOCALSPEC_NVCC, CUDA_HOME, PATH, /usr/local/cuda): install the "
            "CUDA toolkit to build the acceptance kernel, or use LOCALSPEC_KERNEL=torch"
        )
    arch = arch or target_arch()
    flags = [*_NVCC_FLAGS, *arch_flags(arch)]

    def build(src_dir: Path, out: Path) -> None:
        _run_compiler([nvcc, *flags, str(src_dir / DEVICE_SOURCE), "-o", str(out)], f"{DEVICE_SOURCE} for {arch}")

    return _build_cached(["device", source_digest(), tool_version(nvcc), arch, *flags], DEVICE_LIBRARY, build)


def build_host_library() -> Path:
    """The host build of the kernel math (`accept_host.cu` as C++), built if not cached."""
    cxx = find_host_compiler()
    if cxx is None:
        raise KernelUnavailableError("no C++ compiler (c++, g++, clang++) found for the host build of the kernel")

    def build(src_dir: Path, out: Path) -> None:
        _run_compiler([cxx, *_HOST_FLAGS, str(src_dir / HOST_SOURCE), "-o", str(out)], HOST_SOURCE)

    return _build_cached(["host", source_digest(), tool_version(cxx), *_HOST_FLAGS], HOST_LIBRARY, build)


def compile_check(archs: tuple[str, ...] = TEST_ARCHS, out_dir: Path | None = None) -> int:
    """Compile the device sources for every arch in one multi-arch `-shared` build (the
    test that the kernel builds everywhere). Not cached; the library is written to
    `out_dir` if given (else a temporary folder). Returns the library's size in bytes."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise KernelUnavailableError("nvcc not found: cannot compile-check cuda/")
    gencodes = [flag for arch in archs for flag in arch_flags(arch)]
    with ExitStack() as stack:
        src_dir = Path(stack.enter_context(resources.as_file(packaged("cuda"))))
        out_dir = out_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        out = out_dir / DEVICE_LIBRARY
        threads = ["--threads", str(min(len(archs), os.cpu_count() or 1))]
        _run_compiler([nvcc, *_NVCC_FLAGS, *threads, *gencodes, str(src_dir / DEVICE_SOURCE), "-o", str(out)],
                      f"{DEVICE_SOURCE} for {', '.join(archs)}")
        return out.stat().st_size
