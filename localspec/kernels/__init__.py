"""Acceptance backends: the rule of `reference.py`, run by NumPy, torch or a CUDA kernel.

`get_backend(name)` returns an object with `.name` and `.accept(...)` (signature of
`reference.accept_ref`). `LOCALSPEC_KERNEL` picks the default; `auto` may fall back (and
says so, once), a forced backend that cannot run raises KernelUnavailableError with the
reason. `backend_status()` tells which backends can run here and why the others cannot.

Names: `reference` (NumPy float64), `torch` (torch-cuda when torch sees a GPU, else
torch-cpu), `torch-cpu`, `torch-cuda`, `cuda` (the fused kernel in `cuda/`), `auto`.
"""

from __future__ import annotations

import logging
import os
from typing import Protocol

import numpy.typing as npt

from localspec.errors import KernelUnavailableError
from localspec.kernels.reference import accept_ref
from localspec.types import AcceptResult, SamplingParams

log = logging.getLogger(__name__)

BACKEND_NAMES = ("auto", "reference", "torch", "torch-cpu", "torch-cuda", "cuda")
_STATUS_ORDER = ("reference", "torch-cpu", "torch-cuda", "cuda")
_logged_fallbacks: set[str] = set()


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
