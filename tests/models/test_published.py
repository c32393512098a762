"""The recommender's speed model held against published consumer-GPU measurements
(tests/models/published.toml, each case with its source): plain decoding, speculative
decoding with a small drafter and with a built-in MTP head, and a MoE target where the
published result is that drafting does not pay."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from localspec.catalog import load_catalog
from localspec.gpus import GIB, find_gpu
from localspec.recommend import Budget, SpeedPrediction, alpha_from_acceptance, option_for, predict

DATA = tomllib.loads((Path(__file__).parent / "published.toml").read_text(encoding="utf-8"))
TOL = DATA["tolerance"]


def _budget(gpu: str) -> Budget:
    """The named card, with RAM and CPU that never decide the placement of these cases."""
    spec = find_gpu(gpu)
    return Budget(spec.vram_bytes, 64 * GIB, spec.name, spec.bandwidth_bytes_s, 24e9, f"--gpu {spec.name}")


def _predict(case: dict[str, Any], drafter: str | None, **kw: Any) -> SpeedPrediction:
    catalog = load_catalog()
    target = catalog.model(case["target"])
    option = option_for(catalog, target, drafter) if drafter else None
    dfile = catalog.model(drafter).file_for(case["drafter_quant"]) if drafter and "drafter_quant" in case else None
    out = predict(catalog, _budget(case["gpu"]), target, target.file_for(case["quant"]), option, dfile=dfile,
                  task=case.get("task", "chat"), n_ctx=4096, **kw)
    assert out is not None, f"{case['target']} does not fit {case['gpu']}"
    pred, placement = out
    assert placement.kind == "gpu", "the published runs have every layer on the GPU"
    return pred


def _within(predicted: float, published: float) -> bool:
    return abs(predicted / published - 1.0) <= TOL


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [f"{c['gpu']}-{c['target']}-{c['quant']}" + (f"+{c['drafter']}" if "drafter" in c else "") for c in cases]


def test_every_case_names_its_source() -> None:
    cases = DATA["plain"] + DATA["speculative"] + DATA["no_gain"]
    assert len(DATA["plain"]) >= 10 and len(DATA["speculative"]) >= 4 and DATA["no_gain"]
    assert all(c["source"].startswith("https://") for c in cases)
    held_out = [c for c in DATA["plain"] if not c.get("fit")]
    assert len(held_out) >= 5  # the fitted cases are not the only plain ones


@pytest.mark.parametrize("case", DATA["plain"], ids=_ids(DATA["plain"]))
def test_plain_decode_matches_published(case: dict[str, Any]) -> None:
    pred = _predict(case, None)
    assert pred.gamma == 0 and pred.speedup == 1.0
    assert _within(pred.plain_tokens_per_s, case["tokens_per_s"]), (pred.plain_tokens_per_s, case["tokens_per_s"])


@pytest.mark.parametrize("case", DATA["speculative"], ids=_ids(DATA["speculative"]))
def test_speculative_decode_matches_published(case: dict[str, Any]) -> None:
    kw: dict[str, Any] = {}
    if "acceptance" in case:
        kw = {"alpha": alpha_from_acceptance(case["acceptance"], case["acceptance_gamma"]),
              "gamma": case["acceptance_gamma"]}
    pred = _predict(case, case["drafter"], **kw)
    published_speedup = case["spec_tokens_per_s"] / case["plain_tokens_per_s"]
    assert _within(pred.plain_tokens_per_s, case["plain_tokens_per_s"]), (pred.plain_tokens_per_s, case)
    assert _within(pred.spec_tokens_per_s, case["spec_tokens_per_s"]), (pred.spec_tokens_per_s, case)
    assert _within(pred.speedup, published_speedup), (pred.speedup, published_speedup)
    assert pred.gamma >= 1


@pytest.mark.parametrize("case", DATA["no_gain"], ids=_ids(DATA["no_gain"]))
def test_moe_target_where_drafting_did_not_pay(case: dict[str, Any]) -> None:
    """Published: no draft configuration beat plain decoding of the small-active MoE; the
    recommender must not promise a gain there, while its dense sibling keeps one."""
    pred = _predict(case, case["drafter"])
    assert pred.speedup <= case["max_speedup"]
    catalog = load_catalog()
    dense = next(m for m in catalog.models if m.family == catalog.model(case["target"]).family and not m.is_moe)
    sibling = _predict({**case, "target": dense.id}, case["drafter"])
    assert sibling.speedup > pred.speedup + 0.25
