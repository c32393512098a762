"""`localspec recommend`: which (target, drafter, quants) to run on this machine and how fast
they should be, from the catalog, the hardware probe and the theory in localspec.theory."""

from __future__ import annotations

from localspec.recommend.fit import Budget, Placement, budget_from, place
from localspec.recommend.ranking import (
    TASK_PRIORS,
    AlphaPrior,
    Calibration,
    Recommendation,
    compatible_drafters,
    pair_alpha,
    recommend,
)

__all__ = [
    "TASK_PRIORS", "AlphaPrior", "Budget", "Calibration", "Placement", "Recommendation", "budget_from",
    "compatible_drafters", "pair_alpha", "place", "recommend",
]
