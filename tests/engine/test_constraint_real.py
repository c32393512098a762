"""Constrained decoding on the real offline Qwen pair in exact numerics: JSON-schema output
with speculation equals the output without it (model drafter, prompt lookup, adaptive),
both equal an independent plain constrained loop, the output validates against its schema,
and at T>0 the speculative first token under a mask is distributed as the masked target."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

from schema_check import errors  # noqa: E402

from localspec.engine import ChatMessage, Constraint, Engine, GenerationRequest  # noqa: E402
from localspec.engine.constraint import GrammarCursor, compile_grammar, grammar_tokenizer  # noqa: E402
from localspec.engine.llama.backend import LlamaCppBackend  # noqa: E402
from localspec.kernels.reference import probs_from_logits  # noqa: E402
from localspec.types import ModelSpec, SamplingParams  # noqa: E402

pytestmark = pytest.mark.models

ROWS = [json.loads(line) for line in
        (Path(__file__).resolve().parents[2] / "models/prompts/json_schema.jsonl").read_text().splitlines()]
CASES = [r for r in ROWS if r["question_id"] in ("json-person", "json-invoice", "json-bugreport")]
MAX_TOKENS = 96


@pytest.fixture(scope="module")
def qwen(qwen_target_path: Path, qwen_draft_path: Path) -> Iterator[Engine]:
    target = LlamaCppBackend(ModelSpec(str(qwen_target_path), n_ctx=1024, numerics="exact"))
    draft = LlamaCppBackend(ModelSpec(str(qwen_draft_path), n_ctx=1024, numerics="exact"))
    engine = Engine(target, draft, check_invariants=True)
    yield engine
    engine.close()


def _messages(row: dict) -> tuple[ChatMessage, ...]:
    return (ChatMessage("system", "Answer with JSON only."), ChatMessage("user", row["turns"][0]))


def _run(engine: Engine, row: dict, **kw: object) -> tuple[list[int], str, str]:
    req = GenerationRequest(messages=_messages(row), max_tokens=MAX_TOKENS,
                            constraint=Constraint("json_schema", json.dumps(row["schema"])), **kw)  # type: ignore[arg-type]
    events = list(engine.generate(req))
    return [e.token_id for e in events if e.token_id >= 0], "".join(e.text for e in events), events[-1].finish_reason or ""


def _plain_constrained(engine: Engine, row: dict) -> list[int]:
    """The target alone, one row per token, argmax over the grammar's mask; independent of
    the step loop (it uses only the cursor at depth 0)."""
    t = engine.target
    cur = GrammarCursor(grammar_tokenizer(t), compile_grammar(Constraint("json_schema", json.dumps(row["schema"]))),
                        t.n_vocab)
    prompt = engine.tokenize(engine.render_chat(_messages(row)))
    t.truncate(0)
    row_logits = t.decode(prompt)[-1]
    out: list[int] = []
    while len(out) < MAX_TOKENS:
        tok = int(np.argmax(np.where(cur.allowed(), row_logits, -np.inf)))
        if t.is_eog(tok):
            break
        out.append(tok)
        cur.commit(0, tok)
        row_logits = t.decode([tok])[-1]
    t.truncate(0)
    return out


@pytest.mark.parametrize("row", CASES, ids=[r["question_id"] for r in CASES])
def test_constrained_speculation_equals_plain_and_validates(qwen: Engine, row: dict) -> None:
    plain, text, reason = _run(qwen, row, drafter="none")
    assert plain == _plain_constrained(qwen, row)
    if reason == "stop":
        assert errors(json.loads(text), row["schema"]) == [], text
    for drafter, gamma in (("model", 4), ("ngram", 3), ("adaptive", 6)):
        spec, spec_text, spec_reason = _run(qwen, row, drafter=drafter, gamma=gamma)
        assert spec == plain, (drafter, spec_text, text)
        assert spec_reason == reason
    assert qwen.total_stats().num_accepted_tokens > 0


def test_all_schema_prompts_validate_under_the_model_drafter(qwen: Engine) -> None:
    for row in ROWS:
        _, text, reason = _run(qwen, row, drafter="model", gamma=4)
        if reason == "stop":
            assert errors(json.loads(text), row["schema"]) == [], (row["question_id"], text)
        else:  # cut by max_tokens: still a prefix the grammar allowed, checked by its cursor
            assert reason == "length"


WORDS = ("red", "green", "blue", "yellow", "purple", "orange")


def test_sampled_first_token_under_a_mask_is_the_masked_target(qwen: Engine) -> None:
    """χ² over N=300 seeded generations with the model drafter at T=1: the first token,
    constrained to start one of six words, ~ the target's masked distribution."""
    msgs = (ChatMessage("user", "Name one color. Answer with a single lowercase word."),)
    grammar = "start: " + " | ".join(f'"{w}"' for w in WORDS)
    params = SamplingParams(temperature=1.0)
    t = qwen.target
    allowed = np.array([bool(b) and any(w.encode().startswith(b) for w in WORDS)
                        for b in (t.token_bytes(i) for i in range(qwen.info.n_vocab))])
    prompt = qwen.tokenize(qwen.render_chat(msgs))
    t.truncate(0)
    row = t.decode(prompt)[-1][: qwen.info.n_vocab].copy()
    t.truncate(0)
    p = probs_from_logits(np.where(allowed, row, -np.inf), params)
    n = 300
    counts = np.zeros_like(p)
    accepted0 = qwen.total_stats().num_accepted_tokens
    for seed in range(n):
        req = GenerationRequest(messages=msgs, drafter="model", gamma=3, temperature=1.0, seed=seed,
                                max_tokens=3, constraint=Constraint("lark", grammar))
        events = [e for e in qwen.generate(req) if e.token_id >= 0]
        counts[events[0].token_id] += 1
        assert "".join(e.text for e in events) in WORDS
    assert qwen.total_stats().num_accepted_tokens > accepted0
    assert counts[~allowed].sum() == 0
    expected = p * n
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp).pvalue > 1e-3
