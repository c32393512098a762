"""Acceptance priors: α, the probability that the target accepts one draft token, per task and
per kind of drafter, with where each figure comes from. `recommend --measure` replaces them
with a measured α (Calibration)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from localspec.catalog import CatalogModel


@dataclass(frozen=True)
class AlphaPrior:
    """Per-token acceptance probability prior for a task, with where it comes from."""

    alpha: float
    source: str


TASK_PRIORS: dict[str, AlphaPrior] = {
    "code": AlphaPrior(0.80, "measured on localspec's offline pair: Qwen2.5-Coder-0.5B agreed with the 1.5B's "
                             "top-1 token on 78–86% of code positions"),
    "math": AlphaPrior(0.74, "estimated: Spec-Bench (Xia et al. 2024) math accepts between code and chat"),
    "rag": AlphaPrior(0.72, "estimated: answers copy the retrieved text (Spec-Bench RAG category)"),
    "summarize": AlphaPrior(0.70, "estimated: summaries copy spans of their input (Spec-Bench summarization)"),
    "reasoning": AlphaPrior(0.66, "estimated: long chains of thought, between math and chat"),
    "chat": AlphaPrior(0.62, "estimated: Leviathan et al. 2023 report α 0.5–0.8; open chat sits low (Spec-Bench MT-bench)"),
    "translate": AlphaPrior(0.55, "estimated: Spec-Bench translation accepts least"),
}
CROSS_FAMILY_PENALTY = 0.08
"""Drafter from another family with the same tokenizer (e.g. Qwen2.5 for Qwen2.5-Coder): agrees less (estimated)."""
RATIO_PENALTY_PER_DOUBLING = 0.02
"""α drops as the size gap grows beyond 8× (estimated)."""
KIND_ALPHA_BONUS: dict[str, tuple[float, str]] = {
    "mtp": (0.05, "MTP layers read the target's own hidden state: Qwen3.8-27B's MTP head accepted 0.78 of "
                  "2-token drafts on code and prose prompts (github.com/sudoingX/qwen38-mtp, RTX 3090 row), "
                  "α ≈ 0.85"),
    "eagle3": (0.05, "estimated: an EAGLE-3 head reads the target's hidden states, as MTP layers do"),
    "dflash": (0.05, "estimated: a DFlash drafter is conditioned on the target's hidden states"),
    "dspark": (0.08, "estimated: the DSpark paper reports 16–31% longer accepted runs than DFlash and EAGLE-3"),
}
"""α above the task prior for drafters trained on the target itself (no size-gap penalty)."""
MAX_ALPHA = 0.95


@dataclass(frozen=True)
class Calibration:
    """Measured inputs that replace the priors (from `recommend --measure`)."""

    alpha: float
    c: float
    b_slope: float
    placement: str
    """"cpu" or "gpu": the kind of placement b was measured on."""
    c_model: float
    """What fit.py predicted c to be for the measured pair (to rescale c for other pairs)."""


def _base(task: str, calibration: Calibration | None) -> AlphaPrior:
    if calibration is not None:
        return AlphaPrior(calibration.alpha, "measured by --measure on the offline pair")
    return TASK_PRIORS.get(task, TASK_PRIORS["chat"])


def pair_alpha(task: str, target: CatalogModel, draft: CatalogModel, calibration: Calibration | None = None) -> AlphaPrior:
    """α for a small-model drafter on this task: the task prior (or the measured α), adjusted
    for family and size gap."""
    base = _base(task, calibration)
    alpha = base.alpha
    notes = []
    if target.family != draft.family:
        alpha -= CROSS_FAMILY_PENALTY
        notes.append(f"-{CROSS_FAMILY_PENALTY} other family")
    doublings = math.log2(max(1.0, target.params / draft.params)) - 3
    if doublings > 0:
        alpha -= RATIO_PENALTY_PER_DOUBLING * doublings
        notes.append(f"-{RATIO_PENALTY_PER_DOUBLING * doublings:.2f} size gap")
    alpha = min(MAX_ALPHA, max(0.05, alpha))
    return AlphaPrior(alpha, base.source + (f" ({', '.join(notes)})" if notes else ""))


def kind_alpha(task: str, kind: str, calibration: Calibration | None = None) -> AlphaPrior:
    """α for a drafter trained on the target (MTP, EAGLE-3, DFlash, DSpark): the task prior
    plus the kind's bonus."""
    base = _base(task, calibration)
    bonus, why = KIND_ALPHA_BONUS.get(kind, (0.0, ""))
    alpha = min(MAX_ALPHA, base.alpha + bonus)
    return AlphaPrior(alpha, f"{base.source} (+{bonus:.2f}: {why})" if bonus else base.source)


def alpha_from_acceptance(rate: float, gamma: int) -> float:
    """The per-token α whose geometric model gives acceptance rate `rate` at draft length γ:
    rate = (α + α² + … + α^γ) / γ (bisection; what a published "acceptance" figure implies)."""
    if not 0.0 <= rate <= 1.0 or gamma < 1:
        raise ValueError(f"need 0 <= rate <= 1 and gamma >= 1, got {rate}, {gamma}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(1, gamma + 1)) / gamma < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
