"""`--parallel N`: the server generates N requests together (continuous batching). The official
client over loopback, concurrent requests: each answer equals what the one-at-a-time server
gives it (outputs never mixed), usage is exact, a disconnect cancels only its own stream,
stop strings and seeds hold, and /metrics and `speculative` report the batch. Fake engines
for the logic; the last test runs the Qwen pair."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localspec.engine import Engine, ModelSpec
from localspec.engine.fake import FakeBackend
from tests.concurrency import concurrently
from tests.server.conftest import LiveServer, live_server

SCRIPT = "Hello! I am a fake model. I repeat my script and then stop. " * 3
PROMPTS = ["Hello!", "I am", "a fake", "I repeat", "my script", "and then"]


def batched(n: int = 3, **kw: Any) -> Engine:
    return Engine(FakeBackend(SCRIPT, name="fake-target", n_seq=n, **kw),
                  FakeBackend(SCRIPT, name="fake-draft", error_rate=0.2, seed=1, n_seq=n, **kw), parallel=n)


def single() -> Engine:
    return Engine(FakeBackend(SCRIPT, name="fake-target"), FakeBackend(SCRIPT, name="fake-draft", error_rate=0.2, seed=1))


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[LiveServer, LiveServer]]:
    with live_server(batched(3, decode_delay_s=0.003)) as par, live_server(single()) as one:
        yield par, one
        par.wait_idle()


def ask(srv: LiveServer, prompt: str, **kw: Any) -> Any:
    kw.setdefault("max_tokens", 40)
    return srv.openai().completions.create(model="fake", prompt=prompt, **kw)


def test_concurrent_answers_equal_the_one_at_a_time_server(servers: tuple[LiveServer, LiveServer]) -> None:
    par, one = servers
    kws = [dict(temperature=0.0 if i % 2 else 0.9, seed=i, extra_body={"drafter": d})
           for i, d in enumerate(["model", "ngram", "adaptive", "none", "model", "adaptive"])]
    got = concurrently(lambda i: ask(par, PROMPTS[i], **kws[i]), list(range(6)))
    want = [ask(one, PROMPTS[i], **kws[i]) for i in range(6)]
    for g, w in zip(got, want, strict=True):
        assert g.choices[0].text == w.choices[0].text
        assert g.usage.completion_tokens == w.usage.completion_tokens == len(g.choices[0].text.encode())
    batches = [g.model_extra["speculative"]["mean_batch_size"] for g in got]
    assert max(batches) > 1.0
    metrics = httpx.get(par.url + "/metrics").text
    assert re.search(r"^localspec:num_parallel_slots 3\.0$", metrics, re.M)
    steps = float(re.search(r"^localspec:batch_num_steps_total (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    seqs = float(re.search(r"^localspec:batch_num_sequences_total (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    assert seqs > steps > 0
    assert httpx.get(par.url + "/health").json()["parallel"] == 3


def test_stop_strings_hold_per_request(servers: tuple[LiveServer, LiveServer]) -> None:
    par, one = servers
    stops = [["fake"], ["script"], ["stop."]]
    got = concurrently(lambda i: ask(par, "Hello!", temperature=0, stop=stops[i], max_tokens=100), [0, 1, 2])
    for g, stop in zip(got, stops, strict=True):
        assert g.choices[0].finish_reason == "stop" and stop[0] not in g.choices[0].text
        assert g.choices[0].text == ask(one, "Hello!", temperature=0, stop=stop, max_tokens=100).choices[0].text


def test_a_disconnect_cancels_only_its_stream(servers: tuple[LiveServer, LiveServer]) -> None:
    par, one = servers
    want = [ask(one, p, temperature=0, max_tokens=120).choices[0].text for p in PROMPTS[:2]]

    def leave_early(_: object) -> int:
        n = 0
        with httpx.stream("POST", par.base + "/completions", json={"prompt": "my script", "max_tokens": 150,
                                                                  "stream": True, "temperature": 0}) as r:
            for _line in r.iter_lines():
                n += 1
                if n == 4:
                    break  # the client goes away mid-stream
        return n

    results = concurrently(lambda a: leave_early(a) if a == "leave" else ask(
        par, a, temperature=0, max_tokens=120).choices[0].text, ["leave", *PROMPTS[:2]])
    assert results[1:] == want
    par.wait_idle(timeout=30)
    metrics = httpx.get(par.url + "/metrics").text
    assert re.search(r'^localspec:request_success_total\{finished_reason="cancelled"\} [1-9]', metrics, re.M)


@pytest.mark.models
@pytest.mark.slow
def test_real_weights_concurrent_requests_equal_alone(qwen_target_path: Path, qwen_draft_path: Path) -> None:
    spec = ModelSpec(str(qwen_target_path), n_ctx=1024)
    draft = ModelSpec(str(qwen_draft_path), n_ctx=1024)
    questions = ["Write a haiku about the sea.", "What is 17 times 23?", "Name three prime numbers."]
    with live_server(Engine(spec, draft, parallel=3)) as par:
        client = par.openai()

        def chat(q: str) -> Any:
            return client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": q}],
                                                  max_tokens=24, temperature=0)

        got = concurrently(chat, questions)
        par.wait_idle()
        alone = [chat(q) for q in questions]  # one at a time on the same server: batch of one
        par.engine.close()
    for g, a in zip(got, alone, strict=True):
        assert g.choices[0].message.content == a.choices[0].message.content
        assert g.usage.completion_tokens == a.usage.completion_tokens
    assert max(g.model_extra["speculative"]["mean_batch_size"] for g in got) > 1.0
