"""The torch backend against the reference (float32 vs float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from localspec.kernels._torch import TorchBackend, processed_probs
from localspec.kernels.reference import probs_from_logits
from localspec.types import AcceptResult, SamplingParams, TokenSource

from .cases import PARAMS, compare, float32_probs, grid, special_cases


@pytest.fixture(scope="module")
def torch_cpu() -> TorchBackend:
    return TorchBackend("cpu")


def test_torch_backend_matches_reference_on_the_grid(torch_cpu: TorchBackend) -> None:
    n, justified, wrong = compare(grid(seed=2), torch_cpu.accept)
    assert n > 150
    assert not wrong, "\n".join(wrong)
    assert len(justified) <= n // 50, "\n".join(justified)


def test_torch_backend_special_cases(torch_cpu: TorchBackend) -> None:
    n, justified, wrong = compare(special_cases(), torch_cpu.accept)
    assert n == 6 and not justified and not wrong


def test_torch_backend_greedy_tie_takes_lowest_index(torch_cpu: TorchBackend) -> None:
    logits = np.zeros((3, 4099), dtype=np.float32)
    logits[:, [1000, 3000, 4000]] = 7.0
    result = torch_cpu.accept(logits, [1000, 1000], None, [0.5] * 3, SamplingParams(0.0))
    assert result == AcceptResult((1000, 1000, 1000), 2, TokenSource.BONUS)


def test_torch_backend_name_and_zero_copy_input(torch_cpu: TorchBackend) -> None:
    assert torch_cpu.name == "torch-cpu"
    logits = np.ones((1, 16), dtype=np.float32)
    # a float32 C-contiguous array is viewed, not copied: torch sees writes to the buffer
    view = torch.from_numpy(np.ascontiguousarray(logits, dtype=np.float32))
    logits[0, 3] = 9.0
    assert float(view[0, 3]) == 9.0
    assert torch_cpu.accept(logits, [], None, [0.0], SamplingParams(0.0)).tokens == (3,)


@pytest.mark.parametrize("params", [p for p in PARAMS if not p.greedy], ids=str)
def test_torch_probabilities_within_float32_error(params: SamplingParams) -> None:
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((3, 49_152)) * 3).astype(np.float32)
    ref = probs_from_logits(logits, params)
    got = processed_probs(torch.from_numpy(logits), params).double().numpy()
    np.testing.assert_array_equal(got > 0, ref > 0)
    err32 = np.abs(float32_probs(logits, params) - ref).max()
    err = np.abs(got - ref).max()
    assert err <= 2 * err32 + 4 * 2.0**-24 * ref.max(), (err, err32)


def test_torch_cuda_unavailable_without_a_gpu() -> None:
    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    from localspec.errors import KernelUnavailableError

    with pytest.raises(KernelUnavailableError, match="sees no CUDA device"):
        TorchBackend("cuda")
