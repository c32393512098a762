"""One generation at a time: the bounded queue (429 + Retry-After) and cancellation when a client
disconnects (streamed or not), on slowed-down fake engines."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from localspec.engine import GenerationRequest
from localspec.server.scheduler import GenerationQueue, QueueFullError
from tests.server.conftest import LiveServer, fake_engine, post_json

LONG = "".join(f"{i} " for i in range(3000))  # a script the fake can follow for ~14k tokens
MSGS = [{"role": "user", "content": "Count."}]
START = "0 1 2 3 4 5 6"  # unique in LONG: the fake continues it for thousands of tokens


def slow_engine(delay: float = 0.004) -> object:
    return fake_engine(LONG, decode_delay_s=delay, n_ctx=16384)


def cancelled_count(srv: LiveServer) -> float:
    for line in httpx.get(srv.url + "/metrics").text.splitlines():
        if line.startswith('localspec:request_success_total{finished_reason="cancelled"}'):
            return float(line.split()[-1])
    return 0.0


def test_queue_full_gets_429_with_retry_after_and_no_500(make_server) -> None:
    srv = make_server(slow_engine(0.01), max_queue=1, retry_after_s=3)
    body = {"messages": MSGS, "max_tokens": 30, "temperature": 0}
    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(lambda _: post_json(srv.base + "/chat/completions", body), range(6)))
    statuses = sorted(r.status_code for r in responses)
    assert set(statuses) <= {200, 429}, statuses
    assert statuses.count(200) >= 2 and statuses.count(429) >= 1, statuses
    rejected = next(r for r in responses if r.status_code == 429)
    assert rejected.headers["retry-after"] == "3"
    assert rejected.json()["error"]["type"] == "rate_limit_error"
    texts = {r.json()["choices"][0]["message"]["content"] for r in responses if r.status_code == 200}
    assert len(texts) == 1  # every admitted request got the same (greedy) full reply
    with pytest.raises(openai.RateLimitError):
        with ThreadPoolExecutor(4) as pool:
            client = srv.openai()
            list(pool.map(lambda _: client.chat.completions.create(model="x", messages=MSGS, max_tokens=30),
                          range(4)))
    srv.wait_idle()
    assert 'status="500"' not in httpx.get(srv.url + "/metrics").text


def test_queue_within_limit_serves_everyone(make_server) -> None:
    srv = make_server(slow_engine(0.002), max_queue=4)
    body = {"prompt": "0 1 2 3", "max_tokens": 12, "temperature": 0}
    with ThreadPoolExecutor(5) as pool:
        responses = list(pool.map(lambda _: post_json(srv.base + "/completions", body), range(5)))
    assert [r.status_code for r in responses] == [200] * 5
    assert {r.json()["choices"][0]["text"] for r in responses} == {" 4 5 6 7 8 9"}


def test_stream_disconnect_cancels_generation_and_next_request_works(make_server) -> None:
    srv = make_server(slow_engine())
    body = {"prompt": START, "max_tokens": 8000, "temperature": 0, "stream": True}
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", srv.base + "/completions", json=body) as r:
            assert r.status_code == 200
            lines = 0
            for line in r.iter_lines():
                lines += line.startswith("data: ")
                if lines >= 5:
                    break
    t0 = time.monotonic()
    srv.wait_idle()
    assert time.monotonic() - t0 < 3.0
    stats = srv.engine.stats()
    assert stats.finish_reason == "cancelled"
    assert stats.num_generated_tokens < 1000
    assert cancelled_count(srv) == 1
    r = post_json(srv.base + "/completions", {"prompt": "0 1 2", "max_tokens": 6, "temperature": 0})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == " 3 4 5"
    assert srv.engine.stats().finish_reason == "length"


def test_non_stream_disconnect_cancels_generation(make_server) -> None:
    srv = make_server(slow_engine())
    body = {"prompt": START, "max_tokens": 8000, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):
        post_json(srv.base + "/completions", body, timeout=0.5)
    srv.wait_idle(timeout=5)
    stats = srv.engine.stats()
    assert stats.finish_reason == "cancelled" and stats.num_generated_tokens < 2000
    r = post_json(srv.base + "/chat/completions", {"messages": MSGS, "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200


class TestGenerationQueue:
    async def test_queue_rejects_beyond_max_and_closes_iterator(self) -> None:
        engine = slow_engine(0.002)
        queue = GenerationQueue(engine, max_queue=0, retry_after_s=2)
        req = GenerationRequest(prompt=START, max_tokens=20)
        first = await queue.start(engine.generate(req))
        with pytest.raises(QueueFullError) as exc:
            await queue.start(engine.generate(req))
        assert exc.value.status == 429 and exc.value.headers["Retry-After"] == "2"
        text = "".join([ev.text async for ev in first.events()])
        assert text.startswith(" 7 8 9 10")
        await first.wait_closed()

    async def test_stale_cancel_does_not_hit_the_next_generation(self) -> None:
        engine = slow_engine(0.001)
        queue = GenerationQueue(engine, max_queue=2)
        req = GenerationRequest(prompt="0 1", max_tokens=10)
        first = await queue.start(engine.generate(req))
        _ = [ev async for ev in first.events()]
        second = await queue.start(engine.generate(req))
        first.cancel()  # late: `first` has already finished
        events = [ev async for ev in second.events()]
        assert events[-1].finish_reason == "length"
        assert second.finish_reason == "length"

    async def test_cancel_stops_within_a_step(self) -> None:
        engine = slow_engine(0.01)
        queue = GenerationQueue(engine, max_queue=2)
        gen = await queue.start(engine.generate(GenerationRequest(prompt=START, max_tokens=5000)))
        seen = 0
        async for _ev in gen.events():
            seen += 1
            if seen == 3:
                gen.cancel()
        await gen.wait_closed()
        assert gen.finish_reason == "cancelled"
        assert gen.stats is not None and gen.stats.num_generated_tokens < 40
        await asyncio.sleep(0.05)
        assert queue.running == 0 and not engine.busy

    async def test_tokens_emitted_together_arrive_as_one_batch(self) -> None:
        from localspec.engine import Generation
        from localspec.types import TokenEvent, TokenSource

        burst_done, go = threading.Event(), threading.Event()

        def steps(stats, cancel):  # type: ignore[no-untyped-def]  # two steps: 3 tokens, then 2 and the end
            for i in range(3):
                yield TokenEvent(i, f"t{i} ", TokenSource.ACCEPTED, 0)
            burst_done.set()
            go.wait(5)
            for i in range(3, 5):
                yield TokenEvent(i, f"t{i} ", TokenSource.ACCEPTED, 1)
            stats.finish_reason = "length"
            yield TokenEvent(-1, "", TokenSource.BONUS, 1, finish_reason="length")

        engine = slow_engine()
        scripted = Generation(engine.generate(GenerationRequest(prompt="0")).request, threading.Lock(), steps)
        queue = GenerationQueue(engine, max_queue=1)
        gen = await queue.start(scripted)
        assert burst_done.wait(5)  # blocks the loop: the whole first step is put before it runs
        batches = gen.batches()
        first = await anext(batches)
        go.set()
        rest = [b async for b in batches]
        assert [ev.token_id for ev in first] == [0, 1, 2]
        assert [[ev.token_id for ev in b] for b in rest] in ([[3, 4, -1]], [[3], [4, -1]], [[3, 4], [-1]],
                                                             [[3], [4], [-1]])
        assert gen.finish_reason == "length"
        await gen.wait_closed()


def test_engine_failure_mid_stream_is_an_error_event(make_server, monkeypatch: pytest.MonkeyPatch) -> None:
    srv = make_server()
    engine = srv.engine
    real = engine.target.decode
    calls = {"n": 0}

    def flaky(tokens, all_logits=False):  # type: ignore[no-untyped-def]  # every 3rd target forward fails
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            raise RuntimeError("boom")
        return real(tokens, all_logits)

    monkeypatch.setattr(engine.target, "decode", flaky)
    r = post_json(srv.base + "/chat/completions", {"messages": MSGS, "max_tokens": 20, "stream": True,
                                                   "temperature": 0})
    lines = [ln for ln in r.text.split("\n") if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(ln[6:]) for ln in lines[:-2]]
    assert any(c["choices"][0]["delta"].get("content") for c in chunks)  # text came before the failure
    assert '"internal_server_error"' in lines[-2]
    r = post_json(srv.base + "/chat/completions", {"messages": MSGS, "max_tokens": 20})
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_server_error"
    monkeypatch.setattr(engine.target, "decode", real)
    assert post_json(srv.base + "/chat/completions", {"messages": MSGS, "max_tokens": 3}).status_code == 200
    assert threading.active_count() < 50
