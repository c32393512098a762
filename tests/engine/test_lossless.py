"""Lossless on real weights, in both numerics modes, whatever CPU runs the suite.

`exact`: a row's logits do not depend on the batch it is evaluated in, so greedy output with
any drafter, any γ and any prompt split is token-identical to an independent plain greedy
loop — no tolerance. `fast`: llama.cpp's repacked CPU weights, where a row inside a verify
batch can differ from the same row alone; every point where outputs part is replayed from
the engine's recorded calls and evaluated both ways — in its batch shapes (which must give
the engine's token), and with the same tokens at the same positions one row at a time: that
step's rows alone, every recorded row alone, or plain decoding's own shapes (prompt in one
batch, which must give plain decoding's token) — and the argmaxes must differ: the
divergence is the target's own numerics, not the loop. Both modes load here on any host: the AMX decision does not pick
which buffer path the suite tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from lossless_tools import RecordingBackend, explain, first_divergence, plain_greedy

from localspec.engine import ChatMessage, Engine, GenerationRequest, ModelSpec, SpecStats
from localspec.engine.llama.backend import LlamaCppBackend, build_has_amx, use_extra_buffers
from localspec.kernels.reference import probs_from_logits, sample_from_weights
from localspec.types import SamplingParams

pytestmark = [pytest.mark.models, pytest.mark.slow]

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a JavaScript function that debounces another function.",
    "Write a SQL query that returns the ten customers with the highest total order value.",
    "Implement binary search in C and explain the loop invariant briefly.",
    "Explain in plain words why the sky is blue.",
    "Give five tips for sleeping better and explain each one in two sentences.",
]
DRAFTERS = [("model", 4), ("ngram", 3), ("adaptive", 4)]
MAX_TOKENS = 64


@dataclass
class Rig:
    """An engine whose target records every call, plus the bare target for the plain loop."""

    engine: Engine
    target: LlamaCppBackend
    recorder: RecordingBackend

    def run(self, messages: tuple[ChatMessage, ...], **kw: object) -> tuple[list[int], list[int]]:
        """(prompt tokens, output tokens) of one engine generation, recorded from position 0."""
        self.recorder.start()
        return self.resume(messages, **kw)

    def resume(self, messages: tuple[ChatMessage, ...], **kw: object) -> tuple[list[int], list[int]]:
        """Like `run`, but on whatever the caches hold (a multi-turn chat reuses its prefix)."""
        prompt = self.engine.tokenize(self.engine.render_chat(messages))
        with self.engine.generate(GenerationRequest(messages=messages, **kw)) as gen:  # type: ignore[arg-type]
            out = [e.token_id for e in gen if e.token_id >= 0]
        self.stats = gen.stats
        return prompt, out

    stats: SpecStats = field(default_factory=SpecStats)
    """Stats of the last generation."""


def _rig(target_path: Path, draft_path: Path, numerics: str) -> Rig:
    target = LlamaCppBackend(ModelSpec(str(target_path), n_ctx=1024, numerics=numerics))
    recorder = RecordingBackend(target)
    draft = LlamaCppBackend(ModelSpec(str(draft_path), n_ctx=1024, numerics=numerics))
    engine = Engine(recorder, draft, check_invariants=True)  # type: ignore[arg-type]
    return Rig(engine, target, recorder)


@pytest.fixture(scope="module")
def qwen_exact(qwen_target_path: Path, qwen_draft_path: Path) -> Iterator[Rig]:
    rig = _rig(qwen_target_path, qwen_draft_path, "exact")
    yield rig
    rig.engine.close()


@pytest.fixture(scope="module")
def qwen_fast(qwen_target_path: Path, qwen_draft_path: Path) -> Iterator[Rig]:
    rig = _rig(qwen_target_path, qwen_draft_path, "fast")
    yield rig
    rig.engine.close()


@pytest.fixture(scope="module")
def smol_exact(smollm2_path: Path) -> Iterator[Rig]:
    rig = _rig(smollm2_path, smollm2_path, "exact")
    yield rig
    rig.engine.close()


# -- the numerics themselves ------------------------------------------------------------
def _rows_batched_and_alone(b: LlamaCppBackend, prefix: list[int], rows: list[int]) -> tuple[np.ndarray, np.ndarray]:
    b.truncate(0)
    b.decode(prefix)
    batched = b.decode(rows, all_logits=True).copy()
    b.truncate(len(prefix))
    alone = np.stack([b.decode([t])[-1].copy() for t in rows])
    b.truncate(0)
    return batched, alone


def test_exact_rows_do_not_depend_on_their_batch(qwen_exact: Rig) -> None:
    t = qwen_exact.target
    prompt = t.tokenize("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")
    batched, alone = _rows_batched_and_alone(t, prompt[:-5], prompt[-5:])
    np.testing.assert_array_equal(batched, alone)


def test_exact_prompt_split_does_not_change_logits(qwen_exact: Rig) -> None:
    t = qwen_exact.target
    prompt = t.tokenize("The quick brown fox jumps over the lazy dog. " * 6)
    t.truncate(0)
    whole = t.decode(prompt)[-1].copy()
    t.truncate(0)
    for start in range(0, len(prompt), 7):  # uneven chunks
        last = t.decode(prompt[start:start + 7])[-1]
    split = last.copy()
    t.truncate(0)
    np.testing.assert_array_equal(whole, split)


def test_fast_mode_uses_the_repacked_path_on_any_cpu(qwen_fast: Rig) -> None:
    """The fast path really differs: a batched row is not bit-identical to the row alone."""
    if build_has_amx():
        pytest.xfail("a native AMX build: fast mode keeps plain buffers to avoid llama.cpp #20824")
    assert use_extra_buffers("fast") and not use_extra_buffers("exact")
    t = qwen_fast.target
    prompt = t.tokenize("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")
    batched, alone = _rows_batched_and_alone(t, prompt[:-5], prompt[-5:])
    assert np.abs(batched - alone).max() > 0


# -- exact: token-identical, no tolerance ------------------------------------------------
@pytest.mark.parametrize("drafter,gamma", DRAFTERS, ids=[d for d, _ in DRAFTERS])
@pytest.mark.parametrize("question", PROMPTS, ids=[f"p{i}" for i in range(len(PROMPTS))])
def test_exact_greedy_identical_to_plain_loop(qwen_exact: Rig, question: str, drafter: str, gamma: int) -> None:
    messages = (ChatMessage("user", question),)
    prompt, spec = qwen_exact.run(messages, max_tokens=MAX_TOKENS, drafter=drafter, gamma=gamma)
    stats = qwen_exact.stats
    assert stats.numerics == "exact"
    plain = plain_greedy(qwen_exact.target, prompt, MAX_TOKENS)
    assert len(plain) >= 32  # long enough to mean something
    assert spec == plain, f"parts at token {first_divergence(plain, spec)}"
    if drafter == "model":
        assert stats.num_accepted_tokens > 0 and stats.num_steps < len(spec)


def test_exact_multi_turn_reusing_the_prompt_cache(qwen_exact: Rig) -> None:
    engine = qwen_exact.engine
    first = (ChatMessage("user", "Write a Python function that reverses a linked list."),)
    prompt1, out1 = qwen_exact.run(first, max_tokens=48, drafter="model", gamma=4)
    reply = b"".join(engine.target.token_bytes(t) for t in out1).decode("utf-8", "replace")
    second = (*first, ChatMessage("assistant", reply), ChatMessage("user", "Now make it recursive."))
    prompt2, out2 = qwen_exact.resume(second, max_tokens=48, drafter="adaptive", gamma=4)
    assert qwen_exact.stats.num_cached_prompt_tokens > len(prompt1) // 2
    assert out1 == plain_greedy(qwen_exact.target, prompt1, 48)
    assert out2 == plain_greedy(qwen_exact.target, prompt2, 48)


@pytest.mark.parametrize("drafter,gamma", DRAFTERS, ids=[d for d, _ in DRAFTERS])
def test_exact_smollm2_identical_to_plain_loop(smol_exact: Rig, drafter: str, gamma: int) -> None:
    total = SpecStats()
    for question in ("Write a Python class for a stack.", "Tell me about the moon.", "List five fruits."):
        messages = (ChatMessage("user", question),)
        prompt, spec = smol_exact.run(messages, max_tokens=80, drafter=drafter, gamma=gamma)
        total.merge(smol_exact.stats)
        plain = plain_greedy(smol_exact.target, prompt, 80)
        assert spec == plain, f"{question!r} parts at token {first_divergence(plain, spec)}"
    if drafter == "model":  # drafting for itself in the same numerics: every draft is accepted
        assert total.num_draft_tokens > 60 and total.num_accepted_tokens == total.num_draft_tokens


# -- fast: every divergence is a batched-vs-one-row argmax flip ---------------------------
@pytest.mark.parametrize("question", PROMPTS, ids=[f"p{i}" for i in range(len(PROMPTS))])
def test_fast_divergences_are_the_targets_batch_numerics(qwen_fast: Rig, question: str) -> None:
    messages = (ChatMessage("user", question),)
    prompt, spec = qwen_fast.run(messages, max_tokens=MAX_TOKENS, drafter="model", gamma=4)
    assert qwen_fast.stats.numerics == "fast"
    plain = plain_greedy(qwen_fast.target, prompt, MAX_TOKENS)
    i = first_divergence(plain, spec)
    if i is None:
        return
    assert i < min(len(plain), len(spec)), "one output is a prefix of the other: a length bug, not numerics"
    d = explain(qwen_fast.recorder, prompt, plain, spec)
    assert d.argmax_in_batch == d.spec_token, "replaying the engine's calls does not give its token"
    assert d.argmax_plain_shapes == d.plain_token, "the same tokens in plain decoding's shapes do not give its token"
    assert d.level != "none", (
        f"parts at token {i}, yet evaluating the same tokens at the same positions one row at a time "
        f"keeps the batched argmax {d.argmax_in_batch}"
    )
