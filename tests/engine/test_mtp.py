"""MTP drafting and hybrid (recurrent) rollback on real llama.cpp, with synthetic `qwen35`
GGUFs written from a seed (synthetic_mtp.py; the tokenizer is the offline Qwen drafter's, so
these tests need the `models` weights).

The fixture is hybrid (a gated-delta-net layer and an attention layer) with one nextn block:
its MTP head drafts, and every rejected draft makes the target's recurrent state step back.
Greedy output must equal an independent plain loop token for token (exact numerics); at T>0
the first two tokens must follow the target's own distribution.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from lossless_tools import first_divergence, plain_greedy
from scipy import stats
from synthetic_mtp import Shape, Tokenizer, read_tokenizer, write_mtp_gguf

from localspec.engine import Engine, GenerationRequest, ModelSpec
from localspec.engine.fake import FakeBackend
from localspec.engine.llama.backend import RS_SNAPSHOTS, LlamaCppBackend
from localspec.errors import InvalidRequestError
from localspec.kernels.reference import probs_from_logits
from localspec.types import Constraint, SamplingParams

PROMPTS = ["def fibonacci(n):", "The capital of France is", "SELECT name FROM users WHERE"]
MAX_TOKENS = 48


@pytest.fixture(scope="session")
def qwen_tokenizer(qwen_draft_path: Path) -> Tokenizer:
    return read_tokenizer(qwen_draft_path)


@pytest.fixture(scope="session")
def mtp_gguf(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Tokenizer) -> Path:
    """The hybrid MTP target (seed 18)."""
    return write_mtp_gguf(tmp_path_factory.mktemp("mtp") / "target.gguf", qwen_tokenizer, seed=18)


@pytest.fixture(scope="session")
def other_gguf(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Tokenizer) -> Path:
    """Another hybrid model with the same tokenizer (seed 19): a drafter that is mostly wrong."""
    return write_mtp_gguf(tmp_path_factory.mktemp("mtp") / "other.gguf", qwen_tokenizer, seed=19, shape=Shape(n_layer=4))


def _target(path: Path, **kw: int | bool) -> LlamaCppBackend:
    return LlamaCppBackend(ModelSpec(str(path), n_ctx=1024, numerics="exact", name="synthetic-qwen35-mtp"), **kw)


@pytest.fixture(scope="module")
def mtp_engine(mtp_gguf: Path) -> Iterator[Engine]:
    engine = Engine(_target(mtp_gguf), check_invariants=True)
    yield engine
    engine.close()


def _run(engine: Engine, prompt: str, **kw: object) -> tuple[list[int], list[int]]:
    """(prompt tokens, output tokens) of one generation."""
    with engine.generate(GenerationRequest(prompt=prompt, **kw)) as gen:  # type: ignore[arg-type]
        out = [e.token_id for e in gen if e.token_id >= 0]
    engine.last = gen.stats  # type: ignore[attr-defined]
    return engine.tokenize(prompt), out



@pytest.mark.models
def test_fixture_is_a_hybrid_target_with_an_mtp_head(mtp_engine: Engine) -> None:
    t = mtp_engine.target
    assert isinstance(t, LlamaCppBackend)
    assert (t.memory_kind, t.n_layer_nextn, t.n_rs_seq) == ("hybrid", 1, RS_SNAPSHOTS)
    assert "mtp" in mtp_engine.drafters and "mtp" in mtp_engine.limits.drafters


@pytest.mark.models
@pytest.mark.slow
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_mtp_greedy_identical_to_plain_loop(mtp_engine: Engine, gamma: int) -> None:
    t = mtp_engine.target
    assert isinstance(t, LlamaCppBackend)
    drafted = accepted = 0
    for text in PROMPTS:
        prompt, spec = _run(mtp_engine, text, max_tokens=MAX_TOKENS, drafter="mtp", gamma=gamma)
        s = mtp_engine.last  # type: ignore[attr-defined]
        drafted, accepted = drafted + s.num_draft_tokens, accepted + s.num_accepted_tokens
        assert s.drafter.startswith("mtp") and s.numerics == "exact"
        plain = plain_greedy(t, prompt, MAX_TOKENS)
        assert len(plain) == MAX_TOKENS
        assert spec == plain, f"{text!r} parts at token {first_divergence(plain, spec)}"
    # drafts were both accepted and rejected: the recurrent state stepped back many times,
    # natively (no re-evaluation) since γ <= the snapshots kept
    assert 0 < accepted < drafted
    assert t.num_reevaluated == 0


@pytest.mark.models
@pytest.mark.slow
@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpoint", "reevaluate"])
def test_hybrid_rollback_without_llama_snapshots(mtp_gguf: Path, checkpoint: bool) -> None:
    """Where llama.cpp keeps no recurrent snapshots (n_rs_seq = 0, e.g. Qwen3-Next, Jamba) the
    backend restores a state saved before the verify and decodes the kept rows again, or
    (checkpoint off) rebuilds the whole kept prefix: slower, same output."""
    t = _target(mtp_gguf, rs_snapshots=0, checkpoint=checkpoint)
    engine = Engine(t, check_invariants=True)
    try:
        assert t.n_rs_seq == 0
        prompt, spec = _run(engine, PROMPTS[0], max_tokens=32, drafter="mtp", gamma=3)
        s = engine.last  # type: ignore[attr-defined]
        rejections = s.num_steps  # at most one rollback per step
        assert s.num_accepted_tokens < s.num_draft_tokens
        assert spec == plain_greedy(t, prompt, 32)
        if checkpoint:  # a few rows per rejection, never the prompt again
            assert 0 < t.num_reevaluated <= rejections * 4
        else:
            assert t.num_reevaluated > len(prompt)
    finally:
        engine.close()


@pytest.mark.models
@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["model", "adaptive"])
def test_hybrid_target_with_a_hybrid_draft_model(mtp_gguf: Path, other_gguf: Path, drafter: str) -> None:
    """Any drafter: a mostly-wrong draft model forces partial rejections every step, and the
    drafter (hybrid too) rolls back by re-evaluation; the output stays the plain one."""
    t = _target(mtp_gguf)
    engine = Engine(t, _target(other_gguf), check_invariants=True)
    try:
        for text in PROMPTS[:2]:
            prompt, spec = _run(engine, text, max_tokens=40, drafter=drafter, gamma=4)
            assert spec == plain_greedy(t, prompt, 40), f"{text!r}"
        if drafter == "model":
            s = engine.total_stats()
            assert s.num_draft_tokens > 40 and s.num_accepted_tokens < s.num_draft_tokens
    finally:
        engine.close()


@pytest.mark.models
@pytest.mark.slow
@pytest.mark.parametrize("snapshots", [True, False], ids=["snapshots", "save-restore"])
def test_hybrid_targets_batch_several_sequences(mtp_gguf: Path, other_gguf: Path, snapshots: bool) -> None:
    """`--parallel`: a hybrid target and a hybrid draft model holding 3 sequences; each
    sequence's recurrent state rolls back on its own (llama.cpp's per-sequence snapshots, or the
    saved state of that sequence), and every request's greedy output is the plain one."""
    import threading

    kw: dict[str, int | bool] = {} if snapshots else {"rs_snapshots": 0}
    engine = Engine(_target(mtp_gguf, n_seq=3, **kw), _target(other_gguf, n_seq=3), check_invariants=True,
                    parallel=3, prefill_chunk=3)
    single = _target(mtp_gguf)
    try:
        gens = [engine.generate(GenerationRequest(prompt=p, max_tokens=24, drafter="model", gamma=3))
                for p in PROMPTS]
        out: dict[int, list[int]] = {}
        threads = [threading.Thread(target=lambda i=i, g=g: out.__setitem__(i, [e.token_id for e in g if e.token_id >= 0]))
                   for i, g in enumerate(gens)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        for i, text in enumerate(PROMPTS):
            assert out[i] == plain_greedy(single, engine.tokenize(text), 24), text
        s = engine.total_stats()
        assert s.num_accepted_tokens < s.num_draft_tokens  # rejections: rollbacks happened
        assert s.batch_sequences > s.num_steps  # the sequences shared verify calls
    finally:
        engine.close()
        single.close()


@pytest.mark.models
@pytest.mark.slow
def test_mtp_sampled_pairs_follow_the_target_distribution(mtp_engine: Engine) -> None:
    """χ² over N seeded generations at T=1, top-k 4: the joint distribution of the first two
    output tokens (accepted or recovered draft, then draft, bonus or recovered) equals the
    target's own p(t1) p(t2 | t1)."""
    t = mtp_engine.target
    assert isinstance(t, LlamaCppBackend)
    params = SamplingParams(temperature=1.0, top_k=4)
    text = PROMPTS[0]
    n = 400
    counts: dict[tuple[int, int], int] = {}
    drafted = accepted = 0
    for seed in range(n):
        _, out = _run(mtp_engine, text, max_tokens=3, drafter="mtp", gamma=2, temperature=1.0, top_k=4, seed=seed)
        counts[(out[0], out[1])] = counts.get((out[0], out[1]), 0) + 1
        drafted += mtp_engine.last.num_draft_tokens  # type: ignore[attr-defined]
        accepted += mtp_engine.last.num_accepted_tokens  # type: ignore[attr-defined]
    assert 0 < accepted < drafted  # drafts (with their q rows) were really accepted and rejected
    prompt = mtp_engine.tokenize(text)
    t.truncate(0)
    p1 = probs_from_logits(t.decode(prompt)[-1], params)
    expected: dict[tuple[int, int], float] = {}
    for a in np.flatnonzero(p1):
        t.truncate(len(prompt))
        p2 = probs_from_logits(t.decode([int(a)])[-1], params)
        for b in np.flatnonzero(p2):
            expected[(int(a), int(b))] = float(p1[a] * p2[b]) * n
    t.truncate(0)
    assert set(counts) <= set(expected), "a pair outside the target's top-k support"
    cells = sorted(expected)
    exp = np.array([expected[c] for c in cells])
    obs = np.array([counts.get(c, 0) for c in cells])
    big = exp >= 5
    assert stats.chisquare(np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())).pvalue > 1e-3


@pytest.mark.models
@pytest.mark.slow
def test_mtp_under_a_grammar_equals_plain(mtp_engine: Engine) -> None:
    """Grammar-masked MTP drafts (guided drafter): same tokens as unspeculated masked decoding."""
    c = Constraint("json_object")
    _, plain = _run(mtp_engine, "JSON:", max_tokens=24, drafter="none", constraint=c)
    _, spec = _run(mtp_engine, "JSON:", max_tokens=24, drafter="mtp", gamma=3, constraint=c)
    assert mtp_engine.last.num_draft_tokens > 0  # type: ignore[attr-defined]
    assert spec == plain, f"parts at token {first_divergence(plain, spec)}"


@pytest.mark.models
def test_mtp_on_a_model_without_nextn_layers_names_it(smol_engine: Engine) -> None:
    assert "mtp" not in smol_engine.drafters
    with pytest.raises(InvalidRequestError, match=r"'mtp' needs .*nextn.* SmolLM2-135M has none"):
        smol_engine.generate(GenerationRequest(prompt="Hi", max_tokens=4, drafter="mtp"))


def test_mtp_request_on_a_fake_target_is_refused_before_compute() -> None:
    engine = Engine(FakeBackend(name="fake-target"))
    assert "mtp" not in engine.drafters
    with pytest.raises(InvalidRequestError, match="fake-target has none") as e:
        engine.generate(GenerationRequest(prompt="Hello", max_tokens=4, drafter="mtp"))
    assert e.value.param == "drafter"


class _FakeHead:
    """An MTP head without weights: logits favour (last token + 1) mod V; records its rows."""

    n_vocab = 16
    t_decode_s = 0.0

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.closed = False

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def truncate(self, n_past: int) -> None:
        del self.tokens[max(0, n_past):]

    def catch_up(self, context: list[int], upto: int) -> int:
        n = max(0, upto - self.n_past)
        self.tokens.extend(context[self.n_past:upto])
        return n

    def _row(self, tok: int) -> np.ndarray:
        row = np.zeros(self.n_vocab, dtype=np.float32)
        row[(tok + 1) % self.n_vocab] = 3.0
        return row

    def draft_row(self, context: list[int]) -> np.ndarray:
        self.catch_up(context, len(context) - 1)
        self.tokens.append(context[-1])
        return self._row(context[-1])

    def chain_row(self, token: int) -> np.ndarray:
        self.tokens.append(token)
        return self._row(token)

    def close(self) -> None:
        self.closed = True


def test_mtp_drafter_keeps_only_rows_fed_by_the_target() -> None:
    from localspec.engine.drafters import MtpDrafter

    head = _FakeHead()
    d = MtpDrafter(head)  # type: ignore[arg-type]
    context = [1, 5, 9]
    d.begin(context)
    assert head.tokens == [1, 5] and d.pending(context) == 1
    p = d.propose(context, 3, SamplingParams(), np.random.default_rng(0))
    assert p.tokens == (10, 11, 12) and p.logits is None and p.drafter == "mtp"
    assert head.tokens == context  # the chain rows (fed the head's own states) are gone again
    assert [n for n, _ in d.decode_log] == [1, 1, 1]
    context = [1, 5, 9, 10, 4]  # d1 accepted, d2 rejected -> recovered 4
    assert d.pending(context) == 2
    p = d.propose(context, 2, SamplingParams(temperature=0.7), np.random.default_rng(0))
    assert p.logits is not None and p.logits.shape == (len(p.tokens), head.n_vocab)
    assert head.tokens == context
    d.begin([1, 7])  # another prompt: only the shared prefix stays
    assert head.tokens == [1]
    d.close()
    assert head.closed
