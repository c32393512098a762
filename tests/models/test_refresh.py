"""`models refresh` against the local Hub: sizes/sha256 from the tree listing, new quants,
tokenizer fingerprints and architecture from real GGUF headers read with HTTP Range."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from fakehub import HubFile

from localspec.catalog import load_catalog, packaged_catalog_text, parse_catalog
from localspec.download import refresh_catalog


def _small_catalog(model_ids: list[str]):  # type: ignore[no-untyped-def]
    raw = tomllib.loads(packaged_catalog_text())
    raw["model"] = [m for m in raw["model"] if m["id"] in model_ids]
    return parse_catalog(raw, "test")


def test_refresh_updates_sizes_sha_and_adds_quants(hub) -> None:
    cat = _small_catalog(["qwen2.5-coder-7b-instruct"])
    repo = cat.models[0].repo
    q4 = hub.add(repo, "Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf", HubFile(b"x" * 4321))
    hub.add(repo, "Qwen2.5-Coder-7B-Instruct-IQ4_XS.gguf", HubFile(b"y" * 1234))
    hub.add(repo, "README.md", HubFile(b"readme", lfs=False))
    report = refresh_catalog(cat, endpoint=hub.url, token=False)
    assert report.repos_checked == 1 and report.files_updated == 1 and report.files_added == 1
    assert sorted(report.files_missing) == sorted(
        f"{repo}/Qwen2.5-Coder-7B-Instruct-{q}.gguf" for q in ("Q5_K_M", "Q6_K", "Q8_0"))
    user = load_catalog()
    assert user.origin == str(report.path)
    m = user.model("qwen2.5-coder-7b-instruct")
    f = m.file_for("Q4_K_M")
    assert f.size == 4321 and f.sha256 == q4.sha256 and f.source.startswith("hub ")
    assert m.file_for("IQ4_XS").size == 1234
    assert m.file_for("Q8_0").source.startswith("missing on hub")


def test_refresh_updates_drafter_files(hub) -> None:
    """A `[[drafter]]` GGUF (Gemma 4 31B's MTP assistant) gets its size and sha256 from the Hub."""
    cat = _small_catalog(["gemma-4-31b-it", "gemma-4-e2b-it"])
    (rec,) = [d for d in cat.drafters if d.file]
    blob = hub.add(rec.repo, rec.file, HubFile(b"m" * 777))
    report = refresh_catalog(cat, endpoint=hub.url, token=False, model_ids=["gemma-4-31b-it"])
    assert report.repos_checked == 1  # the drafter's repo; the target's is not on this hub
    assert any("gemma-4-31B-it-GGUF" in e for e in report.errors)
    user = load_catalog()
    d = next(x for x in user.drafters if x.id == rec.id)
    assert d.size == 777 and d.sha256 == blob.sha256 and d.file_source.startswith("hub ")
    assert f"{rec.repo}/{rec.file}" not in report.files_missing


def test_refresh_reports_missing_repo_and_keeps_going(hub) -> None:
    cat = _small_catalog(["qwen2.5-coder-7b-instruct", "qwen2.5-coder-3b-instruct"])
    hub.add(cat.model("qwen2.5-coder-3b-instruct").repo, "Qwen2.5-Coder-3B-Instruct-Q4_K_M.gguf", HubFile(b"z" * 99))
    report = refresh_catalog(cat, endpoint=hub.url, token=False, save=False)
    assert report.repos_checked == 1 and report.files_updated == 1
    assert any("Qwen2.5-Coder-7B-Instruct-GGUF" in e and "no model repo" in e for e in report.errors)


@pytest.mark.models
def test_refresh_headers_fill_fingerprint_and_catch_a_wrong_claim(hub, smollm2_path: Path,
                                                                  deepseek_header_path: Path) -> None:
    """SmolLM2-360M's header (served: the real SmolLM2 GGUF) confirms the measured smollm2 tokenizer;
    a 'Qwen2.5-7B' whose header is really DeepSeek's gets its own tokenizer and stops pairing."""
    cat = _small_catalog(["smollm2-360m-instruct", "qwen2.5-7b-instruct", "qwen2.5-0.5b-instruct"])
    smol = cat.model("smollm2-360m-instruct")
    hub.add(smol.repo, smol.file_for("Q4_K_M").file, HubFile(source=smollm2_path))
    fake_qwen = cat.model("qwen2.5-7b-instruct")
    hub.add(fake_qwen.repo, fake_qwen.file_for("Q4_K_M").file, HubFile(source=deepseek_header_path))
    assert cat.pair_problems(fake_qwen, cat.model("qwen2.5-0.5b-instruct")) == []
    report = refresh_catalog(cat, endpoint=hub.url, token=False, headers=True,
                             model_ids=["smollm2-360m-instruct", "qwen2.5-7b-instruct"])
    assert report.headers_read == 2, report.errors
    ranges = [r for m, p, r in hub.requests if "/resolve/" in p and r]
    assert ranges and all(r.startswith("bytes=0-") for r in ranges)
    served = sum(int(r.split("-")[1]) + 1 for r in ranges)
    assert served < 40 << 20  # header only, never the whole file set
    user = load_catalog()
    smol2 = user.model("smollm2-360m-instruct")
    assert smol2.tokenizer == "smollm2" and smol2.source.startswith("hub header")
    assert smol2.n_layer == 30  # the served file is the 135M: the header wins over the model card
    wrong = user.model("qwen2.5-7b-instruct")
    assert wrong.tokenizer == "qwen2.5@qwen2.5-7b-instruct"
    assert user.pair_problems(wrong, user.model("qwen2.5-0.5b-instruct"))
