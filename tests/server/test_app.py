"""The server on a fake engine, through the official `openai` client and raw httpx; every
response and chunk is validated with the SDK's own types."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai.types import Completion, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.server.conftest import SCRIPT, LiveServer, completion_chunk, post_json, sse_payloads

CHAT = {"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 24, "temperature": 0}


def speculative_ok(spec: dict) -> None:
    for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "mean_acceptance_length",
                "acceptance_rate", "kernel", "drafter", "tokens_per_s"):
        assert key in spec, key
    assert spec["numerics"] == "exact"  # the fake target computes every row the same way
    assert spec["num_accepted_tokens"] <= spec["num_draft_tokens"]
    assert spec["mean_acceptance_length"] >= 1.0


class TestChat:
    def test_chat_openai_client_non_streaming(self, fake_server: LiveServer) -> None:
        client = fake_server.openai()
        reply = client.chat.completions.create(model="anything", messages=[{"role": "user", "content": "Hi"}],
                                               max_tokens=12, temperature=0)
        assert reply.object == "chat.completion"
        assert reply.choices[0].message.role == "assistant"
        assert reply.choices[0].message.content == SCRIPT[:12]
        assert reply.choices[0].finish_reason == "length"
        assert reply.usage is not None and reply.usage.completion_tokens == 12
        assert reply.model == "fake-target"
        speculative_ok(reply.model_extra["speculative"])

    def test_chat_raw_validates_as_sdk_type(self, fake_server: LiveServer) -> None:
        r = post_json(fake_server.base + "/chat/completions", CHAT)
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
        reply = ChatCompletion.model_validate(r.json())
        assert reply.id.startswith("chatcmpl-") and isinstance(reply.created, int)
        assert reply.usage.prompt_tokens > 0
        assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
        speculative_ok(r.json()["speculative"])

    def test_chat_stream_raw_chunks_and_done(self, fake_server: LiveServer) -> None:
        r = post_json(fake_server.base + "/chat/completions", {**CHAT, "stream": True})
        assert r.status_code == 200
        chunks = [ChatCompletionChunk.model_validate_json(p) for p in sse_payloads(r)]
        assert chunks[0].choices[0].delta.role == "assistant"
        assert len({c.id for c in chunks}) == 1
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert text == SCRIPT[:24]
        assert [c.choices[0].finish_reason for c in chunks][-1] == "length"
        assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
        speculative_ok(json.loads(sse_payloads(r)[-1])["speculative"])

    def test_chat_stream_include_usage_last_chunk(self, fake_server: LiveServer) -> None:
        body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        r = post_json(fake_server.base + "/chat/completions", body)
        chunks = [ChatCompletionChunk.model_validate_json(p) for p in sse_payloads(r)]
        last = chunks[-1]
        assert last.choices == [] and last.usage is not None
        assert last.usage.completion_tokens == 24
        assert chunks[-2].choices[0].finish_reason == "length"

    def test_chat_stream_openai_client_equals_non_streaming(self, fake_server: LiveServer) -> None:
        client = fake_server.openai()
        kw = dict(model="fake-target", messages=[{"role": "user", "content": "Hi"}], max_tokens=40, temperature=0)
        full = client.chat.completions.create(**kw).choices[0].message.content
        stream = client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw)
        parts, usage = [], None
        for chunk in stream:
            assert isinstance(chunk, ChatCompletionChunk)
            if chunk.choices:
                parts.append(chunk.choices[0].delta.content or "")
            usage = chunk.usage or usage
        assert "".join(parts) == full
        assert usage is not None and usage.completion_tokens == 40

    def test_chat_stop_string_ends_reply(self, fake_server: LiveServer) -> None:
        r = post_json(fake_server.base + "/chat/completions", {**CHAT, "max_tokens": 60, "stop": ["fake"]})
        reply = ChatCompletion.model_validate(r.json())
        assert reply.choices[0].message.content == "Hello! I am a "
        assert reply.choices[0].finish_reason == "stop"

    def test_chat_content_parts_and_developer_role(self, fake_server: LiveServer) -> None:
        body = {"messages": [{"role": "developer", "content": "Be brief."},
                             {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_tokens": 5}
        r = post_json(fake_server.base + "/chat/completions", body)
        assert r.status_code == 200, r.text
        ChatCompletion.model_validate(r.json())

    def test_chat_extras_gamma_drafter(self, fake_server: LiveServer) -> None:
        r = post_json(fake_server.base + "/chat/completions",
                      {**CHAT, "drafter": "none", "num_speculative_tokens": 3})
        spec = r.json()["speculative"]
        assert spec["num_draft_tokens"] == 0 and spec["mean_acceptance_length"] == 1.0
        r = post_json(fake_server.base + "/chat/completions", {**CHAT, "drafter": "model", "gamma": 2, "top_k": 5})
        spec = r.json()["speculative"]
        assert spec["num_draft_tokens"] > 0 and len(spec["drafted_per_position"]) <= 2


class TestCompletions:
    def test_completion_openai_client(self, fake_server: LiveServer) -> None:
        reply = fake_server.openai().completions.create(model="fake-target", prompt="Hello! I am", max_tokens=8,
                                                        temperature=0)
        assert isinstance(reply, Completion) and reply.object == "text_completion"
        assert reply.choices[0].text == " a fake "
        assert reply.choices[0].finish_reason == "length"

    def test_completion_stream_raw(self, fake_server: LiveServer) -> None:
        body = {"prompt": ["Hello! I am"], "max_tokens": 8, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        r = post_json(fake_server.base + "/completions", body)
        chunks = [completion_chunk(p) for p in sse_payloads(r)]
        assert chunks[-2].choices[0].finish_reason == "length"
        assert "".join(c.choices[0].text for c in chunks if c.choices) == " a fake "
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8

    def test_completion_seeded_sampling_reproducible(self, fake_server: LiveServer) -> None:
        # a seed reproduces the text for a fixed drafter and γ; `adaptive` picks γ from
        # timings it measures, so at T > 0 its text may change between runs (README, Lossless)
        body = {"prompt": "Hello", "max_tokens": 16, "temperature": 1.5, "seed": 7, "drafter": "model", "gamma": 3}
        a = post_json(fake_server.base + "/completions", body).json()["choices"][0]["text"]
        b = post_json(fake_server.base + "/completions", body).json()["choices"][0]["text"]
        assert a == b


class TestEndpoints:
    def test_models_list_and_retrieve(self, fake_server: LiveServer) -> None:
        client = fake_server.openai()
        models = client.models.list()
        assert [m.id for m in models.data] == ["fake-target"]
        raw = httpx.get(fake_server.base + "/models").json()
        Model.model_validate(raw["data"][0])
        assert raw["data"][0]["draft"] == "fake-draft"
        assert raw["data"][0]["numerics"] == "exact"
        assert client.models.retrieve("fake-target").id == "fake-target"
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("other")

    def test_health(self, fake_server: LiveServer) -> None:
        r = httpx.get(fake_server.url + "/health")
        assert r.status_code == 200 and r.json()["status"] == "ok"

    def test_metrics_prometheus_names_and_counts(self, fake_server: LiveServer) -> None:
        before = httpx.get(fake_server.url + "/metrics").text
        post_json(fake_server.base + "/chat/completions", {**CHAT, "drafter": "model"})
        r = httpx.get(fake_server.url + "/metrics")
        assert r.headers["content-type"].startswith("text/plain")
        text = r.text
        for name in ("localspec:spec_decode_num_drafts_total", "localspec:spec_decode_num_draft_tokens_total",
                     "localspec:spec_decode_num_accepted_tokens_total",
                     'localspec:spec_decode_num_accepted_tokens_per_pos_total{position="0"}',
                     "localspec:prompt_tokens_total", "localspec:generation_tokens_total",
                     "localspec:e2e_request_latency_seconds_bucket", "localspec:num_requests_waiting",
                     'localspec:http_requests_total{endpoint="/v1/chat/completions",status="200"}'):
            assert name in text, name
        assert _value(text, 'localspec:numerics_mode{mode="exact"}') == 1.0
        assert 'mode="fast"' not in text
        assert _value(text, "localspec:generation_tokens_total") >= _value(before, "localspec:generation_tokens_total") + 24
        assert _value(text, "localspec:spec_decode_num_drafts_total") > _value(before, "localspec:spec_decode_num_drafts_total")
        by_model = 'localspec:spec_decode_num_steps_by_drafter_total{drafter="model"}'
        assert _value(text, by_model) > _value(before, by_model)  # the mechanism is named


def _value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


class TestAuthAndModels:
    def test_api_key_required_and_checked(self, make_server) -> None:
        srv = make_server(api_key="s3cret")
        r = post_json(srv.base + "/chat/completions", CHAT)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        r = post_json(srv.base + "/chat/completions", CHAT, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        with pytest.raises(openai.AuthenticationError):
            srv.openai(api_key="nope").models.list()
        assert srv.openai(api_key="s3cret").chat.completions.create(
            model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=3).choices[0].message.content
        assert httpx.get(srv.url + "/health").status_code == 200  # open, as in vLLM

    def test_api_key_from_env(self, make_server, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("LOCALSPEC_API_KEY", "from-env")
        srv = make_server()
        assert httpx.get(srv.base + "/models").status_code == 401
        assert httpx.get(srv.base + "/models", headers={"Authorization": "Bearer from-env"}).status_code == 200

    def test_alias_and_strict_model(self, make_server) -> None:
        srv = make_server(alias="coder", strict_model=True)
        client = srv.openai()
        assert [m.id for m in client.models.list().data] == ["coder"]
        ok = client.chat.completions.create(model="coder", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        assert ok.model == "coder"
        with pytest.raises(openai.NotFoundError) as exc:
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        assert exc.value.body["code"] == "model_not_found"

    def test_lenient_model_accepts_plain_names(self, fake_server: LiveServer) -> None:
        r = post_json(fake_server.base + "/chat/completions", {**CHAT, "model": "gpt-4o-mini"})
        assert r.status_code == 200 and r.json()["model"] == "fake-target"
