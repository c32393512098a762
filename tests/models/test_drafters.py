"""Catalog schema 2: the current families (MoE, hybrid, MTP), the drafters each target has,
and which of them localspec can run (the rest are data, marked "not yet runnable")."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from localspec.catalog import (
    NOT_RUNNABLE,
    CatalogError,
    drafter_options,
    load_catalog,
    packaged_catalog_text,
    parse_catalog,
    runnable_model_drafters,
)
from localspec.recommend import Budget, recommend
from localspec.types import DRAFTER_KINDS

REPO = Path(__file__).resolve().parents[2]
CURRENT = {
    "qwen3.5": ["0.8b", "4b", "9b", "27b", "35b-a3b"],
    "qwen3.6": ["27b", "35b-a3b"],
    "qwen3.8": ["27b"],
    "qwen3-next": ["80b-a3b"],
    "gemma4": ["e2b", "e4b", "12b", "26b-a4b", "31b"],
    "glm-4.5": ["air"],
    "glm-4.7-flash": ["flash"],
}


def test_current_families_with_architecture_and_sources() -> None:
    cat = load_catalog()
    for family, sizes in CURRENT.items():
        members = [m for m in cat.models if m.family == family]
        for size in sizes:
            assert any(size in m.id for m in members), (family, size)
        fam = cat.families[family]
        assert fam.template and fam.tools and fam.ref.startswith(("https://", "http://"))
        for m in members:
            assert m.ref.startswith(("https://", "http://")), m.id
            assert 0 < m.active <= m.params
            if m.is_moe:
                assert 0 < m.n_expert_used < m.n_expert and m.active < m.params and 0 < m.expert_params < m.params
            if m.is_hybrid:
                assert m.n_layer_kv + m.recurrent_layers == m.n_layer
    moe = cat.model("qwen3.5-35b-a3b")
    assert moe.describe_arch().startswith("MoE 35B, 3B active (8/256 experts)") and "hybrid" in moe.describe_arch()
    assert cat.model("qwen3.8-27b").mtp_layers == 1 and cat.model("gemma-4-31b-it").arch_kind == "dense"


def test_hybrid_kv_cache_is_on_the_attention_layers_only() -> None:
    m = load_catalog().model("qwen3.5-27b")
    per_pos = 2 * 4 * 256 * 2
    assert m.kv_bytes(4096) == per_pos * 16 * 4096  # 16 attention layers of 64
    assert m.kv_bytes(4096, 32) == m.kv_bytes(4096) // 2


def test_every_drafter_record_names_known_targets_and_sources() -> None:
    raw = tomllib.loads(packaged_catalog_text())
    ids = {m["id"] for m in raw["model"]}
    cat = load_catalog()
    assert len(cat.drafters) == len(raw["drafter"])  # none dropped
    for d in raw["drafter"]:
        assert set(d["targets"]) <= ids and d["source"] and d["ref"].startswith(("https://", "http://"))
    kinds = {d.kind for d in cat.drafters}
    assert {"mtp", "eagle3", "dflash", "dspark"} <= kinds


def test_drafter_options_mark_what_the_engine_cannot_run() -> None:
    cat = load_catalog()
    for target in cat.models:
        for o in drafter_options(cat, target):
            if o.runnable:
                assert o.kind in DRAFTER_KINDS and o.status == "runnable"
                assert not target.is_hybrid and not cat.model(o.id).is_hybrid
            else:
                assert o.why_not and o.status.startswith(NOT_RUNNABLE)
    hybrid = cat.model("qwen3.5-27b")
    opts = drafter_options(cat, hybrid)
    small = next(o for o in opts if o.id == "qwen3.5-0.8b")
    assert not small.runnable and "recurrent" in small.why_not
    assert [o.kind for o in opts if o.kind != "model"] == ["mtp", "dflash"]
    assert runnable_model_drafters(cat, hybrid) == []
    llama = drafter_options(cat, cat.model("llama-3.1-8b-instruct"))
    assert llama[0].runnable and llama[0].id == "llama-3.2-1b-instruct"
    assert any(o.kind == "eagle3" and not o.runnable for o in llama)
    glm = drafter_options(cat, cat.model("glm-4.5-air"))
    assert [(o.kind, o.runnable) for o in glm] == [("mtp", False)]  # built-in MTP, no record needed


def test_moe_target_drafters_are_small_against_the_active_parameters() -> None:
    cat = load_catalog()
    target = cat.model("gemma-4-31b-it")
    ids = {o.id for o in drafter_options(cat, target)}
    assert "gemma-4-e2b-it" in ids and "gemma-4-26b-a4b-it" not in ids
    assert {o.id for o in drafter_options(cat, cat.model("qwen3.6-35b-a3b")) if o.kind == "model"} == {"qwen3.5-0.8b"}


def test_recommend_never_offers_a_drafter_the_engine_cannot_run() -> None:
    cat = load_catalog()
    for vram in (8, 16, 24, 32):
        budget = Budget(vram << 30, 64 << 30, "test", 1000e9, 24e9, "test")
        for task in ("code", "chat"):
            for r in recommend(cat, budget, task=task, limit=1000, min_tokens_per_s=0):
                assert not cat.model(r.target).is_hybrid and not cat.model(r.draft).is_hybrid
                assert r.draft in runnable_model_drafters_ids(cat, r.target)


def runnable_model_drafters_ids(cat, target_id: str) -> set[str]:  # type: ignore[no-untyped-def]
    return {m.id for m in runnable_model_drafters(cat, cat.model(target_id))}


def test_parse_rejects_unknown_drafter_kind_and_trims_unknown_targets() -> None:
    raw = tomllib.loads(packaged_catalog_text())
    raw["drafter"][0]["kind"] = "medusa"
    with pytest.raises(CatalogError, match="medusa"):
        parse_catalog(raw, "test")
    raw = tomllib.loads(packaged_catalog_text())
    raw["model"] = [m for m in raw["model"] if not m["id"].startswith("qwen3")]
    cat = parse_catalog(raw, "trimmed")
    assert all(t in {m.id for m in cat.models} for d in cat.drafters for t in d.targets)
    assert not any(d.id.startswith("deepspec-eagle3-qwen3") for d in cat.drafters)


def test_no_user_facing_text_points_outside_the_repository() -> None:
    """Recommender and catalog texts state facts, not files a user does not have (addresses of
    public pages are fine: they are sources)."""
    files = [*REPO.glob("localspec/recommend/*.py"), *REPO.glob("localspec/catalog/*.py"),
             REPO / "localspec/cli/recommend.py", REPO / "localspec/gpus.py", *REPO.glob("models/*.toml")]
    for path in files:
        text = path.read_text(encoding="utf-8")
        for name in re.findall(r"(?<![/\w.-])([A-Z][A-Z_]+\.md)\b", text):
            assert name == "README.md" and (REPO / name).is_file(), f"{path.name} cites {name}"
