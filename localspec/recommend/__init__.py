"""`localspec recommend`: which (target, drafter, quants) to run on this machine (or on a named
GPU) and how fast they should be, from the catalog, the hardware probe or the GPU table, and
the theory in localspec.theory; drafters localspec cannot run yet are predicted and shown apart."""

from __future__ import annotations

from localspec.recommend.fit import Budget, Placement, RpcWorker, budget_from, place, rpc_layers
from localspec.recommend.predict import SpeedPrediction, option_for, predict
from localspec.recommend.priors import alpha_from_acceptance, kind_alpha
from localspec.recommend.ranking import (
    TASK_PRIORS,
    AlphaPrior,
    Calibration,
    Recommendation,
    compatible_drafters,
    other_drafters,
    pair_alpha,
    recommend,
    without_runnable_drafter,
)

__all__ = [
    "TASK_PRIORS", "AlphaPrior", "Budget", "Calibration", "Placement", "Recommendation", "RpcWorker", "SpeedPrediction",
    "alpha_from_acceptance", "budget_from", "compatible_drafters", "kind_alpha", "option_for", "other_drafters",
    "pair_alpha", "place", "predict", "recommend", "rpc_layers", "without_runnable_drafter",
]
