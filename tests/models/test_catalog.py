"""localspec.catalog: the packaged catalog, provenance, measured figures vs the real files,
the user copy, the added-path registry and drafting pairs on real GGUF headers."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from localspec.catalog import (
    add_path,
    added_paths,
    describe,
    drafting_pairs,
    dump_toml,
    guess_quant,
    load_catalog,
    packaged_catalog_text,
    parse_catalog,
    remove_path,
    save_user_catalog,
    user_catalog_path,
)
from localspec.compat import pair_problems

REQUIRED = {
    "qwen2.5-coder": ["0.5b", "1.5b", "3b", "7b", "14b", "32b"],
    "qwen2.5": ["0.5b", "1.5b", "3b", "7b", "14b", "32b"],
    "qwen3": ["0.6b", "1.7b", "4b", "8b", "14b", "32b"],
    "llama-3": ["3.2-1b", "3.2-3b", "3.1-8b"],
    "gemma3": ["270m", "1b", "4b", "12b", "27b"],
    "smollm2": ["135m", "360m", "1.7b"],
    "qwen3.5": ["0.8b", "4b", "9b", "27b", "35b-a3b"],
    "qwen3.6": ["27b", "35b-a3b"],
    "gemma4": ["e2b", "e4b", "12b", "26b-a4b", "31b"],
}


def test_packaged_catalog_covers_the_required_families() -> None:
    cat = load_catalog()
    assert cat.origin == "packaged"
    ids = {m.id for m in cat.models}
    for family, sizes in REQUIRED.items():
        members = [m for m in cat.models if m.family == family]
        for size in sizes:
            assert any(f"-{size}" in m.id for m in members), (family, size, sorted(ids))
    for m in cat.models:
        assert m.repo.count("/") == 1 and m.files and m.n_layer > 0 and m.head_dim > 0
        assert m.source in ("measured", "model card", "estimated")
        for f in m.files:
            assert f.file.endswith(".gguf") and f.size > 0 and f.source
            assert f.quant == guess_quant(f.file)
    for t in cat.tokenizers.values():
        assert t.source in ("measured", "model card", "estimated")
        assert (t.source == "measured") == bool(t.fingerprint)


@pytest.mark.models
def test_measured_figures_match_the_local_files(qwen_target_path: Path, qwen_draft_path: Path,
                                                 smollm2_path: Path, deepseek_header_path: Path) -> None:
    from localspec.gguf_info import read_metadata, vocab_info
    from localspec.store import offline_models

    cat = load_catalog()
    sha = {m.id: m.sha256 for m in offline_models()}
    measured_files = [(m, f) for m in cat.models for f in m.files if f.source == "measured"]
    assert len(measured_files) == 3
    for m, f in measured_files:
        path = {p.name: p for p in (qwen_target_path, qwen_draft_path, smollm2_path)}[f.file]
        assert f.size == path.stat().st_size and f.sha256 == sha[f.offline]
        info = vocab_info(path)
        assert cat.tokenizer_of(m).fingerprint == info.fingerprint
        assert pair_problems(cat.vocab_info(m), info) == []
        meta = read_metadata(path)
        arch = meta["general.architecture"]
        assert m.n_layer == meta[f"{arch}.block_count"] and m.n_head_kv == meta[f"{arch}.attention.head_count_kv"]
        assert m.n_ctx_train == meta[f"{arch}.context_length"]
    ds = vocab_info(deepseek_header_path)
    assert cat.tokenizers["deepseek-r1-qwen"].fingerprint == ds.fingerprint
    assert pair_problems(cat.vocab_info(cat.model("deepseek-r1-distill-qwen-7b")), ds) == []


def test_catalog_pair_rule_needs_a_shared_tokenizer_id_when_fingerprints_are_unknown() -> None:
    cat = load_catalog()
    assert cat.pair_problems(cat.model("llama-3.1-8b-instruct"), cat.model("llama-3.2-1b-instruct")) == []
    assert cat.pair_problems(cat.model("qwen3-8b"), cat.model("qwen3-0.6b")) == []
    # same tokenizer model/bos/eos/size as Qwen2.5, fingerprint unknown: refused by the id rule
    problems = cat.pair_problems(cat.model("qwen3-8b"), cat.model("qwen2.5-0.5b-instruct"))
    assert pair_problems(cat.vocab_info(cat.model("qwen3-8b")), cat.vocab_info(cat.model("qwen2.5-0.5b-instruct"))) == []
    assert problems and "not known to be the same" in problems[-1]
    # padded 152,064 vs 151,936 (Δ128) is allowed, as llama.cpp allows it
    assert cat.pair_problems(cat.model("qwen2.5-coder-32b-instruct"), cat.model("qwen2.5-coder-0.5b-instruct")) == []


def test_kv_bytes_sliding_window() -> None:
    g = load_catalog().model("gemma-3-27b-it")
    per_pos = 2 * 16 * 128 * 2
    n_global = -(-62 // 6)
    assert g.kv_bytes(32768) == per_pos * (n_global * 32768 + (62 - n_global) * 1024)
    assert g.kv_bytes(512) == per_pos * 62 * 512


def test_dump_toml_round_trips_the_packaged_catalog() -> None:
    raw = tomllib.loads(packaged_catalog_text())
    assert tomllib.loads(dump_toml(raw, "# header")) == raw


def test_user_copy_overrides_packaged_and_bad_copy_is_ignored() -> None:
    raw = tomllib.loads(packaged_catalog_text())
    raw["model"][0]["name"] = "Changed Name"
    path = save_user_catalog(raw)
    assert path == user_catalog_path() and path.is_file()
    cat = load_catalog()
    assert cat.origin == str(path) and cat.models[0].name == "Changed Name"
    path.write_text("this is = not [valid toml")
    assert load_catalog().origin == "packaged"


def test_parse_catalog_rejects_unknown_tokenizer() -> None:
    raw = tomllib.loads(packaged_catalog_text())
    raw["model"][0]["tokenizer"] = "nope"
    from localspec.catalog import CatalogError

    with pytest.raises(CatalogError, match="unknown tokenizer"):
        parse_catalog(raw, "test")


def test_guess_quant() -> None:
    assert guess_quant("Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert guess_quant("qwen2.5-coder-0.5b-instruct-q8_0.gguf") == "Q8_0"
    assert guess_quant("big-Q8_0-00001-of-00002.gguf") == "Q8_0"
    assert guess_quant("model-IQ4_XS.gguf") == "IQ4_XS"
    assert guess_quant("model.gguf") is None


@pytest.mark.models
def test_add_path_registry_and_drafting_pairs_on_real_headers(qwen_target_path: Path, qwen_draft_path: Path,
                                                              smollm2_path: Path, tmp_path: Path) -> None:
    from localspec.errors import LocalSpecError

    info = add_path(smollm2_path)
    assert info.n_vocab == 49152 and added_paths() == [smollm2_path.resolve()]
    add_path(smollm2_path)  # idempotent
    assert len(added_paths()) == 1
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf")
    with pytest.raises(LocalSpecError):
        add_path(junk)
    assert len(added_paths()) == 1
    cat = load_catalog()
    models = [describe(p, "store", cat) for p in (qwen_target_path, qwen_draft_path, smollm2_path)]
    assert [m.catalog_id for m in models] == ["qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct",
                                              "smollm2-135m-instruct"]
    pairs, errors = drafting_pairs(models)
    assert errors == {}
    assert [(p.target.filename, p.draft.filename) for p in pairs] == [(qwen_target_path.name, qwen_draft_path.name)]
    assert remove_path(smollm2_path) and added_paths() == [] and not remove_path(smollm2_path)
    assert smollm2_path.is_file()


@pytest.mark.models
def test_drafting_pairs_refuse_the_deepseek_near_miss(qwen_target_path: Path, deepseek_header_path: Path) -> None:
    """The DeepSeek header is smaller than the Qwen target and Qwen-derived: a naive check passes it."""
    cat = load_catalog()
    ds = describe(deepseek_header_path, "added", cat)  # treated as loadable to exercise the rule
    t = describe(qwen_target_path, "store", cat)
    pairs, _ = drafting_pairs([t, ds])
    assert pairs == []
