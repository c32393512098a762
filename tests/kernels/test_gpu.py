"""The device kernel against the reference on the same grid (needs an NVIDIA GPU + driver)."""

from __future__ import annotations

import pytest

from localspec.kernels.reference import accept_ref

from .cases import compare, grid, special_cases

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_backend() -> object:
    from localspec.kernels._cuda import CudaBackend, cuda_status

    reason = cuda_status()
    if reason is not None:
        pytest.skip(f"CUDA kernel unavailable: {reason}")
    return CudaBackend()


def test_cuda_kernel_matches_reference_on_the_grid(cuda_backend: object) -> None:
    n, justified, wrong = compare(grid(seed=0), cuda_backend.accept)  # type: ignore[attr-defined]
    assert n > 150
    assert not wrong, "\n".join(wrong)
    assert len(justified) <= n // 50, "\n".join(justified)


def test_cuda_kernel_special_cases(cuda_backend: object) -> None:
    n, justified, wrong = compare(special_cases(), cuda_backend.accept)  # type: ignore[attr-defined]
    assert n == 6 and not justified and not wrong


def test_cuda_kernel_equals_host_build(cuda_backend: object, host_kernel: object) -> None:
    """Integer sums make the device and host builds agree except where expf differs by ulps."""
    n = same = 0
    for case in grid(seed=4, large=False):
        n += 1
        same += case.run(cuda_backend.accept) == case.run(host_kernel.accept)  # type: ignore[attr-defined]
    assert same >= n - n // 50


def test_cuda_kernel_is_deterministic(cuda_backend: object) -> None:
    for case in list(grid(seed=5, large=False))[:40]:
        first = case.run(cuda_backend.accept)  # type: ignore[attr-defined]
        assert all(case.run(cuda_backend.accept) == first for _ in range(3))  # type: ignore[attr-defined]
        assert len(first.tokens) == first.num_accepted + 1
        assert case.run(accept_ref).num_accepted >= 0
