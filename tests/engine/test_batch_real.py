"""Continuous batching on real weights (the offline Qwen pair in exact numerics): several
requests generated together, verified in one llama_decode per step, give each request the
tokens it gets alone — greedy and seeded sampling, every drafter — and a cancel ends one
sequence without touching the others' caches."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec.engine import ChatMessage, Engine, Generation, GenerationRequest, ModelSpec
from tests.concurrency import concurrently

pytestmark = [pytest.mark.models, pytest.mark.slow]

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain in plain words why the sky is blue.",
    "Write a SQL query that returns the ten customers with the highest total order value.",
]


@pytest.fixture(scope="module")
def engines(qwen_target_path: Path, qwen_draft_path: Path) -> Iterator[tuple[Engine, Engine]]:
    spec = ModelSpec(str(qwen_target_path), n_ctx=1024)
    draft = ModelSpec(str(qwen_draft_path), n_ctx=1024)
    single = Engine(spec, draft, check_invariants=True)
    batched = Engine(spec, draft, check_invariants=True, parallel=3, prefill_chunk=16)
    try:
        # the batched engine is warmed up (what `serve` does): every test below compares it
        # with the single engine, which is not, so the warm-up must leave nothing behind
        assert batched.warm_up() and batched.target.n_past == 0 and batched.draft is not None
        assert batched.draft.n_past == 0 and batched._policy_states[True].draft_cost("model").known
        assert not batched.draft.kv_unified  # a KV stream per sequence: drafts as alone
        yield single, batched
    finally:
        batched.close()
        single.close()


def req(prompt: str, **kw: object) -> GenerationRequest:
    kw.setdefault("max_tokens", 24)
    return GenerationRequest(messages=(ChatMessage("user", prompt),), **kw)  # type: ignore[arg-type]


def ids(gen: Generation) -> list[int]:
    return [ev.token_id for ev in gen if ev.token_id >= 0]


def together(engine: Engine, reqs: list[GenerationRequest]) -> list[list[int]]:
    gens = [engine.generate(r) for r in reqs]
    return concurrently(ids, gens, timeout=600)


@pytest.mark.parametrize("drafter", ["none", "model", "ngram", "adaptive"])
def test_batched_greedy_equals_each_request_alone(engines: tuple[Engine, Engine], drafter: str) -> None:
    single, batched = engines
    reqs = [req(p, drafter=drafter, temperature=0.0, gamma=3) for p in PROMPTS]
    alone = [ids(single.generate(r)) for r in reqs]
    assert together(batched, reqs) == alone
    stats = batched.batch_stats
    assert stats is not None and stats.mean_batch > 1.0


def test_seeded_sampling_reproduces_in_a_batch(engines: tuple[Engine, Engine]) -> None:
    single, batched = engines
    reqs = [req(p, drafter="model", temperature=0.8, seed=11 + i, gamma=3) for i, p in enumerate(PROMPTS)]
    alone = [ids(single.generate(r)) for r in reqs]
    assert together(batched, reqs) == alone
    assert together(batched, list(reversed(reqs))) == list(reversed(alone))


def test_a_cancel_leaves_the_other_sequences_intact(engines: tuple[Engine, Engine]) -> None:
    single, batched = engines
    keep = [req(PROMPTS[0], drafter="model", temperature=0.0), req(PROMPTS[2], drafter="ngram", temperature=0.0)]
    alone = [ids(single.generate(r)) for r in keep]
    victim = batched.generate(req(PROMPTS[1], max_tokens=64, temperature=0.0))
    gens = [batched.generate(r) for r in keep]
    out: dict[int, list[int]] = {}
    threads = [threading.Thread(target=lambda i=i, g=g: out.__setitem__(i, ids(g))) for i, g in enumerate(gens)]
    for t in threads:
        t.start()
    seen = 0
    for ev in victim:
        seen += 1
        if seen == 3:
            victim.cancel()
    for t in threads:
        t.join(timeout=600)
    assert victim.finish_reason == "cancelled"
    assert [out[0], out[1]] == alone


def test_fast_numerics_share_one_unified_cache(qwen_target_path: Path) -> None:
    """`fast`: the sequences share one unified KV cache (one ubatch per step). Logits may then
    differ in the last bits with the batch's make-up, so this checks that it runs right — every
    request ends, its tokens are its own, and its text starts like the request alone — not
    bit-identity."""
    spec = ModelSpec(str(qwen_target_path), n_ctx=512, numerics="fast")
    engine = Engine(spec, parallel=2)
    try:
        assert engine.info.numerics == "fast"
        reqs = [req(p, drafter="ngram", temperature=0.0, max_tokens=16) for p in PROMPTS[:2]]
        got = together(engine, reqs)
        alone = [ids(engine.generate(r)) for r in reqs]
        for g, a in zip(got, alone, strict=True):
            assert 0 < len(g) <= 16 and g[:3] == a[:3]
        assert got[0] != got[1]
    finally:
        engine.close()
