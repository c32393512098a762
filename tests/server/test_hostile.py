"""Malformed and hostile requests: each gets a 4xx OpenAI-shaped error (never a 500), and the
server keeps serving afterwards."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai.types.chat import ChatCompletion

from tests.server.conftest import LiveServer, post_json

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
JSON = {"Content-Type": "application/json"}
MSGS = [{"role": "user", "content": "Hi"}]


def chat(**fields: Any) -> bytes:
    body = {"messages": MSGS, "max_tokens": 4, **fields}
    return json.dumps({k: v for k, v in body.items() if v is not _DROP}).encode()


def comp(**fields: Any) -> bytes:
    body = {"prompt": "Hi", "max_tokens": 4, **fields}
    return json.dumps({k: v for k, v in body.items() if v is not _DROP}).encode()


_DROP = object()

# (id, method, path, body, headers, expected status)
CASES: list[tuple[str, str, str, bytes | None, dict[str, str], int]] = [
    ("truncated-json", "POST", CHAT, b'{"messages": [{"role": "user"', JSON, 400),
    ("empty-body", "POST", CHAT, b"", JSON, 400),
    ("json-array", "POST", CHAT, b"[1, 2]", JSON, 400),
    ("json-string", "POST", CHAT, b'"hello"', JSON, 400),
    ("nan-literal", "POST", CHAT, b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', JSON, 400),
    ("invalid-utf8", "POST", CHAT, b'{"messages": "\xff\xfe"}', JSON, 400),
    ("deep-nesting", "POST", CHAT, b"[" * 200_000 + b"]" * 200_000, JSON, 400),
    ("missing-messages", "POST", CHAT, chat(messages=_DROP), JSON, 400),
    ("null-messages", "POST", CHAT, chat(messages=None), JSON, 400),
    ("empty-messages", "POST", CHAT, chat(messages=[]), JSON, 400),
    ("messages-string", "POST", CHAT, chat(messages="hi"), JSON, 400),
    ("message-no-role", "POST", CHAT, chat(messages=[{"content": "hi"}]), JSON, 400),
    ("unknown-role", "POST", CHAT, chat(messages=[{"role": "wizard", "content": "hi"}]), JSON, 400),
    ("function-role", "POST", CHAT, chat(messages=[{"role": "function", "content": "hi"}]), JSON, 400),
    ("content-number", "POST", CHAT, chat(messages=[{"role": "user", "content": 42}]), JSON, 400),
    ("lone-surrogate-content", "POST", CHAT, chat(messages=[{"role": "user", "content": "hi \ud800"}]), JSON, 400),
    ("lone-surrogate-stream", "POST", CHAT, chat(messages=[{"role": "user", "content": "\udfff"}], stream=True), JSON, 400),
    ("lone-surrogate-system", "POST", CHAT, chat(messages=[{"role": "system", "content": "\ud800"}, *MSGS]), JSON, 400),
    ("lone-surrogate-stop", "POST", CHAT, chat(stop=["\ud800"]), JSON, 400),
    ("lone-surrogate-prompt", "POST", COMP, comp(prompt="x\udc00y"), JSON, 400),
    ("content-image", "POST", CHAT, chat(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]), JSON, 400),
    ("user-null-content", "POST", CHAT, chat(messages=[{"role": "user", "content": None}]), JSON, 400),
    ("huge-max-tokens", "POST", CHAT, chat(max_tokens=10**12), JSON, 400),
    ("bigint-max-tokens", "POST", CHAT, chat(max_tokens=10**40), JSON, 400),
    ("zero-max-tokens", "POST", CHAT, chat(max_tokens=0), JSON, 400),
    ("negative-max-tokens", "POST", CHAT, chat(max_tokens=-5), JSON, 400),
    ("string-max-tokens", "POST", CHAT, chat(max_tokens="10"), JSON, 400),
    ("float-max-tokens", "POST", CHAT, chat(max_tokens=10.5), JSON, 400),
    ("zero-max-completion-tokens", "POST", CHAT, chat(max_completion_tokens=0), JSON, 400),
    ("negative-temperature", "POST", CHAT, chat(temperature=-0.5), JSON, 400),
    ("string-temperature", "POST", CHAT, chat(temperature="hot"), JSON, 400),
    ("huge-temperature", "POST", CHAT, chat(temperature=1e9), JSON, 400),
    ("top-p-zero", "POST", CHAT, chat(top_p=0), JSON, 400),
    ("top-p-above-one", "POST", CHAT, chat(top_p=1.5), JSON, 400),
    ("top-k-negative", "POST", CHAT, chat(top_k=-1), JSON, 400),
    ("n-two", "POST", CHAT, chat(n=2), JSON, 400),
    ("n-string", "POST", CHAT, chat(n="1"), JSON, 400),
    ("stop-100-strings", "POST", CHAT, chat(stop=[f"s{i}" for i in range(100)]), JSON, 400),
    ("stop-number", "POST", CHAT, chat(stop=7), JSON, 400),
    ("stop-huge-string", "POST", CHAT, chat(stop=["x" * 10_000]), JSON, 400),
    ("seed-negative", "POST", CHAT, chat(seed=-1), JSON, 400),
    ("seed-string", "POST", CHAT, chat(seed="abc"), JSON, 400),
    ("stream-string", "POST", CHAT, chat(stream="yes"), JSON, 400),
    ("stream-options-string", "POST", CHAT, chat(stream=True, stream_options="usage"), JSON, 400),
    ("model-path-traversal", "POST", CHAT, chat(model="../../etc/passwd"), JSON, 404),
    ("model-absolute-path", "POST", CHAT, chat(model="/etc/passwd"), JSON, 404),
    ("model-windows-path", "POST", CHAT, chat(model="C:\\Windows\\system32\\x.gguf"), JSON, 404),
    ("model-gguf-file", "POST", CHAT, chat(model="other-model.gguf"), JSON, 404),
    ("model-home-path", "POST", CHAT, chat(model="~/.ssh/id_rsa"), JSON, 404),
    ("model-nul-byte", "POST", CHAT, chat(model="fake\u0000target"), JSON, 404),
    ("model-number", "POST", CHAT, chat(model=5), JSON, 400),
    ("model-huge-name", "POST", CHAT, chat(model="m" * 100_000), JSON, 400),
    ("drafter-bogus", "POST", CHAT, chat(drafter="bogus"), JSON, 400),
    ("gamma-negative", "POST", CHAT, chat(gamma=-1), JSON, 400),
    ("gamma-huge", "POST", CHAT, chat(gamma=1000), JSON, 400),
    ("logprobs", "POST", CHAT, chat(logprobs=True, top_logprobs=3), JSON, 400),
    ("logit-bias", "POST", CHAT, chat(logit_bias={"50": 100}), JSON, 400),
    ("tools", "POST", CHAT, chat(tools=[{"type": "function", "function": {"name": "f"}}]), JSON, 400),
    ("response-format-json-schema", "POST", CHAT, chat(response_format={"type": "json_schema"}), JSON, 400),
    ("context-overflow", "POST", CHAT, chat(messages=[{"role": "user", "content": "y" * 3000}]), JSON, 400),
    ("content-type-text", "POST", CHAT, chat(), {"Content-Type": "text/plain"}, 415),
    ("content-type-form", "POST", CHAT, b"messages=hi", {"Content-Type": "application/x-www-form-urlencoded"}, 415),
    ("oversize-body", "POST", CHAT, chat(messages=[{"role": "user", "content": "z" * (5 * 1024 * 1024)}]), JSON, 413),
    ("get-on-chat", "GET", CHAT, None, {}, 405),
    ("put-on-chat", "PUT", CHAT, chat(), JSON, 405),
    ("unknown-route", "POST", "/v1/nope", chat(), JSON, 404),
    ("models-traversal", "GET", "/v1/models/..%2F..%2Fetc%2Fpasswd", None, {}, 404),
    ("post-on-models", "POST", "/v1/models", b"{}", JSON, 405),
    ("completion-null-prompt", "POST", COMP, comp(prompt=None), JSON, 400),
    ("completion-missing-prompt", "POST", COMP, comp(prompt=_DROP), JSON, 400),
    ("completion-token-ids", "POST", COMP, comp(prompt=[1, 2, 3]), JSON, 400),
    ("completion-batch", "POST", COMP, comp(prompt=["a", "b"]), JSON, 400),
    ("completion-echo", "POST", COMP, comp(echo=True), JSON, 400),
    ("completion-suffix", "POST", COMP, comp(suffix="}"), JSON, 400),
    ("completion-best-of", "POST", COMP, comp(best_of=3), JSON, 400),
    ("completion-empty-prompt", "POST", COMP, comp(prompt=""), JSON, 400),
    ("get-on-completions", "GET", COMP, None, {}, 405),
]


def assert_openai_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    assert "param" in err and "code" in err
    return err


def test_hostile_case_count() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize(("method", "path", "body", "headers", "status"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_request_gets_openai_4xx(fake_server: LiveServer, method: str, path: str,
                                        body: bytes | None, headers: dict[str, str], status: int) -> None:
    r = httpx.request(method, fake_server.url + path, content=body, headers=headers, timeout=30)
    assert_openai_error(r, status)


def test_hostile_errors_name_the_param(fake_server: LiveServer) -> None:
    err = assert_openai_error(httpx.post(fake_server.url + CHAT, content=chat(top_p=0), headers=JSON), 400)
    assert err["param"] == "top_p"
    err = assert_openai_error(httpx.post(fake_server.url + CHAT, content=chat(
        messages=[{"role": "wizard", "content": "hi"}]), headers=JSON), 400)
    assert err["param"] == "messages.0.role"
    err = assert_openai_error(httpx.post(fake_server.url + CHAT, content=chat(
        messages=[{"role": "user", "content": "y" * 3000}]), headers=JSON), 400)
    assert err["code"] == "context_length_exceeded"
    err = assert_openai_error(httpx.post(fake_server.url + CHAT, content=chat(
        messages=[{"role": "user", "content": "\ud800"}]), headers=JSON), 400)
    assert err["param"] == "messages" and "surrogate" in err["message"]


def test_hostile_server_keeps_serving_without_500s(fake_server: LiveServer) -> None:
    for _, method, path, body, headers, _status in CASES:
        httpx.request(method, fake_server.url + path, content=body, headers=headers, timeout=30)
    r = post_json(fake_server.url + CHAT, {"messages": MSGS, "max_tokens": 6, "temperature": 0})
    assert r.status_code == 200
    assert ChatCompletion.model_validate(r.json()).choices[0].message.content
    metrics = httpx.get(fake_server.url + "/metrics").text
    assert 'status="500"' not in metrics
    assert 'status="400"' in metrics and 'status="413"' in metrics
    fake_server.wait_idle()
