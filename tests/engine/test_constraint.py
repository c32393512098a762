"""Constrained decoding on fake backends: grammar errors, masks, rollback, greedy lossless
under a grammar, and the T>0 distribution of two constrained tokens (where the second
token's mask depends on the first, so drafted-and-accepted paths matter)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from localspec.engine import Engine, GenerationRequest
from localspec.engine.constraint import GrammarCursor, compile_grammar, grammar_tokenizer
from localspec.engine.drafters import DraftProposal
from localspec.engine.fake import FakeBackend
from localspec.errors import InvalidRequestError
from localspec.kernels.reference import probs_from_logits
from localspec.types import Constraint, SamplingParams

SCRIPT = '{"name": "Ada", "age": 36, "tags": ["math", "poetry"]} and then some free text.'
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                   "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "age", "tags"], "additionalProperties": False,
}


def _engine(script: str = SCRIPT, **kw: object) -> Engine:
    return Engine(FakeBackend(script, **kw), FakeBackend(script, error_rate=0.3, seed=3, **kw), check_invariants=True)


def _tokens(engine: Engine, **kw: object) -> tuple[list[int], str]:
    events = list(engine.generate(GenerationRequest(**kw)))
    return [e.token_id for e in events if e.token_id >= 0], "".join(e.text for e in events)


def _valid(obj: object) -> bool:
    return (isinstance(obj, dict) and set(obj) == {"name", "age", "tags"} and isinstance(obj["name"], str)
            and isinstance(obj["age"], int) and all(isinstance(t, str) for t in obj["tags"]))


class TestCompile:
    @pytest.mark.parametrize("source, fragment", [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (json.dumps({"type": "object", "properties": {"a": {"type": "string", "format": "no-such-format"}}}),
         "no-such-format"),
        (json.dumps({"type": "strnig"}), "strnig"),
    ])
    def test_bad_schemas_name_the_problem(self, source: str, fragment: str) -> None:
        with pytest.raises(InvalidRequestError) as e:
            compile_grammar(Constraint("json_schema", source))
        assert e.value.param == "response_format" and fragment in str(e.value)

    def test_unknown_kind(self) -> None:
        with pytest.raises(InvalidRequestError, match="constraint kind"):
            compile_grammar(Constraint("yaml"))

    def test_bad_schema_is_refused_before_any_compute(self) -> None:
        engine = _engine()
        with pytest.raises(InvalidRequestError):
            engine.generate(GenerationRequest(prompt="x", constraint=Constraint("json_schema", '{"type": 3}')))
        assert engine.target.calls == []


class TestCursor:
    def test_masks_follow_drafts_and_roll_back(self) -> None:
        model = FakeBackend(SCRIPT)
        tok = grammar_tokenizer(model)
        cur = GrammarCursor(tok, compile_grammar(Constraint("lark", 'start: "ab" /[0-9]+/ "c"')), model.n_vocab)
        assert np.flatnonzero(cur.allowed()).tolist() == [ord("a")]
        # "a", "b", "x": the third draft leaves the grammar and is cut
        cut = cur.follow(DraftProposal((ord("a"), ord("b"), ord("x")), None, "t"), guided=False)
        assert cut.tokens == (ord("a"), ord("b")) and cur.depth == 2
        assert set(np.flatnonzero(cur.allowed()).tolist()) == {ord(c) for c in "0123456789"}
        logits = np.zeros((3, model.n_vocab), dtype=np.float32)
        masked = cur.mask_rows(logits)
        assert np.isfinite(masked[0]).sum() == 1 and np.isfinite(masked[1]).sum() == 1
        assert np.isfinite(masked[2]).sum() == 10
        cur.commit(1, ord("b"))  # kept "a", then emitted "b": back at depth 0 after "ab"
        assert cur.depth == 0 and set(np.flatnonzero(cur.allowed()).tolist()) == {ord(c) for c in "0123456789"}

    def test_sampled_drafts_of_an_unguided_drafter_lose_their_q(self) -> None:
        model = FakeBackend(SCRIPT)
        cur = GrammarCursor(grammar_tokenizer(model), compile_grammar(Constraint("lark", 'start: "ab"')), model.n_vocab)
        q = np.zeros((2, model.n_vocab), dtype=np.float32)
        out = cur.follow(DraftProposal((ord("a"), ord("b")), q, "t"), guided=False)
        assert out.tokens == (ord("a"), ord("b")) and out.logits is None

    def test_end_of_generation_is_never_drafted(self) -> None:
        model = FakeBackend(SCRIPT)
        cur = GrammarCursor(grammar_tokenizer(model), compile_grammar(Constraint("lark", 'start: "a"')), model.n_vocab)
        assert cur.push(ord("a"))
        assert cur.allowed()[256]  # EOS allowed next ...
        assert not cur.push(256)  # ... but left to the target


class TestGreedyUnderAGrammar:
    @pytest.mark.parametrize("drafter", ["model", "ngram", "adaptive"])
    @pytest.mark.parametrize("gamma", [1, 4, 8])
    def test_speculative_equals_plain_and_validates(self, drafter: str, gamma: int) -> None:
        engine = _engine()
        c = Constraint("json_schema", json.dumps(SCHEMA))
        plain, text = _tokens(engine, prompt="Ada:", drafter="none", max_tokens=80, constraint=c)
        spec, spec_text = _tokens(engine, prompt="Ada:", drafter=drafter, gamma=gamma, max_tokens=80, constraint=c)
        assert spec == plain and spec_text == text
        assert _valid(json.loads(text))
        assert engine.total_stats().num_accepted_tokens > 0

    def test_the_mask_changes_the_output(self) -> None:
        """The fake model wants to write its script after "x"; the grammar forces JSON instead."""
        engine = _engine("x" + SCRIPT)
        free = _tokens(engine, prompt="x", drafter="none", max_tokens=10)[1]
        forced = _tokens(engine, prompt="x", drafter="model", max_tokens=60, constraint=Constraint("json_object"))[1]
        assert not free.startswith("{") and isinstance(json.loads(forced), dict)


GRAMMAR = 'start: /[a-h]/ /[a-h]/'
"""Two tokens of eight letters: 64 outcomes, each (second) mask after a drafted first token."""


def _expected_pairs(target: FakeBackend, prompt: str, params: SamplingParams) -> np.ndarray:
    """The constrained target alone: P(t1, t2) with both rows masked to a..h."""
    letters = [ord(c) for c in "abcdefgh"]
    toks = target.tokenize(prompt)
    out = np.zeros((8, 8))
    target.truncate(0)
    target.decode(toks[:-1])
    row = target.decode(toks[-1:])[0].copy()
    p1 = probs_from_logits(np.where(np.isin(np.arange(row.size), letters), row, -np.inf), params)
    for i, a in enumerate(letters):
        target.truncate(len(toks))
        row2 = target.decode([a])[0]
        p2 = probs_from_logits(np.where(np.isin(np.arange(row2.size), letters), row2, -np.inf), params)
        out[i] = p1[a] * p2[letters]
    return out


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_two_token_distribution_under_a_mask(drafter: str) -> None:
    """χ² over N=3000 seeded generations: (t1, t2) under the grammar ~ the masked target."""
    script = "abcahgfbcdeabgh"
    target = FakeBackend(script, confidence=1.5, noise=1.0, seed=0)
    draft = FakeBackend(script, confidence=1.5, noise=1.0, seed=9, error_rate=0.3)
    engine = Engine(target, draft)
    params = SamplingParams(temperature=0.9)
    prompt = script + script[:3]
    c = Constraint("lark", GRAMMAR)
    n = 3000
    counts = np.zeros((8, 8))
    for seed in range(n):
        toks, text = _tokens(engine, prompt=prompt, drafter=drafter, gamma=3, temperature=0.9, seed=seed,
                             max_tokens=3, constraint=c)
        counts["abcdefgh".index(text[0]), "abcdefgh".index(text[1])] += 1
    assert engine.total_stats().num_accepted_tokens > 0
    expected = _expected_pairs(FakeBackend(script, confidence=1.5, noise=1.0, seed=0), prompt, params) * n
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    assert stats.chisquare(obs, exp).pvalue > 1e-3
