"""The speculative loop on fake backends: rollback, cancel, stops, seeds, errors, distribution.
(The `Generation` handle itself: test_generation.py.)"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from scipy import stats

from localspec.engine import Engine, GenerationRequest, TokenSource
from localspec.engine.cache import CacheInvariantError, check_invariants
from localspec.engine.fake import FakeBackend
from localspec.errors import ContextOverflowError, EngineBusyError, InvalidRequestError
from localspec.kernels.reference import probs_from_logits
from localspec.types import ChatMessage, SamplingParams

SCRIPT = "The quick brown fox jumps over the lazy dog. Then it runs home and sleeps."


def make_engine(error_rate: float = 0.25, **kw: object) -> Engine:
    return Engine(FakeBackend(SCRIPT, **kw), FakeBackend(SCRIPT, error_rate=error_rate, seed=3, **kw),
                  check_invariants=True)


def text_of(events: list) -> str:
    return "".join(e.text for e in events)


def run(engine: Engine, **kw: object) -> list:
    kw.setdefault("prompt", "The quick")
    return list(engine.generate(GenerationRequest(**kw)))


class TestGreedyLossless:
    @pytest.mark.parametrize("drafter", ["model", "ngram", "adaptive"])
    @pytest.mark.parametrize("gamma", [1, 3, 8])
    def test_speculative_equals_plain(self, drafter: str, gamma: int) -> None:
        engine = make_engine()
        plain = run(engine, drafter="none", max_tokens=100)
        spec = run(engine, drafter=drafter, gamma=gamma, max_tokens=100)
        assert [e.token_id for e in spec] == [e.token_id for e in plain]
        assert text_of(spec) == " brown fox jumps over the lazy dog. Then it runs home and sleeps."
        assert spec[-1].finish_reason == "stop"

    def test_sources_and_counts_add_up(self) -> None:
        engine = make_engine()
        gen = engine.generate(GenerationRequest(prompt="The quick", drafter="model", gamma=4, max_tokens=100))
        events = list(gen)
        s = gen.stats
        tokens = [e for e in events if e.token_id >= 0]
        n_acc = sum(e.source is TokenSource.ACCEPTED for e in tokens)
        assert 0 < s.num_accepted_tokens and n_acc <= s.num_accepted_tokens
        assert s.num_output_tokens == s.num_accepted_tokens + s.num_steps
        assert s.mean_acceptance_length == pytest.approx(1 + s.num_accepted_tokens / s.num_steps)
        assert 0 < s.acceptance_rate < 1  # the drafter fake makes mistakes
        assert s.num_steps < len(tokens)  # fewer target forwards than tokens: speculation worked
        assert sum(s.drafted_per_position) == s.num_draft_tokens
        assert sum(s.accepted_per_position) == s.num_accepted_tokens
        assert s.drafted_per_position[0] == s.num_drafts


class TestRollback:
    def test_target_keeps_exactly_last_plus_accepted(self) -> None:
        engine = make_engine()
        tgt = engine.target
        assert isinstance(tgt, FakeBackend)
        run(engine, drafter="model", gamma=4, max_tokens=30)
        decodes = [c for c in tgt.calls if c[0] == "decode"]
        truncs = [c for c in tgt.calls if c[0] == "truncate"]
        # every verify of k+1 tokens that had a rejection is followed by a truncate to n_past+1+accepted
        assert decodes and truncs
        for _, before, after in truncs:
            assert after < before

    def test_invariant_checker_catches_a_broken_cache(self) -> None:
        engine = make_engine()
        run(engine, drafter="model", gamma=4, max_tokens=10)
        context = list(engine.target.tokens) + [65]
        check_invariants(engine.target, context[:], [(engine.draft, False)], full=True)
        engine.target.tokens[-1] ^= 1  # the cache now lies about one token
        with pytest.raises(CacheInvariantError):
            check_invariants(engine.target, context, [(engine.draft, False)], full=True)

    def test_drafter_cache_is_rolled_back_with_the_target(self) -> None:
        engine = make_engine(error_rate=0.5)
        draft = engine.draft
        assert isinstance(draft, FakeBackend)
        run(engine, drafter="model", gamma=4, max_tokens=60)
        # the drafter's rejected drafts were dropped: what it holds is a prefix of the target's context
        assert draft.tokens == engine.target.tokens[: len(draft.tokens)]
        assert any(c[0] == "truncate" for c in draft.calls)

    def test_prefix_cache_reused_between_requests(self) -> None:
        engine = make_engine()
        run(engine, prompt="The quick brown", drafter="model", max_tokens=5)
        gen = engine.generate(GenerationRequest(prompt="The quick brown fox", drafter="model", max_tokens=5))
        list(gen)
        assert gen.stats.num_cached_prompt_tokens >= len("The quick brown")


class TestCancelAndErrors:
    def test_cancel_mid_stream_then_new_request_is_correct(self) -> None:
        engine = make_engine(decode_delay_s=0.002)
        expected = text_of(run(engine, drafter="model", max_tokens=60))
        gen = engine.generate(GenerationRequest(prompt="The quick", drafter="model", max_tokens=60))
        got = []
        for ev in gen:
            got.append(ev)
            if len(got) == 5:
                gen.cancel()
        assert got[-1].finish_reason == "cancelled" and len(got) < 20
        assert gen.stats.finish_reason == "cancelled"
        assert text_of(run(engine, drafter="model", max_tokens=60)) == expected

    def test_cancel_from_another_thread(self) -> None:
        engine = make_engine(decode_delay_s=0.01)
        gen = engine.generate(GenerationRequest(prompt="The quick", drafter="model", max_tokens=500))
        threading.Timer(0.1, gen.cancel).start()
        events = list(gen)
        assert events[-1].finish_reason == "cancelled"

    def test_engine_cancel_forwards_to_the_running_generation(self) -> None:
        engine = make_engine(decode_delay_s=0.01)
        events = []
        with engine.generate(GenerationRequest(prompt="The quick", drafter="model", max_tokens=500)) as gen:
            for event in gen:
                if not events:  # running now: cancel from another thread, as a front end would
                    canceller = threading.Thread(target=engine.cancel)
                    canceller.start()
                    canceller.join()
                events.append(event)
        assert events[-1].finish_reason == "cancelled" and len(events) < 100
        engine.cancel()  # nothing runs: no effect on the next generation
        assert run(engine, drafter="model", max_tokens=5)[-1].finish_reason == "length"

    def test_closing_the_generation_releases_the_engine(self) -> None:
        engine = make_engine()
        gen = engine.generate(GenerationRequest(prompt="The quick", drafter="model", max_tokens=50))
        next(gen), next(gen)
        assert engine.busy
        gen.close()
        assert not engine.busy
        assert text_of(run(engine, drafter="none", max_tokens=8)) == " brown f"

    def test_busy_engine_refuses_without_wait(self) -> None:
        engine = make_engine()
        it = engine.generate(GenerationRequest(prompt="The quick", max_tokens=50))
        next(it)
        with pytest.raises(EngineBusyError):
            next(engine.generate(GenerationRequest(prompt="x"), wait=False))
        it.close()

    @pytest.mark.parametrize(
        "kw, param",
        [
            ({"max_tokens": 0}, "max_tokens"),
            ({"temperature": -1.0}, "temperature"),
            ({"temperature": float("nan")}, "temperature"),
            ({"top_p": 0.0}, "top_p"),
            ({"top_k": -2}, "top_k"),
            ({"gamma": 99}, "gamma"),
            ({"drafter": "magic"}, "drafter"),
            ({"seed": -5}, "seed"),
            ({"prompt": None}, "prompt"),
            ({"stop": tuple(str(i) for i in range(40))}, "stop"),
        ],
    )
    def test_bad_requests_raise_before_any_compute(self, kw: dict, param: str) -> None:
        engine = make_engine()
        with pytest.raises(InvalidRequestError) as info:
            engine.generate(GenerationRequest(**{"prompt": "The quick", **kw}))
        assert info.value.param == param
        assert engine.target.calls == []

    def test_model_drafter_needs_a_draft_model(self) -> None:
        engine = Engine(FakeBackend(SCRIPT))
        with pytest.raises(InvalidRequestError, match="-md"):
            engine.generate(GenerationRequest(prompt="x", drafter="model"))
        assert text_of(run(engine, drafter="adaptive", max_tokens=6)) == " brown"

    def test_prompt_longer_than_context_is_refused(self) -> None:
        engine = make_engine(n_ctx=32)
        with pytest.raises(ContextOverflowError, match="context"):
            engine.generate(GenerationRequest(prompt="x" * 40))

    def test_generation_stops_at_the_context_limit(self) -> None:
        engine = make_engine(n_ctx=24)
        events = run(engine, drafter="model", gamma=8, max_tokens=100)
        assert events[-1].finish_reason == "length"
        assert len(engine.target.tokens) <= 24

    def test_error_inside_the_loop_leaves_engine_usable(self) -> None:
        engine = make_engine()
        expected = text_of(run(engine, drafter="model", max_tokens=20))
        real_decode = engine.target.decode
        calls = {"n": 0}

        def flaky(tokens, all_logits=False):  # type: ignore[no-untyped-def]
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("boom")
            return real_decode(tokens, all_logits)

        engine.target.decode = flaky  # type: ignore[method-assign]
        with pytest.raises(RuntimeError):
            run(engine, drafter="model", max_tokens=20)
        engine.target.decode = real_decode  # type: ignore[method-assign]
        assert not engine.busy
        assert text_of(run(engine, drafter="model", max_tokens=20)) == expected


class TestStopsAndBudget:
    def test_stop_string_is_not_emitted(self) -> None:
        engine = make_engine()
        events = run(engine, drafter="model", stop=("lazy",), max_tokens=100)
        assert text_of(events) == " brown fox jumps over the "
        assert events[-1].finish_reason == "stop"

    def test_max_tokens_counts_emitted_tokens(self) -> None:
        engine = make_engine()
        events = run(engine, drafter="model", gamma=8, max_tokens=7)
        assert len([e for e in events if e.token_id >= 0]) == 7
        assert events[-1].finish_reason == "length"
        assert engine.stats().num_generated_tokens == 7  # the engine-wide convenience: the last generation

    def test_chat_messages_use_the_template(self) -> None:
        engine = make_engine()
        text = engine.render_chat([ChatMessage("system", "be brief"), ChatMessage("user", "hi")])
        assert text == "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        with pytest.raises(InvalidRequestError, match="role"):
            engine.generate(GenerationRequest(messages=(ChatMessage("wizard", "x"),)))


class TestSampling:
    def test_same_seed_same_text(self) -> None:
        engine = make_engine(confidence=2.0)
        a = text_of(run(engine, drafter="model", temperature=0.9, seed=42, max_tokens=40))
        b = text_of(run(engine, drafter="model", temperature=0.9, seed=42, max_tokens=40))
        c = text_of(run(engine, drafter="model", temperature=0.9, seed=43, max_tokens=40))
        assert a == b and a != c

    @pytest.mark.parametrize("drafter", ["model", "ngram"])
    def test_first_token_distribution_matches_target_alone(self, drafter: str) -> None:
        """χ² over N=2000 seeded generations: the engine's speculative first token ~ target p."""
        target = FakeBackend(SCRIPT, confidence=1.5, noise=1.0, seed=0)
        draft = FakeBackend(SCRIPT, confidence=1.5, noise=1.0, seed=9, error_rate=0.3)
        engine = Engine(target, draft)
        params = SamplingParams(temperature=0.9)
        prompt = "The quick brown fox jumps over the lazy dog. Then it runs home and sleeps. The quick"
        n = 2000
        counts = np.zeros(target.n_vocab, dtype=np.int64)
        for seed in range(n):
            events = run(engine, prompt=prompt, drafter=drafter, gamma=3, temperature=0.9, seed=seed, max_tokens=2)
            counts[events[0].token_id] += 1
        assert engine.total_stats().num_accepted_tokens > 0  # drafts were really accepted
        ref = FakeBackend(SCRIPT, confidence=1.5, noise=1.0, seed=0)
        toks = ref.tokenize(prompt)
        ref.decode(toks[:-1])
        expected = probs_from_logits(ref.decode(toks[-1:])[0], params) * n
        big = expected >= 5
        obs = np.append(counts[big], counts[~big].sum())
        exp = np.append(expected[big], expected[~big].sum())
        assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_adaptive_modes_share_the_hardware_costs() -> None:
    """Greedy and sampled requests keep their own acceptance estimates but one measurement
    of what the verify batches and the drafter cost (they describe the machine)."""
    engine = make_engine()
    run(engine, drafter="adaptive", max_tokens=12)
    run(engine, drafter="adaptive", max_tokens=12, temperature=0.8, seed=1)
    greedy, sampled = engine._policy_states[True], engine._policy_states[False]
    assert greedy.verify is sampled.verify and greedy.drafts is sampled.drafts
    assert greedy.acceptance is not sampled.acceptance
    assert greedy.verify.known
