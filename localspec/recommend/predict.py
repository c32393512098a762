"""Predicted decode speed of one target with one drafter (any kind) on one machine.

The same model serves the ranked recommendations (runnable small-model drafters) and the
drafters localspec cannot run yet (MTP, EAGLE-3, DFlash, DSpark), which are shown with their
predicted gain and marked "not yet runnable in localspec". Speedup follows Leviathan et al.
2023: S(γ) = E[tokens per step] / (γ·c + b(γ)), with b(γ) from localspec.recommend.speed (MoE
verify batches read more experts) and, for block drafters, the block's cost added once per step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from localspec.catalog import BLOCK_KINDS, Catalog, CatalogFile, CatalogModel, DrafterOption, drafter_options
from localspec.recommend.fit import Budget, Placement, place
from localspec.recommend.priors import AlphaPrior, Calibration, kind_alpha, pair_alpha
from localspec.recommend.speed import Q8_BYTES_PER_PARAM, BatchCost, head_draft_time, verify_cost
from localspec.types import MAX_GAMMA
from localspec.theory import best_gamma, expected_tokens_per_step, linear_batch_cost, speedup

DRAFT_QUANTS = ("Q4_K_M", "Q8_0", "Q4_1")
"""Quantizations a small-model drafter is used at."""
BLOCK_DRAFT_LAYERS = 5
"""Layers of a DFlash/DSpark drafter (DeepSpec's configs use num_draft_layers=5)."""


@dataclass(frozen=True)
class SpeedPrediction:
    """What one (target, drafter) choice should do on one machine."""

    target: str
    target_quant: str
    drafter: str
    """Catalog model id, drafter record id, "<target>:mtp", or "none" (plain decoding)."""
    drafter_label: str
    kind: str
    """"model", "mtp", "eagle3", "dflash", "dspark" or "none"."""
    runnable: bool
    why_not: str
    placement: str
    gamma: int
    alpha: float
    alpha_source: str
    c: float
    """Drafter cost per draft token relative to one target token (per step for block drafters)."""
    b_gamma: float
    """Verify cost of γ+1 tokens relative to one target token."""
    plain_tokens_per_s: float
    spec_tokens_per_s: float
    speedup: float

    def to_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return asdict(self)


def draft_file(draft: CatalogModel, quant: str | None = None) -> CatalogFile | None:
    """The drafter's file at `quant`, else its first file at a drafting quant."""
    if quant is not None:
        return draft.file_for(quant)
    return next((f for q in DRAFT_QUANTS for f in draft.files if f.quant == q), None)


def _head_bytes_per_param(target: CatalogModel, tfile: CatalogFile, option: DrafterOption) -> float:
    """Built-in MTP layers sit in the target's file at its quantization; separate heads at Q8_0."""
    built_in = option.id.endswith(":mtp") or option.repo == target.repo
    return tfile.size / target.params if built_in else Q8_BYTES_PER_PARAM


def _with_block_cost(verify: BatchCost, block_s: float) -> BatchCost:
    """b(γ) plus one block-drafter forward per drafting step (its cost does not grow with γ)."""

    def b(gamma: int) -> float:
        return verify(gamma) + (block_s if gamma > 0 else 0.0)

    return b


def _choose(alpha: float, c: float, b: BatchCost, gamma: int | None, max_gamma: int) -> tuple[int, float]:
    if gamma is not None:
        return gamma, speedup(alpha, gamma, c, b)
    choice = best_gamma(alpha, c, b, max_gamma=max_gamma)
    return choice.gamma, choice.speedup


def predict(catalog: Catalog, budget: Budget, target: CatalogModel, tfile: CatalogFile,
            option: DrafterOption | None, *, dfile: CatalogFile | None = None, task: str = "chat",
            n_ctx: int = 4096, alpha: float | None = None, gamma: int | None = None,
            calibration: Calibration | None = None) -> tuple[SpeedPrediction, Placement] | None:
    """The prediction for `target` at `tfile` drafted by `option` (None = plain decoding), at the
    best γ unless `gamma` is given; `alpha` overrides the prior. None when it fits nowhere."""
    kind = option.kind if option is not None else "none"
    draft = catalog.model(option.id) if option is not None and kind == "model" else None
    if draft is not None and dfile is None:
        dfile = draft_file(draft)
    head_bytes = 0
    if option is not None and draft is None:
        head_bytes = int(option.params * _head_bytes_per_param(target, tfile, option))
    p = place(target, tfile, draft, dfile, n_ctx, budget, extra_bytes=head_bytes)
    if p is None:
        return None
    t = p.target_time
    assert t is not None
    b = verify_cost(target, t)
    c = 0.0
    prior = AlphaPrior(0.0, "")
    block = 0
    if option is not None and draft is not None:
        prior = pair_alpha(task, target, draft, calibration)
        c = p.draft_token_s / p.target_token_s
        if calibration is not None:
            c *= calibration.c / calibration.c_model if calibration.c_model > 0 else 1.0
            if calibration.placement == p.kind:
                b = linear_batch_cost(calibration.b_slope)
    elif option is not None:
        prior = kind_alpha(task, kind, calibration)
        bpp = _head_bytes_per_param(target, tfile, option)
        if kind == "mtp":
            layers = max(1, target.mtp_layers)
        else:
            layers = BLOCK_DRAFT_LAYERS if kind in BLOCK_KINDS else 1
        head_s = head_draft_time(option.params, bpp, layers, budget.gpu_bandwidth if budget.has_gpu else 0.0,
                                 budget.cpu_bytes_per_s) / p.target_token_s
        if kind in BLOCK_KINDS:
            block = option.block_size or 16
            b = _with_block_cost(b, head_s)
        else:
            c = head_s
    a = prior.alpha if alpha is None else alpha
    if option is None:
        g, s = 0, 1.0
    else:
        g, s = _choose(a, c, b, gamma, (block - 1) if block else MAX_GAMMA)
    plain = 1.0 / p.target_token_s
    label = option.label if option is not None else "none (plain decoding)"
    return SpeedPrediction(
        target=target.id, target_quant=tfile.quant, drafter=option.id if option is not None else "none",
        drafter_label=label, kind=kind, runnable=option.runnable if option is not None else True,
        why_not=option.why_not if option is not None else "", placement=p.kind, gamma=g, alpha=round(a, 4),
        alpha_source=prior.source if alpha is None else "given", c=round(c, 4), b_gamma=round(b(g), 4),
        plain_tokens_per_s=round(plain, 2), spec_tokens_per_s=round(plain * s, 2), speedup=round(s, 3),
    ), p


def option_for(catalog: Catalog, target: CatalogModel, drafter: str) -> DrafterOption:
    """The drafter option called `drafter` (a catalog model id, drafter id, "mtp" for the target's
    MTP) for `target`; KeyError listing the known ones otherwise."""
    options = drafter_options(catalog, target)
    for o in options:
        if o.id == drafter or (drafter == "mtp" and o.kind == "mtp"):
            return o
    raise KeyError(f"{drafter!r} is not a drafter for {target.id}; known: {', '.join(o.id for o in options)}")


def tokens_per_step(pred: SpeedPrediction) -> float:
    """Expected tokens emitted per target forward at the prediction's α and γ."""
    return expected_tokens_per_step(pred.alpha, pred.gamma)
