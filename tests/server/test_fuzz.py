"""Property-based fuzzing of request bodies (Hypothesis): whatever JSON a client sends to the
chat and completion endpoints, the server answers 2xx or an OpenAI-shaped 4xx — never a 5xx —
and keeps answering a well-formed request afterwards.

Bodies are built from the real fields with values of every JSON type (valid ones, wrong
types, out-of-range numbers, unicode with lone surrogates, deep and empty containers), so
most examples reach validation past the JSON parser instead of failing at the first byte.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.conftest import LiveServer

JSON = {"Content-Type": "application/json"}

# text with lone surrogates and control characters (valid JSON once escaped)
texts = st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=40)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), texts,
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                      max_leaves=8)
def mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`valid` three times in four, any JSON value otherwise (so most bodies get past one
    field's validation to the next, and some reach the engine)."""
    return st.one_of(valid, valid, valid, values)


roles = st.sampled_from(["system", "user", "assistant", "tool", "function", "developer", "wizard", ""]) | values
good_messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]),
                                                "content": texts}), min_size=1, max_size=3)
messages = mostly(good_messages) | st.lists(
    st.fixed_dictionaries({"role": roles, "content": st.one_of(texts, values)},
                          optional={"name": texts, "tool_calls": values, "tool_call_id": values}),
    max_size=3,
)
COMMON = {
    "model": mostly(st.sampled_from(["fake-target", "nope", ""])),
    "max_tokens": mostly(st.integers(min_value=-2, max_value=8)),
    "temperature": mostly(st.floats(min_value=-1, max_value=3, allow_nan=False)),
    "top_p": mostly(st.floats(min_value=-0.5, max_value=1.5, allow_nan=False)),
    "top_k": mostly(st.integers(min_value=-2, max_value=50)),
    "seed": mostly(st.integers(min_value=-2, max_value=2**64)),
    "stop": mostly(texts | st.lists(texts, max_size=5)),
    "stream": mostly(st.booleans()),
    "stream_options": mostly(st.fixed_dictionaries({}, optional={"include_usage": st.booleans() | values})),
    "n": mostly(st.integers(min_value=-1, max_value=3)),
    "drafter": mostly(st.sampled_from(["adaptive", "ngram", "model", "none", "bogus"])),
    "gamma": mostly(st.integers(min_value=-2, max_value=40)),
    "response_format": values, "tools": values, "tool_choice": values, "logit_bias": values,
}
chat_bodies = st.fixed_dictionaries({"messages": messages}, optional=COMMON)
completion_bodies = st.fixed_dictionaries({"prompt": st.one_of(texts, values)},
                                          optional={**COMMON, "echo": values, "suffix": values, "best_of": values})
STATUSES: dict[int, int] = {}
"""Status counts over the fuzzed requests (the last test checks that both outcomes occurred)."""


def _check(server: LiveServer, path: str, body: Any) -> None:
    raw = json.dumps(body).encode()  # lone surrogates become \\udXXX escapes: valid JSON
    with httpx.Client(base_url=server.url, timeout=60) as client:
        r = client.post(path, content=raw, headers=JSON)
        STATUSES[r.status_code] = STATUSES.get(r.status_code, 0) + 1
        assert r.status_code < 500, (r.status_code, r.text[:300], raw[:300])
        if r.status_code >= 400:
            err = r.json()["error"]
            assert isinstance(err["message"], str) and err["message"] and err["type"]
            assert "param" in err and "code" in err
        elif "text/event-stream" not in r.headers.get("content-type", ""):
            assert r.json()["object"] in ("chat.completion", "text_completion")


FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(body=chat_bodies)
def test_fuzzed_chat_bodies_never_get_a_5xx(fake_server: LiveServer, body: dict[str, Any]) -> None:
    _check(fake_server, "/v1/chat/completions", body)


@FUZZ
@given(body=completion_bodies)
def test_fuzzed_completion_bodies_never_get_a_5xx(fake_server: LiveServer, body: dict[str, Any]) -> None:
    _check(fake_server, "/v1/completions", body)


def test_server_answers_after_fuzzing(fake_server: LiveServer) -> None:
    """Runs after the fuzz tests in this module (same server): still serving, no 500 counted,
    and the fuzzing reached the engine (some 200s) as well as validation (some 400s)."""
    r = httpx.post(fake_server.url + "/v1/chat/completions", headers=JSON, timeout=60, content=json.dumps(
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}).encode())
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    assert 'status="500"' not in httpx.get(fake_server.url + "/metrics").text
    fake_server.wait_idle()
    if STATUSES:  # the fuzz tests ran in this session
        assert STATUSES.get(200, 0) >= 5 and STATUSES.get(400, 0) >= 50, STATUSES
