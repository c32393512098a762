"""Kernel tests build into a private cache folder, so they never read or leave a stale
library in the user's cache; no GPU library is imported here (skip, don't crash)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def kernel_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """LOCALSPEC_CACHE_DIR for the whole kernel test session."""
    from localspec.kernels._cuda import reset_probe

    path = tmp_path_factory.mktemp("localspec-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCALSPEC_CACHE_DIR", str(path))
        mp.delenv("LOCALSPEC_KERNEL", raising=False)
        reset_probe()
        yield path
    reset_probe()


@pytest.fixture(scope="session")
def host_kernel(kernel_cache_dir: Path) -> object:
    """The kernel math compiled for the CPU (`cuda/accept_host.cu`)."""
    from localspec.kernels._build import find_host_compiler
    from localspec.kernels._cuda import HostKernel

    if find_host_compiler() is None:
        pytest.skip("no C++ compiler for the host build of the kernel")
    return HostKernel()
