"""Ranked (target, drafter, quants) recommendations for a task, a context size and a machine.

Only pairs the engine can run are ranked: small-model drafters the catalog calls compatible
(Catalog.pair_problems: compat.pair_problems on catalog metadata plus the shared-tokenizer-id
rule) for targets without a recurrent state. Drafters localspec cannot run yet (MTP, EAGLE-3,
DFlash, DSpark, and small models of hybrid families) are predicted too, by
`other_drafters` and `without_runnable_drafter`, and shown apart, never as a runnable pair.
Ranking: the strongest target (parameters, quantization, made for the task) that reaches
`min_tokens_per_s`, with a bonus for predicted speed above it (0.35 per doubling, counted up to
100 tokens/s, in log2(params) units).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass

from localspec.catalog import Catalog, CatalogFile, CatalogModel, drafter_options, runnable_model_drafters
from localspec.recommend.fit import Budget, Placement
from localspec.recommend.predict import DRAFT_QUANTS, SpeedPrediction, predict
from localspec.recommend.priors import (
    TASK_PRIORS,
    AlphaPrior,
    Calibration,
    pair_alpha,
)

__all__ = [
    "DRAFT_QUANTS", "QUANT_QUALITY", "TASK_PRIORS", "AlphaPrior", "Calibration", "Recommendation",
    "compatible_drafters", "other_drafters", "pair_alpha", "recommend", "without_runnable_drafter",
]

QUANT_QUALITY = {"Q8_0": 0.35, "Q6_K": 0.3, "Q5_K_M": 0.2, "Q4_K_XL": 0.05, "Q4_K_M": 0.0, "Q4_1": -0.1}
"""Bonus in log2(params) units: Q8_0 ≈ a model a quarter larger (estimated from llama.cpp perplexity tables)."""
SPEED_WEIGHT = 0.35
SPEED_CAP_TOKENS_PER_S = 100.0


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
    """Verify cost as b(γ) = 1 + b_slope·γ at the chosen γ (a MoE's b grows faster than linearly)."""
    gamma: int
    speedup: float
    plain_tokens_per_s: float
    spec_tokens_per_s: float
    offload_slowdown: float | None
    """Target token cost partially offloaded / fully on the GPU (None unless partial)."""
    meets_min_speed: bool
    why: str
    rpc_bytes: int = 0
    """Memory of the RPC workers the target takes (placement "rpc")."""

    def to_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return asdict(self)


def compatible_drafters(catalog: Catalog, target: CatalogModel) -> list[CatalogModel]:
    """Catalog models the engine can run as drafters for `target`: compatible by the catalog
    rule, small enough, and neither model with a recurrent state."""
    return runnable_model_drafters(catalog, target)


def _gb(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def _why(p: Placement, budget: Budget, pred: SpeedPrediction, task: str, target: CatalogModel) -> str:
    if p.kind == "gpu":
        where = f"fits in {_gb(budget.vram_bytes)} VRAM ({_gb(p.vram_bytes)} used)"
    elif p.kind == "rpc":
        n = len(budget.rpc_workers)
        rest = (f", rest in RAM ({_gb(p.ram_bytes)} with the drafter)" if p.target_gpu_layers < p.target_layers
                else f"; RAM {_gb(p.ram_bytes)}")
        drafter = "drafter on the GPU" if p.vram_bytes else "drafter on the CPU"
        where = (f"target {p.target_gpu_layers}/{p.target_layers} layers on {n} RPC worker{'s' if n > 1 else ''} "
                 f"({_gb(p.rpc_bytes)} of their {_gb(budget.rpc_free_bytes)} free){rest}; {drafter}")
    elif p.kind == "partial":
        where = (f"target {p.target_gpu_layers}/{p.target_layers} layers on the GPU, rest in RAM "
                 f"({_gb(p.ram_bytes)}): {p.target_token_s / p.target_all_gpu_token_s:.1f}x slower per token than all-GPU")
    else:
        where = f"CPU only ({_gb(p.ram_bytes)} RAM)"
    gain = f"best γ={pred.gamma} → {pred.speedup:.2f}x" if pred.gamma else "drafting does not pay here (γ=0, plain decoding)"
    moe = (f"; MoE: a verify of γ+1 tokens reads {pred.b_gamma:.2f}x one token's bytes and time"
           if target.is_moe and pred.gamma else "")
    return f"{where}; {task} α≈{pred.alpha:.2f}; drafter costs c={pred.c:.2f} of the target; {gain}{moe}"


def _quality(model: CatalogModel, quant: str, task: str, catalog: Catalog) -> float:
    made_for = catalog.families[model.family].tasks[:1] == (task,)
    return math.log2(model.params) + QUANT_QUALITY.get(quant, 0.0) + (0.5 if made_for else 0.0)


def _usable(catalog: Catalog, target: CatalogModel, task: str, n_ctx: int) -> bool:
    return task in catalog.families[target.family].tasks and n_ctx <= target.n_ctx_train


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
    """Ranked runnable recommendations; each target+quant appears once, with its fastest drafter."""
    best: dict[tuple[str, str], tuple[float, float, Recommendation]] = {}
    for target in catalog.models:
        if not _usable(catalog, target, task, n_ctx):
            continue
        options = {o.id: o for o in drafter_options(catalog, target) if o.kind == "model" and o.runnable}
        for tfile in target.files:
            for option in options.values():
                draft = catalog.model(option.id)
                for dfile in draft.files:
                    if dfile.quant not in DRAFT_QUANTS:
                        continue
                    out = predict(catalog, budget, target, tfile, option, dfile=dfile, task=task, n_ctx=n_ctx,
                                  calibration=calibration)
                    if out is None:
                        continue
                    rec = _recommendation(target, tfile, draft, dfile, *out, budget, task, min_tokens_per_s)
                    key = (target.id, tfile.quant)
                    if key not in best or rec.spec_tokens_per_s > best[key][2].spec_tokens_per_s:
                        speed = min(rec.spec_tokens_per_s, SPEED_CAP_TOKENS_PER_S) / max(min_tokens_per_s, 1e-9)
                        score = _quality(target, tfile.quant, task, catalog) + SPEED_WEIGHT * math.log2(max(speed, 1e-9))
                        best[key] = (score, rec.spec_tokens_per_s, rec)
    ranked = sorted(best.values(), key=lambda x: (not x[2].meets_min_speed, -x[0], -x[1]))
    return [dataclasses.replace(rec, rank=i) for i, (_, _, rec) in enumerate(ranked[:limit], start=1)]


def _recommendation(target: CatalogModel, tfile: CatalogFile, draft: CatalogModel, dfile: CatalogFile,
                    pred: SpeedPrediction, p: Placement, budget: Budget, task: str, min_tps: float) -> Recommendation:
    slope = (pred.b_gamma - 1.0) / pred.gamma if pred.gamma else p.batch_slope
    return Recommendation(
        rank=0, target=target.id, target_quant=tfile.quant, target_file=tfile.file, target_repo=tfile.repo,
        draft=draft.id, draft_quant=dfile.quant, draft_file=dfile.file, draft_repo=dfile.repo,
        placement=p.kind, target_gpu_layers=p.target_gpu_layers, target_layers=p.target_layers,
        vram_bytes=p.vram_bytes, ram_bytes=p.ram_bytes, alpha=pred.alpha, alpha_source=pred.alpha_source,
        c=pred.c, b_slope=round(slope, 4), gamma=pred.gamma, speedup=pred.speedup,
        plain_tokens_per_s=pred.plain_tokens_per_s, spec_tokens_per_s=pred.spec_tokens_per_s,
        offload_slowdown=round(p.target_token_s / p.target_all_gpu_token_s, 2) if p.kind == "partial" else None,
        meets_min_speed=pred.spec_tokens_per_s >= min_tps, why=_why(p, budget, pred, task, target),
        rpc_bytes=p.rpc_bytes,
    )


def other_drafters(catalog: Catalog, budget: Budget, target_id: str, quant: str, *, task: str = "chat",
                   n_ctx: int = 4096) -> list[SpeedPrediction]:
    """Predictions for the drafters of `target_id` that localspec cannot run yet (MTP, EAGLE-3,
    DFlash, DSpark, small models of hybrid families), best first."""
    target = catalog.model(target_id)
    tfile = target.file_for(quant)
    preds = []
    for option in drafter_options(catalog, target):
        if option.runnable:
            continue
        out = predict(catalog, budget, target, tfile, option, task=task, n_ctx=n_ctx)
        if out is not None:
            preds.append(out[0])
    return sorted(preds, key=lambda p: -p.speedup)


def without_runnable_drafter(catalog: Catalog, budget: Budget, *, task: str = "chat", n_ctx: int = 4096,
                             limit: int = 5, min_tokens_per_s: float = 10.0,
                             ) -> list[tuple[SpeedPrediction, list[SpeedPrediction]]]:
    """Targets that fit but have no drafter localspec can run (current hybrid and MoE families):
    (plain decoding, its not-yet-runnable drafters) at the strongest quant that fits fully on
    the GPU together with its best drafter (else the smallest that fits); the strongest targets
    that reach `min_tokens_per_s` first, slower ones after."""
    rows: list[tuple[bool, float, SpeedPrediction, list[SpeedPrediction]]] = []
    for target in catalog.models:
        if not _usable(catalog, target, task, n_ctx) or compatible_drafters(catalog, target):
            continue
        if not drafter_options(catalog, target):
            continue
        fitting = []
        for f in target.files:
            out = predict(catalog, budget, target, f, None, task=task, n_ctx=n_ctx)
            if out is not None:
                others = other_drafters(catalog, budget, target.id, f.quant, task=task, n_ctx=n_ctx)
                on_gpu = out[0].placement == "gpu" and (not others or others[0].placement == "gpu")
                fitting.append((on_gpu, f.size, out[0], others))
        if not fitting:
            continue
        gpu_rows = [x for x in fitting if x[0]]
        _, _, plain, others = max(gpu_rows, key=lambda x: x[1]) if gpu_rows else min(fitting, key=lambda x: x[1])
        fast = plain.plain_tokens_per_s >= min_tokens_per_s
        rows.append((fast, _quality(target, plain.target_quant, task, catalog), plain, others))
    rows.sort(key=lambda r: (not r[0], -r[1]))
    return [(plain, others) for _, _, plain, others in rows[:limit]]
