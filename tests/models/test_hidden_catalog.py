"""Catalog records of EAGLE-3 / DFlash / DSpark drafters: runnable when a GGUF of the drafter
exists and the target's llama.cpp graph exposes its hidden states; otherwise listed with the
reason (no GGUF published, a target architecture llama.cpp cannot capture, a recurrent target)."""

from __future__ import annotations

from dataclasses import replace

from localspec.catalog import load_catalog
from localspec.catalog.drafters import CatalogDrafter, drafter_options


def _with(record: CatalogDrafter) -> object:
    cat = load_catalog()
    return replace(cat, drafters=(*cat.drafters, record))


def _record(kind: str, target: str, file: str) -> CatalogDrafter:
    return CatalogDrafter(id=f"test-{kind}", kind=kind, name=f"test {kind}", targets=(target,), repo="x/y",
                          params=1e8, source="test", file=file, ref="https://example.org")


def test_published_records_without_a_gguf_say_how_to_get_one() -> None:
    cat = load_catalog()
    llama = [o for o in drafter_options(cat, cat.model("llama-3.1-8b-instruct")) if o.kind == "eagle3"]
    assert llama and all(not o.runnable and "convert_hf_to_gguf.py" in o.why_not for o in llama)


def test_a_record_with_a_gguf_for_a_capturing_target_is_runnable() -> None:
    for kind in ("eagle3", "dflash", "dspark"):
        cat = _with(_record(kind, "llama-3.1-8b-instruct", "drafter.gguf"))
        opts = drafter_options(cat, cat.model("llama-3.1-8b-instruct"))  # type: ignore[attr-defined]
        mine = next(o for o in opts if o.id == f"test-{kind}")
        assert mine.runnable and mine.status == "runnable"


def test_targets_whose_hidden_states_llama_cpp_cannot_capture_are_not_offered() -> None:
    for target in ("qwen2.5-coder-7b-instruct", "gemma-3-270m-it"):
        cat = _with(_record("eagle3", target, "drafter.gguf"))
        opt = next(o for o in drafter_options(cat, cat.model(target)) if o.id == "test-eagle3")  # type: ignore[attr-defined]
        assert not opt.runnable and "cannot hand out the hidden states" in opt.why_not
