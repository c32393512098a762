"""Adaptive speculation (see the drafting-policy issue): placeholder choosing the model
drafter when loaded, else prompt lookup, at the requested γ."""

from __future__ import annotations

from localspec.engine.drafting import Drafter, ModelDrafter
from localspec.engine.ngram import PromptLookupDrafter
from localspec.types import SamplingParams


class AdaptivePolicy:
    """Chooses drafter and γ per step."""

    def __init__(
        self, model: ModelDrafter | None, ngram: PromptLookupDrafter, gamma: int, params: SamplingParams
    ) -> None:
        self.model, self.ngram, self.gamma = model, ngram, gamma
        self.drafters: list[Drafter] = [d for d in (model, ngram) if d is not None]
        self.name = "adaptive"

    def choose(self, k_cap: int) -> tuple[Drafter, int]:
        """Model drafter if loaded, else n-gram; γ capped."""
        d: Drafter = self.model if self.model is not None else self.ngram
        return d, max(0, min(self.gamma, k_cap))

    def observe(self, drafter: str, k: int, num_accepted: int, t_draft_s: float, t_verify_s: float) -> None:
        """Not yet learning."""
