"""`accept_batch`: one call for several sequences equals one `accept` call per sequence.

The contract (kernels/__init__.py): result i of `accept_batch(items)` is exactly what
`accept(*items[i].args())` returns on the same backend; an empty batch gives []; a bad item
raises ValueError naming its index. The CUDA kernel's batch runs in tests/kernels/test_gpu.py;
its host build (same layout and row code) in test_host_kernel.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pytest

import localspec.kernels as kernels
from localspec.kernels import AcceptItem, accept_each, batch_vocab
from localspec.kernels._auto import AutoBackend
from localspec.kernels.reference import accept_ref
from localspec.types import AcceptResult, SamplingParams

from .cases import BATCH_LAYOUTS, batch_items, batches, compare_batch, make_case, mixed_batch


@pytest.fixture(scope="module", params=["reference", "torch-cpu"])
def backend(request: pytest.FixtureRequest) -> object:
    return kernels.get_backend(request.param)


def _per_item(backend: object, items: Sequence[AcceptItem]) -> list[AcceptResult]:
    return [backend.accept(*item.args()) for item in items]  # type: ignore[attr-defined]


def test_batch_equals_per_item_calls(backend: object) -> None:
    """Mixed batches (greedy and sampled, k 0..8, with and without q, V 1000 and 32000,
    sizes 1..8, three memory layouts)."""
    n = 0
    for cases in batches(seed=30):
        items = batch_items(cases)
        assert backend.accept_batch(items) == _per_item(backend, items)  # type: ignore[attr-defined]
        n += len(items)
    assert n == 2 * sum(range(1, 9))


def test_batch_results_match_the_reference(backend: object) -> None:
    for cases in batches(seed=31, vocabs=(1000,)):
        n, justified, wrong = compare_batch(cases, backend.accept_batch(batch_items(cases)))  # type: ignore[attr-defined]
        assert not wrong, "\n".join(wrong)
        assert len(justified) <= max(1, n // 50)


def test_empty_batch(backend: object) -> None:
    assert backend.accept_batch([]) == []  # type: ignore[attr-defined]
    assert backend.accept_batch(()) == []  # type: ignore[attr-defined]


def _bad_batches() -> list[tuple[str, int, list[AcceptItem], str]]:
    """(what, index of the bad item, items, message fragment)."""
    rng = np.random.default_rng(32)

    def good() -> list[AcceptItem]:
        return batch_items([make_case(rng, 3, 50, SamplingParams(0.8), True), make_case(rng, 2, 50, SamplingParams(0.0), False),
                            make_case(rng, 1, 50, SamplingParams(0.7, top_p=0.9), False)])

    out = []
    items = good()
    it = items[1]
    items[1] = AcceptItem(np.asarray(it.target_logits)[:2], it.draft_tokens, it.draft_logits, it.uniforms, it.params)
    out.append(("target rows != k+1", 1, items, "target_logits must be [k+1, V]"))
    items = good()
    it = items[0]
    items[0] = AcceptItem(it.target_logits, it.draft_tokens, np.asarray(it.draft_logits)[:, :49], it.uniforms, it.params)
    out.append(("draft logits V", 0, items, "draft_logits must be [k, V]"))
    items = good()
    it = items[2]
    items[2] = AcceptItem(it.target_logits, it.draft_tokens, None, np.zeros(5), it.params)
    out.append(("uniforms length", 2, items, "uniforms must be [k+1]"))
    items = good()
    it = items[2]
    items[2] = AcceptItem(it.target_logits, [50], None, it.uniforms, it.params)
    out.append(("draft id out of range", 2, items, "draft token ids must be in [0, 50)"))
    items = good()
    it = items[1]
    items[1] = AcceptItem(np.zeros((3, 40), dtype=np.float32), it.draft_tokens, None, it.uniforms, it.params)
    out.append(("another V", 1, items, "a batch shares one vocabulary"))
    items = good()
    items[2] = AcceptItem(np.zeros(50, dtype=np.float32), [], None, [0.5], SamplingParams(0.8))
    out.append(("1-D target", 2, items, "target_logits must be [k+1, V]"))
    return out


@pytest.mark.parametrize("what,index,items,fragment", _bad_batches(), ids=lambda x: x if isinstance(x, str) else "")
def test_bad_item_raises_with_its_index(backend: object, what: str, index: int, items: list[AcceptItem],
                                        fragment: str) -> None:
    with pytest.raises(ValueError, match=rf"^item {index}: .*") as info:
        backend.accept_batch(items)  # type: ignore[attr-defined]
    assert fragment in str(info.value), (what, str(info.value))


def test_batch_vocab_and_accept_each() -> None:
    cases = mixed_batch(np.random.default_rng(33), 3, 77)
    items = batch_items(cases)
    assert batch_vocab(items) == 77
    assert accept_each(accept_ref, items) == [c.run(accept_ref) for c in cases]
    assert accept_each(accept_ref, []) == []


def test_accept_item_args_round_trip() -> None:
    case = make_case(np.random.default_rng(34), 2, 30, SamplingParams(0.8), True)
    item = AcceptItem(case.target, case.drafts, case.q, case.uniforms, case.params)
    assert item.args() == (case.target, case.drafts, case.q, case.uniforms, case.params)
    with pytest.raises(AttributeError):
        item.params = SamplingParams(0.0)  # type: ignore[misc]


class FakeBatchBackend:
    """The reference behind a delay per call; counts single and batch calls."""

    def __init__(self, name: str, delay_s: float) -> None:
        self.name = name
        self.delay_s = delay_s
        self.calls = 0
        self.batch_calls = 0

    def accept(self, *args: object) -> AcceptResult:
        self.calls += 1
        time.sleep(self.delay_s)
        return accept_ref(*args)  # type: ignore[arg-type]

    def accept_batch(self, items: Sequence[AcceptItem]) -> list[AcceptResult]:
        self.batch_calls += 1
        time.sleep(self.delay_s)
        return accept_each(accept_ref, items)


def test_auto_times_batches_per_batch_class() -> None:
    slow, fast = FakeBatchBackend("slow", 0.003), FakeBatchBackend("fast", 0.0)
    auto = AutoBackend([slow, fast])  # type: ignore[list-item]
    rng = np.random.default_rng(35)
    cases = mixed_batch(rng, 4, 60)
    items = batch_items(cases)
    assert auto.accept_batch(items) == [c.run(accept_ref) for c in cases]
    assert auto.name == "auto:fast"
    greedy_all = all(c.params.greedy for c in cases)
    assert auto.batch_choices[(4, 60, greedy_all)].backend == "fast"
    assert not auto.choices, "a batch does not choose for single steps"
    slow_calls = slow.batch_calls
    for _ in range(3):
        other = batch_items(mixed_batch(rng, 4, 60))  # other k and params: same class unless all greedy
        if all(i.params.greedy for i in other) == greedy_all:
            auto.accept_batch(other)
    assert slow.batch_calls == slow_calls, "timing happens once per batch class"
    assert fast.calls == slow.calls == 0, "batches go to accept_batch, not a loop of accept"
    auto.accept_batch(batch_items(mixed_batch(rng, 2, 60)))  # another size: timed again
    assert slow.batch_calls > slow_calls and len(auto.batch_choices) == 2
    assert auto.accept_batch([]) == []
    with pytest.raises(ValueError, match="^item 1: .*a batch shares one vocabulary"):
        auto.accept_batch([items[0], AcceptItem(np.zeros((1, 5)), [], None, [0.1], SamplingParams(0.8))])


def test_auto_batch_on_the_real_candidates() -> None:
    auto = kernels.get_backend("auto")
    cases = mixed_batch(np.random.default_rng(36), 5, 4099, "views")
    items = batch_items(cases)
    got = auto.accept_batch(items)
    chosen = auto.name.removeprefix("auto:")
    assert chosen in {b.name for b in auto.candidates}  # type: ignore[attr-defined]
    # the contract on the backend that ran
    by_name = {b.name: b for b in auto.candidates}  # type: ignore[attr-defined]
    assert got == _per_item(by_name[chosen], items)


def test_layouts_are_all_exercised() -> None:
    assert BATCH_LAYOUTS == ("separate", "views", "strided")
    cases = mixed_batch(np.random.default_rng(37), 3, 20, "views")
    base = cases[0].target.base
    assert base is not None and all(c.target.base is base for c in cases)
    strided = mixed_batch(np.random.default_rng(37), 2, 20, "strided")
    assert not strided[0].target.flags.c_contiguous and strided[0].target.dtype == np.float64
