"""Ranked (target, drafter, quants) recommendations for a task, a context size and a machine.

Only pairs the catalog calls compatible (Catalog.pair_problems: compat.pair_problems on catalog
metadata plus the shared-tokenizer-id rule) are ever considered, so nothing is suggested that
the engine would refuse. Ranking: the strongest target (parameters, quantization, made for the
task) that reaches `min_tokens_per_s`, with a bonus for predicted speed above it
(0.35 per doubling, counted up to 100 tokens/s, in log2(params) units).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from localspec.catalog import Catalog, CatalogModel
from localspec.recommend.fit import Budget, Placement, place
from localspec.theory import best_gamma, linear_batch_cost

MAX_DRAFT_SHARE = 1 / 3
"""A drafter has at most a third of the target's parameters (beyond that c eats the gain)."""
DRAFT_QUANTS = ("Q4_K_M", "Q8_0", "Q4_1")
QUANT_QUALITY = {"Q8_0": 0.35, "Q6_K": 0.3, "Q5_K_M": 0.2, "Q4_K_M": 0.0, "Q4_1": -0.1}
"""Bonus in log2(params) units: Q8_0 ≈ a model a quarter larger (estimated from llama.cpp perplexity tables)."""


SPEED_WEIGHT = 0.35
SPEED_CAP_TOKENS_PER_S = 100.0


@dataclass(frozen=True)
class AlphaPrior:
    """Per-token acceptance probability prior for a task, with where it comes from."""

    alpha: float
    source: str


TASK_PRIORS: dict[str, AlphaPrior] = {
    "code": AlphaPrior(0.80, "measured here: Qwen2.5-Coder 0.5B vs 1.5B top-1 agreement 78–86% on code (ENVIRONMENT.md)"),
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


@dataclass(frozen=True)
class Recommendation:
    """One ranked suggestion."""

    rank: int
    target: str
    target_quant: str
    target_file: str
    target_repo: str
    draft: str
    draft_quant: str
    draft_file: str
    draft_repo: str
    placement: str
    target_gpu_layers: int
    target_layers: int
    vram_bytes: int
    ram_bytes: int
    alpha: float
    alpha_source: str
    c: float
    b_slope: float
    gamma: int
    speedup: float
    plain_tokens_per_s: float
    spec_tokens_per_s: float
    offload_slowdown: float | None
    """Target token cost partially offloaded / fully on the GPU (None unless partial)."""
    meets_min_speed: bool
    why: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return asdict(self)


def pair_alpha(task: str, target: CatalogModel, draft: CatalogModel, calibration: Calibration | None = None) -> AlphaPrior:
    """α for this pair on this task: the task prior (or the measured α), adjusted for family and size gap."""
    base = TASK_PRIORS.get(task, TASK_PRIORS["chat"])
    if calibration is not None:
        base = AlphaPrior(calibration.alpha, "measured by --measure on the offline pair")
    alpha = base.alpha
    notes = []
    if target.family != draft.family:
        alpha -= CROSS_FAMILY_PENALTY
        notes.append(f"-{CROSS_FAMILY_PENALTY} other family")
    doublings = math.log2(max(1.0, target.params / draft.params)) - 3
    if doublings > 0:
        alpha -= RATIO_PENALTY_PER_DOUBLING * doublings
        notes.append(f"-{RATIO_PENALTY_PER_DOUBLING * doublings:.2f} size gap")
    alpha = min(0.95, max(0.05, alpha))
    return AlphaPrior(alpha, base.source + (f" ({', '.join(notes)})" if notes else ""))


def compatible_drafters(catalog: Catalog, target: CatalogModel) -> list[CatalogModel]:
    """Catalog drafters for `target`: compatible by the catalog rule and small enough."""
    return [
        d for d in catalog.models
        if d.id != target.id and d.params <= target.params * MAX_DRAFT_SHARE and not catalog.pair_problems(target, d)
    ]


def _gb(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def _why(p: Placement, budget: Budget, alpha: AlphaPrior, task: str, c: float, gamma: int, s: float) -> str:
    if p.kind == "gpu":
        where = f"fits in {_gb(budget.vram_bytes)} VRAM ({_gb(p.vram_bytes)} used)"
    elif p.kind == "partial":
        where = (f"target {p.target_gpu_layers}/{p.target_layers} layers on the GPU, rest in RAM "
                 f"({_gb(p.ram_bytes)}): {p.target_token_s / p.target_all_gpu_token_s:.1f}x slower per token than all-GPU")
    else:
        where = f"CPU only ({_gb(p.ram_bytes)} RAM)"
    gain = f"best γ={gamma} → {s:.2f}x" if gamma else "drafting does not pay here (γ=0, plain decoding)"
    return f"{where}; {task} α≈{alpha.alpha:.2f}; drafter costs c={c:.2f} of the target; {gain}"


def _quality(model: CatalogModel, quant: str, task: str, catalog: Catalog) -> float:
    made_for = catalog.families[model.family].tasks[:1] == (task,)
    return math.log2(model.params) + QUANT_QUALITY.get(quant, 0.0) + (0.5 if made_for else 0.0)


def recommend(
    catalog: Catalog,
    budget: Budget,
    *,
    task: str = "chat",
    n_ctx: int = 4096,
    min_tokens_per_s: float = 10.0,
    limit: int = 10,
    calibration: Calibration | None = None,
) -> list[Recommendation]:
    """Ranked recommendations; each target+quant appears once, with its fastest drafter."""
    best: dict[tuple[str, str], tuple[float, float, Recommendation]] = {}
    for target in catalog.models:
        family = catalog.families[target.family]
        if task not in family.tasks or n_ctx > target.n_ctx_train:
            continue
        drafters = compatible_drafters(catalog, target)
        for tfile in target.files:
            for draft in drafters:
                for dfile in draft.files:
                    if dfile.quant not in DRAFT_QUANTS:
                        continue
                    p = place(target, tfile, draft, dfile, n_ctx, budget)
                    if p is None:
                        continue
                    rec = _score(catalog, target, tfile, draft, dfile, p, budget, task, min_tokens_per_s, calibration)
                    key = (target.id, tfile.quant)
                    if key not in best or rec.spec_tokens_per_s > best[key][2].spec_tokens_per_s:
                        speed = min(rec.spec_tokens_per_s, SPEED_CAP_TOKENS_PER_S) / max(min_tokens_per_s, 1e-9)
                        score = _quality(target, tfile.quant, task, catalog) + SPEED_WEIGHT * math.log2(max(speed, 1e-9))
                        best[key] = (score, rec.spec_tokens_per_s, rec)
    ranked = sorted(best.values(), key=lambda x: (not x[2].meets_min_speed, -x[0], -x[1]))
    out = []
    for i, (_, _, rec) in enumerate(ranked[:limit], start=1):
        out.append(Recommendation(**{**asdict(rec), "rank": i}))
    return out


def _score(catalog: Catalog, target: CatalogModel, tfile: object, draft: CatalogModel, dfile: object,
           p: Placement, budget: Budget, task: str, min_tps: float, calibration: Calibration | None) -> Recommendation:
    from localspec.catalog import CatalogFile

    assert isinstance(tfile, CatalogFile) and isinstance(dfile, CatalogFile)
    alpha = pair_alpha(task, target, draft, calibration)
    c = p.draft_token_s / p.target_token_s
    slope = p.batch_slope
    if calibration is not None:
        c *= calibration.c / calibration.c_model if calibration.c_model > 0 else 1.0
        if calibration.placement == p.kind:
            slope = calibration.b_slope
    choice = best_gamma(alpha.alpha, c, linear_batch_cost(slope))
    plain = 1.0 / p.target_token_s
    spec = plain * choice.speedup
    return Recommendation(
        rank=0, target=target.id, target_quant=tfile.quant, target_file=tfile.file, target_repo=tfile.repo,
        draft=draft.id, draft_quant=dfile.quant, draft_file=dfile.file, draft_repo=dfile.repo,
        placement=p.kind, target_gpu_layers=p.target_gpu_layers, target_layers=p.target_layers,
        vram_bytes=p.vram_bytes, ram_bytes=p.ram_bytes, alpha=round(alpha.alpha, 4), alpha_source=alpha.source,
        c=round(c, 4), b_slope=round(slope, 4), gamma=choice.gamma, speedup=round(choice.speedup, 3),
        plain_tokens_per_s=round(plain, 2), spec_tokens_per_s=round(spec, 2),
        offload_slowdown=round(p.target_token_s / p.target_all_gpu_token_s, 2) if p.kind == "partial" else None,
        meets_min_speed=spec >= min_tps, why=_why(p, budget, alpha, task, c, choice.gamma, choice.speedup),
    )
