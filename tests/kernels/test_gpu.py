"""The device kernel (and torch on the GPU) against the reference (needs an NVIDIA GPU + driver).

Run by `scripts/gpu_check.sh` on a CUDA machine; everywhere else every test here skips
with the reason the kernel or torch cannot run.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from localspec.kernels.bench import step_inputs
from localspec.kernels.reference import accept_ref
from localspec.types import SamplingParams

from .cases import (REAL_VOCABS, SERVER_GAMMAS, Case, batch_items, batches, compare, compare_batch, grid, mixed_batch,
                    shape_grid, special_cases)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_backend() -> object:
    from localspec.kernels._cuda import CudaBackend, cuda_status

    reason = cuda_status()
    if reason is not None:
        pytest.skip(f"CUDA kernel unavailable: {reason}")
    return CudaBackend()


@pytest.fixture(scope="module")
def torch_cuda() -> object:
    from localspec.kernels._torch import TorchBackend, torch_status

    reason = torch_status("cuda")
    if reason is not None:
        pytest.skip(f"torch-cuda unavailable: {reason}")
    return TorchBackend("cuda")


def test_cuda_kernel_matches_reference_on_the_grid(cuda_backend: object) -> None:
    n, justified, wrong = compare(grid(seed=0), cuda_backend.accept)  # type: ignore[attr-defined]
    assert n > 150
    assert not wrong, "\n".join(wrong)
    assert len(justified) <= n // 50, "\n".join(justified)


def test_cuda_kernel_matches_reference_on_server_shapes(cuda_backend: object) -> None:
    """γ 1..32 on 32k..262k vocabularies: greedy exactly (no mismatch is ever justified for
    greedy), sampling with the same uniforms up to float32-fragile decisions."""
    n, justified, wrong = compare(shape_grid(), cuda_backend.accept)  # type: ignore[attr-defined]
    assert n == 3 * len(SERVER_GAMMAS) * len(REAL_VOCABS)
    assert not wrong, "\n".join(wrong)
    assert len(justified) <= n // 50, "\n".join(justified)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_cuda_kernel_on_the_bench_workload(cuda_backend: object, temperature: float) -> None:
    """What `localspec bench kernels` times (q == p, drafts = argmax) is computed right:
    every draft accepted, the bonus token the reference's."""
    target, drafts, q, uniforms = step_inputs(8, 151_936)
    case = Case(target, drafts, q, uniforms, SamplingParams(temperature=temperature), f"bench T={temperature}")
    n, justified, wrong = compare(iter([case]), cuda_backend.accept)  # type: ignore[attr-defined]
    assert n == 1 and not wrong, "\n".join(wrong)
    assert case.run(cuda_backend.accept).num_accepted == 8  # type: ignore[attr-defined]


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


def test_cuda_kernel_concurrent_callers(cuda_backend: object) -> None:
    """Several engines in one process share the kernel's device buffers (one lock): calls
    from 4 threads, with vocabularies that regrow the buffers, give the sequential results."""
    cases = [c for i, c in enumerate(grid(seed=6, large=True)) if i % 5 == 0]
    expected = [c.run(cuda_backend.accept) for c in cases]  # type: ignore[attr-defined]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda c: c.run(cuda_backend.accept), cases))  # type: ignore[attr-defined]
    assert len(cases) > 30 and got == expected


def test_torch_cuda_matches_reference_on_the_grid(torch_cuda: object) -> None:
    """The backend the fused kernel is benchmarked against computes the same rule on the GPU."""
    n, justified, wrong = compare(grid(seed=3), torch_cuda.accept)  # type: ignore[attr-defined]
    assert n > 150
    assert not wrong, "\n".join(wrong)
    assert len(justified) <= n // 50, "\n".join(justified)


def test_torch_cuda_matches_reference_on_server_shapes(torch_cuda: object) -> None:
    n, justified, wrong = compare(shape_grid(seed=12), torch_cuda.accept)  # type: ignore[attr-defined]
    assert n == 3 * len(SERVER_GAMMAS) * len(REAL_VOCABS)
    assert not wrong, "\n".join(wrong)
    assert len(justified) <= n // 50, "\n".join(justified)


# ----------------------------------------------------------- batches: one launch


def test_cuda_batch_equals_per_item_cuda_calls(cuda_backend: object) -> None:
    """Mixed batches (greedy and sampled, k 0..8, with and without q, three memory layouts),
    V 1000 / 32000 / 151936, sizes 1..8: the one-launch batch gives each item exactly the
    single call's result, and the reference's decisions up to float32-fragile ones."""
    n = 0
    justified_all: list[str] = []
    for cases in batches(seed=50, vocabs=(1000, 32_000, 151_936)):
        items = batch_items(cases)
        got = cuda_backend.accept_batch(items)  # type: ignore[attr-defined]
        assert got == [cuda_backend.accept(*i.args()) for i in items], cases[0].label  # type: ignore[attr-defined]
        count, justified, wrong = compare_batch(cases, got)
        assert not wrong, "\n".join(wrong)
        n += count
        justified_all += justified
    assert n == 3 * 36
    assert len(justified_all) <= n // 50, "\n".join(justified_all)


def test_cuda_batch_server_shapes(cuda_backend: object) -> None:
    """k up to 32 on real vocabularies, 8 sequences a batch, plus a 48-sequence batch."""
    import numpy as np

    rng = np.random.default_rng(51)
    for n_vocab in REAL_VOCABS:
        cases = mixed_batch(rng, 8, n_vocab, "views", max_k=32)
        items = batch_items(cases)
        assert cuda_backend.accept_batch(items) == [cuda_backend.accept(*i.args()) for i in items]  # type: ignore[attr-defined]
    cases = mixed_batch(rng, 48, 32_000, "separate", max_k=8)
    items = batch_items(cases)
    assert cuda_backend.accept_batch(items) == [cuda_backend.accept(*i.args()) for i in items]  # type: ignore[attr-defined]


def test_cuda_batch_equals_host_batch(cuda_backend: object, host_kernel: object) -> None:
    n = same = 0
    for cases in batches(seed=52, vocabs=(1000, 4099)):
        items = batch_items(cases)
        got = cuda_backend.accept_batch(items)  # type: ignore[attr-defined]
        want = host_kernel.accept_batch(items)  # type: ignore[attr-defined]
        n += len(items)
        same += sum(g == w for g, w in zip(got, want, strict=True))
    assert same >= n - n // 50


def test_cuda_batch_special_cases_and_empty(cuda_backend: object) -> None:
    assert cuda_backend.accept_batch([]) == []  # type: ignore[attr-defined]
    for case in special_cases():
        got = cuda_backend.accept_batch(batch_items([case, case, case]))  # type: ignore[attr-defined]
        assert got == [case.run(cuda_backend.accept)] * 3  # type: ignore[attr-defined]


def test_cuda_batch_deterministic_and_concurrent(cuda_backend: object) -> None:
    """Repeated batch calls give the same results; 4 threads mixing batch and single calls
    (sharing the device buffers and counters under one lock, vocabularies that regrow them)
    give the sequential results."""
    batch_list = list(batches(seed=53, vocabs=(1000, 32_000, 151_936), sizes=(1, 3, 8)))
    expected = [cuda_backend.accept_batch(batch_items(cases)) for cases in batch_list]  # type: ignore[attr-defined]
    for cases, want in zip(batch_list, expected, strict=True):
        assert cuda_backend.accept_batch(batch_items(cases)) == want  # type: ignore[attr-defined]
    singles = [c for cases in batch_list for c in cases]
    single_expected = [c.run(cuda_backend.accept) for c in singles]  # type: ignore[attr-defined]
    jobs = [("batch", i) for i in range(len(batch_list))] * 3 + [("single", i) for i in range(len(singles))]

    def run(job: tuple[str, int]) -> object:
        kind, i = job
        if kind == "batch":
            return cuda_backend.accept_batch(batch_items(batch_list[i]))  # type: ignore[attr-defined]
        return singles[i].run(cuda_backend.accept)  # type: ignore[attr-defined]

    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(run, jobs))
    want = [expected[i] if kind == "batch" else single_expected[i] for kind, i in jobs]
    assert got == want


def test_cuda_batch_bench_workload(cuda_backend: object) -> None:
    """What the batched bench times is computed right: every draft accepted in every item."""
    from localspec.kernels.bench import batch_inputs

    for temperature in (0.0, 0.8):
        items = batch_inputs(8, 4, 151_936, SamplingParams(temperature=temperature))
        got = cuda_backend.accept_batch(items)  # type: ignore[attr-defined]
        assert [r.num_accepted for r in got] == [4] * 8
        assert got == [cuda_backend.accept(*i.args()) for i in items]  # type: ignore[attr-defined]


def test_torch_cuda_batch_equals_per_item(torch_cuda: object) -> None:
    for cases in batches(seed=54, vocabs=(32_000,), sizes=(1, 4, 8)):
        items = batch_items(cases)
        assert torch_cuda.accept_batch(items) == [torch_cuda.accept(*i.args()) for i in items]  # type: ignore[attr-defined]
