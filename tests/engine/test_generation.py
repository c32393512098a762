"""The `Generation` handle: its own cancel and stats, close / `with` releasing the engine,
waiting or EngineBusyError for a second generation, and `prepare` without an Engine.
Fake backends for the logic; the last tests run the same on real weights."""

from __future__ import annotations

import threading
import time

import pytest

from localspec.engine import ChatMessage, Engine, Generation, GenerationRequest
from localspec.engine.fake import FakeBackend
from localspec.engine.request import Limits, prepare
from localspec.errors import EngineBusyError, InvalidRequestError

SCRIPT = "The quick brown fox jumps over the lazy dog. Then it runs home and sleeps."
REST = " brown fox jumps over the lazy dog. Then it runs home and sleeps."


def make_engine(**kw: object) -> Engine:
    return Engine(FakeBackend(SCRIPT, **kw), FakeBackend(SCRIPT, error_rate=0.25, seed=3, **kw),
                  check_invariants=True)


def request(**kw: object) -> GenerationRequest:
    kw.setdefault("prompt", "The quick")
    kw.setdefault("drafter", "model")
    return GenerationRequest(**kw)  # type: ignore[arg-type]


def text_of(gen: Generation) -> str:
    return "".join(ev.text for ev in gen)


class TestCancel:
    def test_cancel_ends_only_this_generation_and_the_engine_stays_usable(self) -> None:
        engine = make_engine(decode_delay_s=0.002)
        gen = engine.generate(request(max_tokens=60))
        events = []
        for ev in gen:
            events.append(ev)
            if len(events) == 4:
                gen.cancel()
        assert events[-1].finish_reason == "cancelled" and gen.finish_reason == "cancelled"
        assert gen.cancelled and not engine.busy
        after = engine.generate(request(max_tokens=100))
        assert text_of(after) == REST
        assert after.finish_reason == "stop" and not after.cancelled

    def test_cancel_before_iteration_never_takes_the_engine(self) -> None:
        engine = make_engine()
        gen = engine.generate(request())
        gen.cancel()
        events = list(gen)
        assert [(e.token_id, e.finish_reason) for e in events] == [(-1, "cancelled")]
        assert engine.target.calls == [] and not gen.started and gen.ended  # type: ignore[attr-defined]
        assert gen.stats.num_steps == 0 and gen.stats.finish_reason == "cancelled"

    def test_cancel_while_waiting_for_the_engine(self) -> None:
        engine = make_engine(decode_delay_s=0.005)
        first = engine.generate(request(max_tokens=100))
        next(first)  # `first` holds the engine
        second = engine.generate(request(max_tokens=100))
        result: list[str | None] = []
        waiter = threading.Thread(target=lambda: result.append(list(second)[-1].finish_reason))
        waiter.start()
        time.sleep(0.1)
        assert waiter.is_alive()  # waiting for the engine
        second.cancel()
        waiter.join(5)
        assert result == ["cancelled"] and not second.started
        assert "".join(ev.text for ev in first) == REST[1:]  # `first` was not disturbed
        assert first.finish_reason == "stop"

    def test_a_late_cancel_is_a_no_op(self) -> None:
        engine = make_engine()
        gen = engine.generate(request(max_tokens=10))
        list(gen)
        gen.cancel()
        assert gen.finish_reason == "length" and not gen.cancelled


class TestStats:
    def test_stats_belong_to_their_generation(self) -> None:
        engine = make_engine()
        spec = engine.generate(request(gamma=4, max_tokens=30))
        list(spec)
        plain = engine.generate(request(drafter="none", max_tokens=10))
        list(plain)
        s, p = spec.stats, plain.stats
        assert (s.num_generated_tokens, p.num_generated_tokens) == (30, 10)
        assert s.num_accepted_tokens > 0 and p.num_draft_tokens == 0
        assert s.drafter == "model(γ=4)" and p.drafter == "none"
        assert s.num_requests == p.num_requests == 1
        assert engine.stats().num_generated_tokens == 10  # the engine forwards to the last one
        assert engine.total_stats().num_generated_tokens == 40

    def test_stats_are_live_while_it_runs(self) -> None:
        engine = make_engine()
        gen = engine.generate(request(max_tokens=40))
        seen = []
        for ev in gen:
            if ev.token_id >= 0:
                seen.append(gen.stats.num_generated_tokens)
        assert seen == list(range(1, 41))
        assert gen.stats.numerics == "exact" and gen.stats.kernel

    def test_request_is_the_validated_one(self) -> None:
        engine = make_engine(n_ctx=64)
        gen = engine.generate(request(max_tokens=500, temperature=0.5, seed=7))
        r = gen.request
        assert r.prompt_tokens == tuple(b"The quick")
        assert r.max_tokens == 64 - len("The quick")  # capped by the room the prompt leaves
        assert r.params.temperature == 0.5 and r.seed == 7 and r.gamma == engine.default_gamma
        gen.close()


class TestRelease:
    def test_with_block_releases_the_engine_after_a_break(self) -> None:
        engine = make_engine()
        with engine.generate(request(max_tokens=50)) as gen:
            for i, _ in enumerate(gen):
                if i == 2:
                    break
            assert engine.busy
        assert not engine.busy and gen.ended
        assert gen.finish_reason == "cancelled" and gen.stats.num_generated_tokens >= 3
        assert text_of(engine.generate(request(drafter="none", max_tokens=6))) == " brown"

    def test_close_before_iteration(self) -> None:
        engine = make_engine()
        gen = engine.generate(request())
        gen.close()
        assert list(gen) == [] and gen.finish_reason == "cancelled"
        assert engine.target.calls == [] and not engine.busy  # type: ignore[attr-defined]

    def test_dropping_the_handle_releases_the_engine(self) -> None:
        engine = make_engine()
        gen = engine.generate(request(max_tokens=50))
        next(gen)
        assert engine.busy
        del gen
        assert not engine.busy

    def test_close_from_another_thread_while_iterating_only_cancels(self) -> None:
        engine = make_engine(decode_delay_s=0.02)
        gen = engine.generate(request(max_tokens=500))
        threading.Timer(0.15, gen.close).start()
        events = list(gen)  # no "generator already executing": the step loop sees the cancel
        assert events[-1].finish_reason == "cancelled"
        assert not engine.busy

    def test_an_error_in_the_loop_releases_the_engine(self) -> None:
        engine = make_engine()
        real = engine.target.decode

        def broken(tokens, all_logits=False):  # type: ignore[no-untyped-def]
            raise RuntimeError("boom")

        engine.target.decode = broken  # type: ignore[method-assign]
        with pytest.raises(RuntimeError, match="boom"):
            list(engine.generate(request()))
        engine.target.decode = real  # type: ignore[method-assign]
        assert not engine.busy


class TestOneAtATime:
    def test_a_second_generation_waits_for_the_first(self) -> None:
        engine = make_engine(decode_delay_s=0.002)
        first = engine.generate(request(max_tokens=30))
        next(first)
        second = engine.generate(request(drafter="none", max_tokens=6))
        out: list[str] = []
        waiter = threading.Thread(target=lambda: out.append(text_of(second)))
        waiter.start()
        time.sleep(0.1)
        assert waiter.is_alive() and not second.started
        first.close()
        waiter.join(5)
        assert out == [" brown"]

    def test_without_wait_a_busy_engine_raises(self) -> None:
        engine = make_engine()
        first = engine.generate(request(max_tokens=30))
        pending = engine.generate(request(), wait=False)  # created while idle: checked again at start
        next(first)
        with pytest.raises(EngineBusyError):
            engine.generate(request(), wait=False)
        with pytest.raises(EngineBusyError):
            next(pending)
        first.close()
        assert text_of(engine.generate(request(drafter="none", max_tokens=6), wait=False)) == " brown"


class TestPrepare:
    def test_prepare_needs_only_a_tokenizer_and_limits(self) -> None:
        tok = FakeBackend(SCRIPT)
        limits = Limits(n_ctx=128, default_gamma=3)
        p = prepare(GenerationRequest(messages=(ChatMessage("user", "hi"),), max_tokens=500), tok, limits)
        assert bytes(p.prompt_tokens).decode() == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        assert p.gamma == 3 and p.max_tokens == 128 - len(p.prompt_tokens)
        with pytest.raises(InvalidRequestError, match="-md"):
            prepare(GenerationRequest(prompt="x", drafter="model"), tok, limits)


@pytest.mark.models
class TestRealWeights:
    """The handle on SmolLM2 drafting for itself, with real llama.cpp decoding."""

    REQ = GenerationRequest(messages=(ChatMessage("user", "Count from one to thirty in words."),),
                            max_tokens=48, drafter="model", gamma=4)

    def test_cancel_one_generation_then_the_next_is_correct(self, smol_engine: Engine) -> None:
        with smol_engine.generate(self.REQ) as full:
            expected = text_of(full)
        full_stats = full.stats
        with smol_engine.generate(self.REQ) as gen:
            events = []
            for ev in gen:
                events.append(ev)
                if len(events) == 5:
                    gen.cancel()
        assert events[-1].finish_reason == "cancelled" and len(events) < 5 + 6
        assert gen.stats.num_generated_tokens < full_stats.num_generated_tokens
        assert full.stats == full_stats  # the cancelled generation did not touch the first one's stats
        with smol_engine.generate(self.REQ) as again:
            assert text_of(again) == expected
        assert again.stats.num_generated_tokens == full_stats.num_generated_tokens

    def test_with_block_releases_the_engine(self, smol_engine: Engine) -> None:
        with smol_engine.generate(self.REQ) as gen:
            next(gen)
            assert smol_engine.busy
        assert not smol_engine.busy and gen.finish_reason == "cancelled"
        with pytest.raises(EngineBusyError):
            with smol_engine.generate(self.REQ) as holder:
                next(holder)
                smol_engine.generate(self.REQ, wait=False)
        assert not smol_engine.busy
