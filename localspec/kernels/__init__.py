"""Acceptance backends: the rule of `reference.py`, run by NumPy, torch or a CUDA kernel.

`get_backend(name)` returns an object with `.name` and `.accept(...)` (signature of
`reference.accept_ref`). `LOCALSPEC_KERNEL` picks the default; `auto` may fall back (and
says so, once), a forced backend that cannot run raises KernelUnavailableError with the
reason. `backend_status()` tells which backends can run here and why the others cannot.

Names: `reference` (NumPy float64), `torch` (torch-cuda when torch sees a GPU, else
torch-cpu), `torch-cpu`, `torch-cuda`, `cuda` (the fused kernel in `cuda/`), `auto`.

Batches: `.accept_batch(items)` takes one `AcceptItem` per sequence (a continuous-batching
step verifies several sequences in one target call) and returns their results in order;
result i is exactly what `.accept(*items[i].args())` returns on the same backend. Items may
differ in k, in sampling parameters (greedy and sampled mixed) and in having draft logits,
but share the vocabulary size V. A malformed item raises ValueError naming its index
("item 2: ..."); an empty batch returns []. `reference` and `torch-*` loop over the items;
`cuda` packs every item's rows into one buffer and runs all of them in ONE kernel launch
(`lsk_accept_batch` in `cuda/accept.cu`, the same per-row device code as the single call);
`auto` times its candidates' `accept_batch` once per batch class (see `_auto.py`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from localspec.errors import KernelUnavailableError
from localspec.kernels.reference import accept_ref
from localspec.types import AcceptResult, SamplingParams

log = logging.getLogger(__name__)

BACKEND_NAMES = ("auto", "reference", "torch", "torch-cpu", "torch-cuda", "cuda")
_STATUS_ORDER = ("reference", "torch-cpu", "torch-cuda", "cuda")
_logged_fallbacks: set[str] = set()


@dataclass(frozen=True, eq=False)
class AcceptItem:
    """One sequence's inputs to the acceptance rule, for `accept_batch` (shapes as `accept`).

    eq=False: the fields are arrays, whose `==` is elementwise; compare `args()` instead.
    """

    target_logits: npt.ArrayLike
    """[k+1, V] target logits for rows [last, d_1..d_k]."""
    draft_tokens: npt.ArrayLike
    """[k] int, the drafts (k may be 0)."""
    draft_logits: npt.ArrayLike | None
    """[k, V] drafter logits, or None (drafts without q, e.g. n-gram)."""
    uniforms: npt.ArrayLike
    """[k+1] in [0, 1) (ignored when greedy)."""
    params: SamplingParams

    def args(self) -> tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike | None, npt.ArrayLike, SamplingParams]:
        """The positional arguments of `accept` for this item."""
        return self.target_logits, self.draft_tokens, self.draft_logits, self.uniforms, self.params


def batch_vocab(items: Sequence[AcceptItem]) -> int:
    """V shared by every item (checks the last axis of each target_logits).

    Raises ValueError naming the first item whose target_logits is not 2-D or whose V
    differs from item 0's. Call with a non-empty batch.
    """
    n_vocab = -1
    for index, item in enumerate(items):
        shape = np.shape(item.target_logits)
        if len(shape) != 2:
            raise ValueError(f"item {index}: target_logits must be [k+1, V], got shape {shape}")
        if index == 0:
            n_vocab = int(shape[1])
        elif shape[1] != n_vocab:
            raise ValueError(f"item {index}: target_logits has V = {shape[1]}, item 0 has V = {n_vocab}; "
                             "a batch shares one vocabulary")
    return n_vocab


def accept_each(accept: Callable[..., AcceptResult], items: Sequence[AcceptItem]) -> list[AcceptResult]:
    """`accept_batch` as a loop of `accept` calls: checks the shared V first, and prefixes
    any ValueError with the index of the item that raised it."""
    if not items:
        return []
    batch_vocab(items)
    results: list[AcceptResult] = []
    for index, item in enumerate(items):
        try:
            results.append(accept(*item.args()))
        except ValueError as exc:
            raise ValueError(f"item {index}: {exc}") from exc
    return results


class AcceptanceBackend(Protocol):
    """One implementation of the acceptance rule."""

    @property
    def name(self) -> str:
        """What runs ('reference', 'torch-cpu', 'cuda', 'auto:torch-cpu'), shown in stats."""
        ...

    def accept(
        self,
        target_logits: npt.ArrayLike,
        draft_tokens: npt.ArrayLike,
        draft_logits: npt.ArrayLike | None,
        uniforms: npt.ArrayLike,
        params: SamplingParams,
    ) -> AcceptResult:
        """target_logits [k+1, V], draft_tokens [k], draft_logits [k, V] | None, uniforms [k+1]."""
        ...

    def accept_batch(self, items: Sequence[AcceptItem]) -> list[AcceptResult]:
        """One result per item, in order; result i == `accept(*items[i].args())` on this backend.

        Items share V; a malformed item raises ValueError naming its index; [] -> [].
        """
        ...


class ReferenceBackend:
    """The NumPy specification itself."""

    name = "reference"

    def accept(
        self,
        target_logits: npt.ArrayLike,
        draft_tokens: npt.ArrayLike,
        draft_logits: npt.ArrayLike | None,
        uniforms: npt.ArrayLike,
        params: SamplingParams,
    ) -> AcceptResult:
        """Shapes as `reference.accept_ref`."""
        return accept_ref(target_logits, draft_tokens, draft_logits, uniforms, params)

    def accept_batch(self, items: Sequence[AcceptItem]) -> list[AcceptResult]:
        """`accept_ref` per item (a loop)."""
        return accept_each(accept_ref, items)


def backend_status(include_cuda: bool = True) -> dict[str, str | None]:
    """Each concrete backend -> None if it can run here, else the reason it cannot.

    Asking about `cuda` builds the kernel with nvcc the first time in a process (seconds,
    then cached on disk); `include_cuda=False` skips it.
    """
    from localspec.kernels._torch import torch_status

    status: dict[str, str | None] = {
        "reference": None,
        "torch-cpu": torch_status("cpu"),
        "torch-cuda": torch_status("cuda"),
    }
    if include_cuda:
        from localspec.kernels._cuda import cuda_status

        status["cuda"] = cuda_status()
    return status


def _make(name: str) -> AcceptanceBackend:
    """Construct one concrete backend; raises KernelUnavailableError with the reason."""
    if name == "reference":
        return ReferenceBackend()
    if name in ("torch", "torch-cpu", "torch-cuda"):
        from localspec.kernels._torch import TorchBackend, torch_status

        if name == "torch":
            name = "torch-cuda" if torch_status("cuda") is None else "torch-cpu"
        return TorchBackend(name.removeprefix("torch-"))
    if name == "cuda":
        from localspec.kernels._cuda import CudaBackend

        return CudaBackend()
    raise KernelUnavailableError(
        f"unknown acceptance backend {name!r}; choose one of {', '.join(BACKEND_NAMES)} "
        "(LOCALSPEC_KERNEL or --kernel)"
    )


def _make_auto() -> AcceptanceBackend:
    from localspec.kernels._auto import AutoBackend

    candidates: list[AcceptanceBackend] = []
    unavailable: dict[str, str] = {}
    for name, reason in backend_status().items():
        if reason is None:
            try:
                candidates.append(_make(name))
                continue
            except KernelUnavailableError as exc:
                reason = str(exc)
        unavailable[name] = reason
        if name not in _logged_fallbacks:
            _logged_fallbacks.add(name)
            log.info("acceptance backend %s unavailable, auto falls back: %s", name, reason)
    return AutoBackend(candidates, unavailable)


def get_backend(name: str | None = None) -> AcceptanceBackend:
    """The backend called `name` (default: `LOCALSPEC_KERNEL`, else auto).

    A forced name that cannot run raises KernelUnavailableError saying why; only `auto`
    falls back.
    """
    choice = (name or os.environ.get("LOCALSPEC_KERNEL") or "auto").strip().lower()
    if choice == "auto":
        return _make_auto()
    return _make(choice)
