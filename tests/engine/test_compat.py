"""The pair compatibility check on real GGUF headers, before any weights load."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from localspec.compat import check_files, check_pair, pair_problems
from localspec.engine import Engine, ModelSpec
from localspec.errors import IncompatibleModelsError
from localspec.gguf_info import vocab_fingerprint, vocab_info

pytestmark = pytest.mark.models


def test_qwen_pair_is_compatible(qwen_target_path: Path, qwen_draft_path: Path) -> None:
    t, d = check_files(str(qwen_target_path), str(qwen_draft_path))
    assert t.n_vocab == d.n_vocab == 151_936
    assert t.fingerprint == d.fingerprint and t.bos_token_id == 151643 and t.eos_token_id == 151645


def test_smollm2_vs_qwen_is_refused(qwen_target_path: Path, smollm2_path: Path) -> None:
    with pytest.raises(IncompatibleModelsError) as info:
        check_files(str(qwen_target_path), str(smollm2_path))
    msg = str(info.value)
    assert "smollm2-135m" in msg.lower() and "qwen2.5" in msg.lower()  # names both models
    assert "151,936 vs 49,152" in msg and "localspec recommend" in msg


def test_deepseek_near_miss_is_refused(qwen_target_path: Path, deepseek_header_path: Path) -> None:
    """Same tokenizer family, size within 128, but special tokens and bos/eos differ."""
    t, d = vocab_info(qwen_target_path), vocab_info(deepseek_header_path)
    assert abs(t.n_vocab - d.n_vocab) <= 128 and t.tokenizer_model == d.tokenizer_model  # passes naive checks
    with pytest.raises(IncompatibleModelsError) as info:
        check_files(str(qwen_target_path), str(deepseek_header_path))
    msg = str(info.value)
    assert "BOS token id" in msg and "EOS token id" in msg
    assert "shared ids have different text" in msg and "DeepSeek" in msg


def test_engine_refuses_before_loading_weights(qwen_target_path: Path, smollm2_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = []
    monkeypatch.setattr("localspec.engine.engine._load", lambda spec: loaded.append(spec))
    with pytest.raises(IncompatibleModelsError):
        Engine(ModelSpec(str(qwen_target_path)), ModelSpec(str(smollm2_path)))
    assert loaded == []


def test_padding_difference_within_128_is_allowed(qwen_target_path: Path) -> None:
    t = vocab_info(qwen_target_path)
    padded = dataclasses.replace(t, n_vocab=t.n_vocab + 128)
    assert pair_problems(t, padded) == []
    check_pair(t, padded)
    assert pair_problems(t, dataclasses.replace(t, n_vocab=t.n_vocab + 129))


def test_fingerprint_ignores_trailing_padding_only() -> None:
    base = ["a", "b", "<|x|>"]
    assert vocab_fingerprint(base) == vocab_fingerprint(base + ["[PAD3]", "[PAD4]"])
    assert vocab_fingerprint(base) != vocab_fingerprint(["a", "c", "<|x|>"])
