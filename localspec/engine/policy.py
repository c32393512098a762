"""How much to speculate: which drafter and how many draft tokens, chosen before each step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from localspec.engine.drafters import Drafter


class DraftPolicy(Protocol):
    """Chooses (drafter, γ) for the next step and learns from what happened."""

    name: str
    drafters: list[Drafter]
    """Every drafter this policy may use (they follow the context)."""

    def bind(self, context: Sequence[int]) -> None:
        """The committed context (a list the loop extends in place), for policies that read it."""
        ...

    def choose(self, k_cap: int, *, batch_rows: int = 0, batch_tokens: float = 0.0) -> tuple[Drafter, int]:
        """The drafter and draft length (<= k_cap) for the next step; `batch_rows` and
        `batch_tokens`: the other sequences' rows and expected tokens in the same verify."""
        ...

    def observe(
        self, drafter: str, k: int, num_accepted: int, t_draft_s: float, t_verify_s: float, *,
        batch_rows: int | None = None, batch: int = 1,
    ) -> None:
        """The step's outcome and costs (`batch_rows`: the verify call's rows when it held
        other sequences too; 0 when another sequence reports that call's cost; `batch`: the
        sequences verified in that call)."""
        ...

    def observe_overhead(self, seconds: float) -> None:
        """Per-step time outside draft and verify."""
        ...


class FixedPolicy:
    """Always the same drafter and γ (capped by the context and the token budget)."""

    def __init__(self, drafter: Drafter, gamma: int) -> None:
        self.drafter = drafter
        self.gamma = gamma
        self.drafters = [drafter]
        self.name = f"{drafter.name}" if drafter.name == "none" else f"{drafter.name}(γ={gamma})"

    def bind(self, context: Sequence[int]) -> None:
        """A fixed policy reads nothing."""

    def observe_overhead(self, seconds: float) -> None:
        """A fixed policy learns nothing."""

    def choose(self, k_cap: int, *, batch_rows: int = 0, batch_tokens: float = 0.0) -> tuple[Drafter, int]:
        """(drafter, min(γ, k_cap)), whatever the batch."""
        return self.drafter, max(0, min(self.gamma, k_cap))

    def observe(
        self, drafter: str, k: int, num_accepted: int, t_draft_s: float, t_verify_s: float, *,
        batch_rows: int | None = None, batch: int = 1,
    ) -> None:
        """A fixed policy learns nothing."""
