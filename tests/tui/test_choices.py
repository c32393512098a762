"""What the models screen offers: local files, drafters judged on real GGUF headers, catalog fit."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from localspec.errors import ModelNotFoundError
from localspec.tui import choices


@pytest.mark.models
def test_local_models_lists_store_files_and_added_paths(smollm2_path: Path, tmp_path: Path) -> None:
    link = tmp_path / "copy-of-smol.gguf"
    link.symlink_to(smollm2_path)
    found = choices.local_models([str(tmp_path / "missing.gguf")])
    labels = {m.label for m in found}
    assert "smollm2-135m-instruct-q4_1" in labels
    assert not any("header" in m.label for m in found)  # header-only parts cannot load
    assert all(m.origin == "store" for m in found)
    # an added path naming a file already listed is not listed twice
    assert len(choices.local_models([str(link)])) == len(found)


def test_added_model_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="not found"):
        choices.added_model(str(tmp_path / "nope.gguf"))


@pytest.mark.models
def test_drafter_choices_puts_compatible_first_with_reasons(
    qwen_target_path: Path, qwen_draft_path: Path, smollm2_path: Path
) -> None:
    cands = [choices.LocalModel(str(p), p.name, "store", p.stat().st_size)
             for p in (smollm2_path, qwen_target_path, qwen_draft_path)]
    ranked = choices.drafter_choices(str(qwen_target_path), cands)
    assert [d.model.path for d in ranked if d.compatible] == [str(qwen_draft_path), str(qwen_target_path)]
    smol = ranked[-1]
    assert smol.model.path == str(smollm2_path) and not smol.compatible
    assert any("vocabulary size" in p or "BOS" in p for p in smol.problems)


def test_catalog_choices_respect_the_budget() -> None:
    from localspec.catalog import load_catalog

    catalog = load_catalog()
    small = choices.catalog_choices(catalog, 2 << 30, "RAM", 4096)
    large = choices.catalog_choices(catalog, 64 << 30, "RAM", 4096)
    assert small and len(large) > len(small)
    for c in small:
        model = catalog.model(c.model_id)
        for q in c.quants:
            f = model.file_for(q)
            assert choices.fits_budget(f.size, model.kv_bytes(min(4096, model.n_ctx_train)), 2 << 30)
    assert "fits RAM" in small[0].reason


def test_catalog_drafters_share_the_target_tokenizer() -> None:
    from localspec.catalog import load_catalog

    catalog = load_catalog()
    target = next(m for m in catalog.models if m.id == "qwen2.5-coder-7b-instruct")
    ids = choices.catalog_drafters(catalog, target.id)
    assert "qwen2.5-coder-0.5b-instruct" in ids
    assert all(not catalog.pair_problems(target, catalog.model(i)) for i in ids)
    assert not any(i.startswith("smollm2") for i in ids)


@pytest.mark.models
def test_local_models_include_paths_registered_with_models_add(smollm2_path: Path, tmp_path: Path) -> None:
    from localspec.catalog import add_path

    mine = tmp_path / "my-smol.gguf"
    try:
        os.link(smollm2_path, mine)  # a second name for the same bytes: a distinct path
    except OSError:
        shutil.copyfile(smollm2_path, mine)
    assert not any(m.origin == "added" for m in choices.local_models())
    add_path(mine)
    added = [m for m in choices.local_models() if m.origin == "added"]
    assert [(m.label, m.path) for m in added] == [("my-smol.gguf", str(mine.resolve()))]


def test_catalog_choices_for_a_named_gpu_add_architecture_and_speed() -> None:
    from localspec.catalog import load_catalog

    catalog = load_catalog()
    gpu = choices.plan_gpu("RTX 5090")
    picks = {c.model_id: c for c in choices.catalog_choices(catalog, gpu.vram_bytes, gpu.name, 4096, gpu=gpu)}
    moe = picks["qwen3.5-35b-a3b"].reason
    assert "fits RTX 5090" in moe and "hybrid MoE" in moe and "MTP" in moe
    speeds = {mid: float(c.reason.rsplit("~", 1)[1].split()[0]) for mid, c in picks.items()}
    assert speeds["qwen3.5-35b-a3b"] > 2 * speeds["qwen3.5-27b"]  # decode follows active parameters
    assert "gemma-4-31b-it" in picks and "glm-4.5-air" not in picks  # 65 GB does not fit 32 GB


def test_plan_gpu_unknown_name_lists_close_matches() -> None:
    from localspec.gpus import UnknownGpuError

    with pytest.raises(UnknownGpuError, match="RTX 3080"):
        choices.plan_gpu("RTX 3008")


def test_catalog_drafter_options_runnable_first_with_reasons() -> None:
    from localspec.catalog import load_catalog

    catalog = load_catalog()
    opts = choices.catalog_drafter_options(catalog, "qwen3-8b")
    assert [o.runnable for o in opts] == sorted((o.runnable for o in opts), reverse=True)
    assert {o.kind for o in opts} == {"model", "eagle3", "dflash", "dspark"}
    assert all(o.why_not for o in opts if not o.runnable)
