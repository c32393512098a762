"""LlamaCppBackend on real GGUFs: tokenizer, UTF-8 streaming, EOG, chat template, rollback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from localspec.engine import ChatMessage, Engine, GenerationRequest
from localspec.engine.chat import render_chat
from localspec.engine.llama.backend import LlamaCppBackend
from localspec.engine.text import IncrementalDetokenizer
from localspec.errors import ContextOverflowError, ModelLoadError, ModelNotFoundError
from localspec.types import ModelSpec

pytestmark = pytest.mark.models


@pytest.fixture(scope="module")
def smol(smollm2_path: Path) -> Iterator[LlamaCppBackend]:
    b = LlamaCppBackend(ModelSpec(str(smollm2_path), n_ctx=256, n_batch=64))
    yield b
    b.close()


def test_incremental_detokenization_is_utf8_safe(smol: LlamaCppBackend) -> None:
    text = "naïve café — 東京 🚀🎉 ok"
    tokens = smol.tokenize(text, add_special=False)
    pieces = [smol.token_bytes(t) for t in tokens]
    # the test means something only if some character is split across tokens
    assert any(p and not _is_complete_utf8(p) for p in pieces)
    d = IncrementalDetokenizer()
    out = "".join(d.feed(p) for p in pieces) + d.flush()
    assert out == text


def _is_complete_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_eog_and_special_tokens(smol: LlamaCppBackend) -> None:
    im_end = smol.tokenize("<|im_end|>", add_special=False, parse_special=True)
    assert len(im_end) == 1 and smol.is_eog(im_end[0])
    assert not smol.is_eog(smol.tokenize("hello", add_special=False)[0])
    assert smol.token_bytes(im_end[0]) == b""  # control tokens render as nothing


def test_gguf_chat_template_renders_multi_turn(smol: LlamaCppBackend) -> None:
    assert smol.chat_template and "im_start" in smol.chat_template
    text = render_chat(smol.chat_template, [ChatMessage("user", "hi"), ChatMessage("assistant", "hello"),
                                            ChatMessage("user", "bye")])
    assert text.count("<|im_start|>user\n") == 2 and text.endswith("<|im_start|>assistant\n")
    assert "You are a helpful AI assistant named SmolLM" in text  # the template's own default system


def test_truncate_then_decode_matches_a_fresh_evaluation(smol: LlamaCppBackend) -> None:
    tokens = smol.tokenize("The capital of France is Paris. The capital of Italy is", add_special=False)
    smol.truncate(0)
    fresh = smol.decode(tokens, all_logits=True).copy()
    smol.decode(smol.tokenize(" Rome and the rest is noise", add_special=False))
    smol.truncate(len(tokens) - 3)
    assert smol.n_past == len(tokens) - 3 and smol.tokens == tokens[:-3]
    again = smol.decode(tokens[-3:], all_logits=True)
    np.testing.assert_allclose(again, fresh[-3:], rtol=0, atol=1e-3)
    assert int(np.argmax(again[-1])) == int(np.argmax(fresh[-1]))


def test_context_overflow_is_a_clear_error(smol: LlamaCppBackend) -> None:
    smol.truncate(0)
    with pytest.raises(ContextOverflowError, match="ctx-size"):
        smol.decode([1] * 300)
    assert smol.n_past == 0  # nothing half-written


def test_missing_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="models list"):
        LlamaCppBackend(ModelSpec(str(tmp_path / "nope.gguf")))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\0" * 100)
    with pytest.raises(ModelLoadError, match="Re-download"):
        LlamaCppBackend(ModelSpec(str(junk)))


def test_real_engine_cancel_then_next_request_is_correct(smol_engine: Engine) -> None:
    req = GenerationRequest(messages=(ChatMessage("user", "Count from one to thirty in words."),),
                            max_tokens=80, drafter="model", gamma=4)
    expected = "".join(e.text for e in smol_engine.generate(req))
    got = []
    with smol_engine.generate(req) as gen:
        for ev in gen:
            got.append(ev)
            if len(got) == 6:
                gen.cancel()
    assert got[-1].finish_reason == "cancelled" and len(got) < 20
    assert "".join(e.text for e in smol_engine.generate(req)) == expected


def test_decode_many_beyond_n_batch_keeps_every_part_s_logits(smollm2_path: Path) -> None:
    """Parts whose rows exceed n_batch go in several llama_decode calls: the rows of the first
    call must survive the second (llama.cpp reuses one logits buffer), an empty part keeps its
    place, and each sequence's rows equal that sequence evaluated alone (exact numerics)."""
    m = LlamaCppBackend(ModelSpec(str(smollm2_path), n_ctx=256, n_batch=8), n_seq=3)
    try:
        a, b, c = (m.sequence(i) for i in range(3))
        ta = m.tokenize("The capital of France is Paris and", add_special=False)[:6]
        tb = m.tokenize("def fib(n): return", add_special=False)[:6]
        assert len(ta) == len(tb) == 6  # 12 rows > n_batch = 8: two calls
        outs = m.decode_many([(a, ta, True), (c, [], True), (b, tb, True)])
        assert [o.shape[0] for o in outs] == [6, 0, 6]
        got_a, got_b = outs[0].copy(), outs[2].copy()
        assert a.tokens == ta and b.tokens == tb and c.tokens == []
        for view, tokens, got in [(a, ta, got_a), (b, tb, got_b)]:
            view.truncate(0)
            alone = view.decode(tokens, all_logits=True)
            np.testing.assert_array_equal(got, alone)
        assert not np.array_equal(got_a[-1], got_b[-1])
    finally:
        m.close()
