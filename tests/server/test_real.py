"""The server on real weights (SmolLM2-135M drafting for itself, the shared `smol_engine`):
the official client and raw SSE, SDK-type validation, server output == direct engine output,
speculative stats and /metrics, and cancellation on disconnect."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from localspec.engine import ChatMessage, GenerationRequest
from tests.server.conftest import LiveServer, completion_chunk, live_server, post_json, sse_payloads

pytestmark = pytest.mark.models

HELLO = [{"role": "user", "content": "Write one sentence about the sea."}]


@pytest.fixture(scope="module")
def smol_server(smol_engine: object) -> Iterator[LiveServer]:
    with live_server(smol_engine) as srv:  # type: ignore[arg-type]
        yield srv
        srv.wait_idle()


def test_real_chat_stream_equals_non_stream_and_direct_engine(smol_server: LiveServer) -> None:
    client = smol_server.openai()
    kw = dict(model="SmolLM2-135M", messages=HELLO, max_tokens=32, temperature=0)
    full = client.chat.completions.create(**kw)
    assert isinstance(full, ChatCompletion) and full.choices[0].message.content
    text = full.choices[0].message.content
    parts = []
    for chunk in client.chat.completions.create(stream=True, **kw):
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
    assert "".join(parts) == text
    direct = smol_server.engine.generate(GenerationRequest(
        messages=(ChatMessage("user", HELLO[0]["content"]),), max_tokens=32, temperature=0))
    assert "".join(ev.text for ev in direct) == text
    assert full.usage.completion_tokens == smol_server.engine.stats().num_generated_tokens


def test_real_chat_raw_stream_validates_with_sdk_types(smol_server: LiveServer) -> None:
    body = {"messages": HELLO, "max_tokens": 24, "temperature": 0, "stream": True, "drafter": "model",
            "gamma": 3, "stream_options": {"include_usage": True}}
    r = post_json(smol_server.base + "/chat/completions", body)
    assert r.status_code == 200
    payloads = sse_payloads(r)
    chunks = [ChatCompletionChunk.model_validate_json(p) for p in payloads]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert chunks[-2].choices[0].finish_reason in ("stop", "length")
    spec = json.loads(payloads[-1])["speculative"]
    assert spec["drafter"].startswith("model") and spec["num_draft_tokens"] > 0
    # SmolLM2 drafting for itself: greedy drafts are (almost) always accepted
    assert spec["acceptance_rate"] > 0.8 and spec["mean_acceptance_length"] > 2.0


def test_real_completion_stream_and_metrics(smol_server: LiveServer) -> None:
    before = httpx.get(smol_server.url + "/metrics").text
    body = {"prompt": "def fibonacci(n):", "max_tokens": 20, "temperature": 0, "stream": True, "drafter": "model"}
    r = post_json(smol_server.base + "/completions", body)
    chunks = [completion_chunk(p) for p in sse_payloads(r)]
    assert "".join(c.choices[0].text for c in chunks)
    after = httpx.get(smol_server.url + "/metrics").text
    assert _value(after, "localspec:spec_decode_num_accepted_tokens_total") > _value(
        before, "localspec:spec_decode_num_accepted_tokens_total")
    assert _value(after, 'localspec:spec_decode_num_accepted_tokens_per_pos_total{position="0"}') > 0
    assert _value(after, "localspec:time_to_first_token_seconds_count") > _value(
        before, "localspec:time_to_first_token_seconds_count")


def test_real_disconnect_cancels_generation_then_serves_next(smol_server: LiveServer) -> None:
    reference = post_json(smol_server.base + "/completions",
                          {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}).json()
    body = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "max_tokens": 1500, "temperature": 0, "stream": True}
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", smol_server.base + "/completions", json=body) as r:
            seen = 0
            for line in r.iter_lines():
                seen += line.startswith("data: ")
                if seen >= 4:
                    break
    smol_server.wait_idle(timeout=10)
    stats = smol_server.engine.stats()
    assert stats.finish_reason == "cancelled"
    assert stats.num_generated_tokens < 100  # of 1500 asked
    again = post_json(smol_server.base + "/completions",
                      {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}).json()
    assert again["choices"][0]["text"] == reference["choices"][0]["text"]


def _value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0
