"""response_format and tool calls through the real HTTP server on fake engines (fast): the
official client's parse() and streamed tool-call deltas, finish_reason, 400s."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel

from localspec.engine import Engine
from localspec.engine.fake import FakeBackend
from tests.server.test_tools import QWEN_LIKE

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "weather in Paris?"}]


class Trip(BaseModel):
    city: str
    days: int


def _engine(script: str, template: str | None = None) -> Engine:
    return Engine(FakeBackend(script, chat_template=template),
                  FakeBackend(script, chat_template=template, error_rate=0.2, seed=1))


def test_parse_returns_the_pydantic_object(make_server) -> None:  # type: ignore[no-untyped-def]
    srv = make_server(_engine('Sure: {"city": "Rome", "days": 4} enjoy!'))
    done = srv.openai().chat.completions.parse(model="x", messages=ASK, response_format=Trip, max_tokens=60,
                                               temperature=0, extra_body={"drafter": "model"})
    assert done.choices[0].message.parsed == Trip(city="Rome", days=4)


def test_tool_call_whole_and_streamed(make_server) -> None:  # type: ignore[no-untyped-def]
    srv = make_server(_engine("Checking. " + CALL, QWEN_LIKE))
    client = srv.openai()
    kw = dict(model="x", messages=ASK, tools=[WEATHER], max_tokens=120, temperature=0)
    full = client.chat.completions.create(**kw)
    msg = full.choices[0].message
    assert full.choices[0].finish_reason == "tool_calls" and msg.content == "Checking."
    assert [(t.function.name, json.loads(t.function.arguments)) for t in msg.tool_calls] == [
        ("get_weather", {"city": "Paris"})]
    content, args, names, reason, n_arg_chunks = "", "", "", None, 0
    for chunk in client.chat.completions.create(stream=True, **kw):
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            names += tc.function.name or ""
            args += tc.function.arguments or ""
            n_arg_chunks += bool(tc.function.arguments)
        reason = chunk.choices[0].finish_reason or reason
    assert (content.strip(), names, reason) == ("Checking.", "get_weather", "tool_calls")
    assert args == msg.tool_calls[0].function.arguments
    # how many deltas carry the arguments depends on how the engine's bursts meet the event
    # loop (a fast fake engine may finish before the first chunk is sent): at least one does;
    # the parser's incremental output is tested in test_tools.py
    assert n_arg_chunks >= 1


def test_forced_call_overrides_what_the_model_would_say(make_server) -> None:  # type: ignore[no-untyped-def]
    """The fake model wants to answer in prose; tool_choice=required makes it call."""
    srv = make_server(_engine("It is sunny. " + CALL, QWEN_LIKE))
    done = srv.openai().chat.completions.create(model="x", messages=ASK, tools=[WEATHER], tool_choice="required",
                                                max_tokens=120, temperature=0)
    calls = done.choices[0].message.tool_calls
    assert done.choices[0].finish_reason == "tool_calls" and calls[0].function.name == "get_weather"
    assert isinstance(json.loads(calls[0].function.arguments)["city"], str)


def test_tools_need_a_template_that_renders_them(make_server) -> None:  # type: ignore[no-untyped-def]
    srv = make_server(_engine("hi"))
    with pytest.raises(openai.BadRequestError) as exc:
        srv.openai().chat.completions.create(model="x", messages=ASK, tools=[WEATHER], max_tokens=4)
    assert exc.value.body["param"] == "tools" and "fake" in exc.value.body["message"]
