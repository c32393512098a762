"""EAGLE-3, DFlash and DSpark drafters on real llama.cpp, with synthetic drafter GGUFs written
from a seed for the SmolLM2 target (tests/engine/hidden_fixtures.py).

They load and draft through the target's captured hidden states; greedy output in exact
numerics is token-identical to plain decoding; sampled first tokens follow the target's
distribution; pairs a drafter was not made for — another hidden size, layers the target
lacks, a qwen2 target whose graph cannot expose its hidden states — are refused from the
headers, before any weights load, and the native driver refuses a qwen2 target without
aborting the process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hidden_fixtures import write_hidden_drafter
from lossless_tools import plain_greedy
from scipy import stats as sstats

import localspec.engine.engine as engine_mod
from localspec.compat import check_hidden_files
from localspec.engine import ChatMessage, Engine, GenerationRequest, ModelSpec
from localspec.engine.llama.backend import LlamaCppBackend
from localspec.errors import IncompatibleModelsError
from localspec.gguf_info import hidden_drafter_info
from localspec.kernels.reference import probs_from_logits
from localspec.types import SamplingParams

pytestmark = [pytest.mark.models, pytest.mark.slow]

KINDS = ("eagle3", "dflash", "dspark")


@pytest.fixture(scope="session")
def hidden_gguf(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> dict[str, Path]:
    """The three synthetic drafters for SmolLM2, plus ones made for other targets."""
    d = tmp_path_factory.mktemp("hidden")
    files = {k: write_hidden_drafter(d / f"{k}.gguf", k, smollm2_path, seed=7) for k in KINDS}
    files["eagle3-896"] = write_hidden_drafter(d / "eagle3-896.gguf", "eagle3", smollm2_path, seed=7,
                                               hidden_size=896)
    files["dflash-deep"] = write_hidden_drafter(d / "dflash-deep.gguf", "dflash", smollm2_path, seed=7,
                                                target_layers=(1, 20, 40))
    ids = np.sort(np.random.default_rng(3).choice(49152, size=4096, replace=False))
    files["eagle3-d2t"] = write_hidden_drafter(d / "eagle3-d2t.gguf", "eagle3", smollm2_path, seed=7, d2t=ids)
    bad = ids.copy()
    bad[-1] = 50000  # past SmolLM2's 49,152 tokens: made for a larger vocabulary
    files["eagle3-d2t-bad"] = write_hidden_drafter(d / "eagle3-d2t-bad.gguf", "eagle3", smollm2_path, seed=7, d2t=bad)
    return files


def _spec(path: Path) -> ModelSpec:
    return ModelSpec(str(path), n_ctx=1024)


@pytest.fixture(scope="module", params=[*KINDS, "eagle3-d2t"])
def hidden_engine(request: pytest.FixtureRequest, smollm2_path: Path, hidden_gguf: dict[str, Path]) -> Iterator[tuple[str, Engine]]:
    """(kind, an engine: SmolLM2 + that drafter); "eagle3-d2t" drafts over a 4,096-token subset."""
    engine = Engine(_spec(smollm2_path), _spec(hidden_gguf[request.param]), check_invariants=True)
    yield request.param.split("-")[0], engine
    engine.close()


# -- header facts and the pair check (no weights) ----------------------------------------
def test_header_tells_the_mechanism(smollm2_path: Path, hidden_gguf: dict[str, Path]) -> None:
    for kind in KINDS:
        info = hidden_drafter_info(hidden_gguf[kind])
        assert info is not None and info.kind == kind
        assert info.target_layers == (2, 15, 27) and info.target_hidden_size == 576
        assert check_hidden_files(str(smollm2_path), str(hidden_gguf[kind])) == kind
    assert hidden_drafter_info(smollm2_path) is None
    assert check_hidden_files(str(smollm2_path), str(smollm2_path)) is None


def test_drafter_for_another_target_is_refused_before_weights_load(
    smollm2_path: Path, hidden_gguf: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_load(*_: object, **__: object) -> None:
        raise AssertionError("weights were loaded before the pair check")

    monkeypatch.setattr(engine_mod, "_load", no_load)
    with pytest.raises(IncompatibleModelsError, match="expects target hidden size 896, the target has 576"):
        Engine(_spec(smollm2_path), _spec(hidden_gguf["eagle3-896"]))
    with pytest.raises(IncompatibleModelsError, match=r"reads target layers \[1, 20, 40\], the target has 30"):
        Engine(_spec(smollm2_path), _spec(hidden_gguf["dflash-deep"]))
    with pytest.raises(IncompatibleModelsError, match="names target token 50,000, the target vocabulary has 49,152"):
        Engine(_spec(smollm2_path), _spec(hidden_gguf["eagle3-d2t-bad"]))


def test_qwen2_target_is_refused_from_its_header(qwen_target_path: Path, hidden_gguf: dict[str, Path],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_mod, "_load", lambda *_: pytest.fail("weights were loaded"))
    with pytest.raises(IncompatibleModelsError, match="architecture 'qwen2'"):
        Engine(_spec(qwen_target_path), _spec(hidden_gguf["eagle3"]))


def test_driver_refuses_a_qwen2_target_without_aborting(qwen_target_path: Path, hidden_gguf: dict[str, Path]) -> None:
    """The native guard itself: llama.cpp would GGML_ASSERT (abort) if capture were enabled."""
    from localspec.engine.llama.hidden import HiddenStateDraft

    target = LlamaCppBackend(ModelSpec(str(qwen_target_path), n_ctx=256))
    try:
        with pytest.raises(IncompatibleModelsError, match="architecture 'qwen2'"):
            HiddenStateDraft(str(hidden_gguf["eagle3"]), target)
        assert target.decode_hooks == []
        target.decode(target.tokenize("still alive"))  # the target still works, capture was never enabled
    finally:
        target.close()


# -- drafting on real llama.cpp ----------------------------------------------------------
QUESTIONS = ("Write a Python class for a stack.", "Tell me about the moon.")


def _run(engine: Engine, messages: tuple[ChatMessage, ...], **kw: object) -> tuple[list[int], list[int], object]:
    prompt = engine.tokenize(engine.render_chat(messages))
    with engine.generate(GenerationRequest(messages=messages, **kw)) as gen:  # type: ignore[arg-type]
        out = [e.token_id for e in gen if e.token_id >= 0]
    return prompt, out, gen.stats


def test_loads_and_drafts(hidden_engine: tuple[str, Engine]) -> None:
    kind, engine = hidden_engine
    assert kind in engine.drafters and engine.limits.drafters >= {kind, "ngram"}
    d = engine.drafters[kind]
    assert d.name == kind and d.kv_cache is not None
    _, out, st = _run(engine, (ChatMessage("user", QUESTIONS[0]),), max_tokens=24, drafter=kind, gamma=4)
    assert len(out) == 24
    assert st.num_draft_tokens >= 4 * 5  # it drafted at every step
    assert st.drafter.startswith(kind) and st.drafter_counts[kind] >= st.num_steps - 1  # the last step has no room
    assert d.decode_log and all(n > 0 and s > 0 for n, s in d.decode_log)


@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_identical_to_plain_decoding(hidden_engine: tuple[str, Engine], gamma: int) -> None:
    kind, engine = hidden_engine
    for question in QUESTIONS:
        prompt, spec, st = _run(engine, (ChatMessage("user", question),), max_tokens=48, drafter=kind, gamma=gamma)
        assert st.numerics == "exact" and st.num_draft_tokens > 0
        plain = plain_greedy(engine.target, prompt, 48)
        assert spec == plain


def test_multi_turn_reuses_the_cache_and_stays_identical(hidden_engine: tuple[str, Engine]) -> None:
    kind, engine = hidden_engine
    first = (ChatMessage("user", "Name three planets."),)
    p1, out1, _ = _run(engine, first, max_tokens=24, drafter=kind, gamma=3)
    reply = b"".join(engine.target.token_bytes(t) for t in out1).decode("utf-8", "replace")
    second = (*first, ChatMessage("assistant", reply), ChatMessage("user", "And two moons?"))
    p2, out2, st = _run(engine, second, max_tokens=24, drafter="adaptive", gamma=3)
    assert st.num_cached_prompt_tokens > len(p1) // 2
    assert out2 == plain_greedy(engine.target, p2, 24)


def test_sampled_first_token_follows_the_target(hidden_engine: tuple[str, Engine]) -> None:
    """χ² over seeded generations at T>0: the first token of a speculative step (accepted
    draft or residual resample, built from the drafter's q rows) ~ the target's p."""
    kind, engine = hidden_engine
    # a high temperature spreads p and the random drafter's q over many tokens, so drafts are
    # accepted often enough to exercise both branches (accept, and resample from the residual)
    params = SamplingParams(temperature=3.0)
    messages = (ChatMessage("user", "Say a word."),)
    prompt = engine.tokenize(engine.render_chat(messages))
    before = engine.total_stats()
    n = 300
    counts = np.zeros(engine.target.n_vocab, dtype=np.int64)
    for seed in range(n):
        _, out, _ = _run(engine, messages, max_tokens=2, drafter=kind, gamma=3, temperature=3.0, seed=seed)
        counts[out[0]] += 1
    after = engine.total_stats()
    assert after.num_draft_tokens - before.num_draft_tokens >= n  # one draft before the first token
    assert after.num_accepted_tokens > before.num_accepted_tokens  # some drafts really were accepted
    t = engine.target
    t.truncate(0)
    expected = probs_from_logits(t.decode(prompt)[-1].copy(), params) * n
    t.truncate(0)
    # p is spread thin at this temperature: bin the tokens, most probable first, into B bins of
    # about equal expected count (each >= 5), and compare the counts bin by bin
    b = 10
    order = np.argsort(-expected)
    mass = expected[order] / n
    bins = np.minimum(((np.cumsum(mass) - mass) * b).astype(int), b - 1)
    obs = np.bincount(bins, weights=counts[order], minlength=b)
    exp = np.bincount(bins, weights=expected[order], minlength=b)
    assert (exp >= 5).all()
    assert sstats.chisquare(obs, exp).pvalue > 1e-3
