"""Lossless on real weights: greedy speculative decoding reproduces the target alone.

Batched (verify) and one-token evaluation can differ in the last bits, so outputs may
part at a near-tie; a divergence is allowed only where the target's top-2 logits differ
by less than NEAR_TIE, and the test measures that margin instead of skipping.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from localspec.engine import ChatMessage, Engine, GenerationRequest, ModelSpec, TokenSource

pytestmark = [pytest.mark.models, pytest.mark.slow]

NEAR_TIE = 1e-3

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a JavaScript function that debounces another function.",
    "Write a SQL query that returns the ten customers with the highest total order value.",
    "Implement binary search in C and explain the loop invariant briefly.",
    "Explain in plain words why the sky is blue.",
    "Write a short paragraph about the history of the printing press.",
    "Give five tips for sleeping better and explain each one in two sentences.",
    "Describe a quiet morning in a mountain village.",
]


@pytest.fixture(scope="module")
def qwen_engine(qwen_target_path: Path, qwen_draft_path: Path) -> Iterator[Engine]:
    engine = Engine(ModelSpec(str(qwen_target_path), n_ctx=1024), ModelSpec(str(qwen_draft_path), n_ctx=1024),
                    check_invariants=True)
    yield engine
    engine.close()


def _tokens(engine: Engine, messages: tuple[ChatMessage, ...], **kw: object) -> list[int]:
    return [e.token_id for e in engine.generate(GenerationRequest(messages=messages, **kw)) if e.token_id >= 0]


def _top2_margin(engine: Engine, prefix: list[int]) -> float:
    """Target's top-1 minus top-2 logit after `prefix` (one-token evaluation of the last)."""
    target = engine.target
    target.truncate(0)
    target.decode(prefix[:-1])
    row = np.sort(target.decode(prefix[-1:])[0].astype(np.float64))
    target.truncate(0)  # the engine re-syncs its cache on the next request
    return float(row[-1] - row[-2])


def _first_divergence(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


@pytest.mark.parametrize("question", PROMPTS, ids=[f"p{i}" for i in range(len(PROMPTS))])
def test_greedy_speculative_equals_target_alone(qwen_engine: Engine, question: str) -> None:
    messages = (ChatMessage("user", question),)
    plain = _tokens(qwen_engine, messages, max_tokens=64, drafter="none")
    spec = _tokens(qwen_engine, messages, max_tokens=64, drafter="model", gamma=4)
    stats = qwen_engine.stats()
    assert stats.num_accepted_tokens > 0 and stats.num_steps < len(spec)
    assert len(plain) >= 48  # long enough replies to mean something
    i = _first_divergence(plain, spec)
    if i is None:
        assert spec == plain
        return
    prompt = qwen_engine.tokenize(qwen_engine.render_chat(messages))
    margin = _top2_margin(qwen_engine, prompt + plain[:i])
    assert margin < NEAR_TIE, f"outputs part at token {i} where the target's top-2 margin is {margin:.4g}"


def test_smollm2_drafting_for_itself_accepts_nearly_everything(smol_engine: Engine) -> None:
    """Same weights on both sides: every rejection must be a batched-vs-single near-tie."""
    total_drafted = total_accepted = 0
    for question in ("Write a Python class for a stack.", "Tell me about the moon.", "List five fruits."):
        messages = (ChatMessage("user", question),)
        events = list(smol_engine.generate(GenerationRequest(messages=messages, max_tokens=96,
                                                             drafter="model", gamma=4)))
        s = smol_engine.stats()
        total_drafted += s.num_draft_tokens
        total_accepted += s.num_accepted_tokens
        prompt = smol_engine.tokenize(smol_engine.render_chat(messages))
        out = [e.token_id for e in events if e.token_id >= 0]
        for pos, ev in enumerate(e for e in events if e.token_id >= 0):
            if ev.source is TokenSource.RECOVERED:
                margin = _top2_margin(smol_engine, prompt + out[:pos])
                assert margin < NEAR_TIE, f"rejection at {pos} with top-2 margin {margin:.4g}"
    assert total_drafted > 100
    assert total_accepted / total_drafted >= 0.99


def test_sampling_same_seed_same_text_on_real_weights(smol_engine: Engine) -> None:
    req = GenerationRequest(prompt="Once upon a time", max_tokens=40, temperature=0.8, seed=1234,
                            drafter="model", gamma=3)
    a = "".join(e.text for e in smol_engine.generate(req))
    b = "".join(e.text for e in smol_engine.generate(req))
    assert a == b and len(a) > 20
