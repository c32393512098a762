"""Acceptance backends: the rule of `reference.py`, run by NumPy, torch or a CUDA kernel.

`get_backend(name)` returns an object with `.name` and `.accept(...)` (signature of
`reference.accept_ref`). `LOCALSPEC_KERNEL` picks the default; `auto` may fall back (and
says so), a forced backend that cannot run raises KernelUnavailableError with the reason.
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

BACKEND_NAMES = ("auto", "reference")


class AcceptanceBackend(Protocol):
    """One implementation of the acceptance rule."""

    name: str

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
        return accept_ref(target_logits, draft_tokens, draft_logits, uniforms, params)


def get_backend(name: str | None = None) -> AcceptanceBackend:
    """The backend called `name` (default: `LOCALSPEC_KERNEL`, else auto)."""
    choice = (name or os.environ.get("LOCALSPEC_KERNEL") or "auto").lower()
    if choice in ("auto", "reference"):
        return ReferenceBackend()
    raise KernelUnavailableError(
        f"unknown acceptance backend {choice!r}; choose one of {', '.join(BACKEND_NAMES)}"
    )
