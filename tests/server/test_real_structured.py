"""Structured output and tool calls through the real server on real weights (the offline
Qwen2.5-Coder pair), with the official `openai` client unchanged: `parse(response_format=
PydanticModel)`, `json_object` streaming, schema errors as 400, forced and automatic tool
calls (streamed deltas == whole reply), the tool history round-trip, and a 400 naming a
model whose template has no tools."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from pydantic import BaseModel

from localspec.engine import Engine, ModelSpec
from localspec.server.protocol import ChatCompletionRequest
from tests.server.conftest import LiveServer, live_server

pytestmark = pytest.mark.models


class Customer(BaseModel):
    name: str
    country: str


class Item(BaseModel):
    description: str
    quantity: int
    unit_price: float


class Invoice(BaseModel):
    customer: Customer
    items: list[Item]
    total: float


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Local time of a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris right now, in celsius?"}]


@pytest.fixture(scope="module")
def qwen_server(qwen_target_path: Path, qwen_draft_path: Path) -> Iterator[LiveServer]:
    engine = Engine(ModelSpec(str(qwen_target_path), n_ctx=2048), ModelSpec(str(qwen_draft_path), n_ctx=2048))
    with live_server(engine) as srv:
        yield srv
        srv.wait_idle()
    engine.close()


def test_parse_with_a_pydantic_model_returns_the_object(qwen_server: LiveServer) -> None:
    client = qwen_server.openai()
    for drafter in ("model", "ngram"):
        done = client.chat.completions.parse(
            model="qwen", response_format=Invoice, max_tokens=300, temperature=0,
            messages=[{"role": "user", "content": "Write the invoice for ACME Corp (USA): 2 laptops at 1200.50 "
                                                  "and 5 mice at 19.99."}],
            extra_body={"drafter": drafter, "gamma": 4})
        parsed = done.choices[0].message.parsed
        assert isinstance(parsed, Invoice) and parsed.items, done.choices[0].message.content
        assert done.model_extra["speculative"]["num_draft_tokens"] > 0


def test_json_object_stream_is_one_json_object(qwen_server: LiveServer) -> None:
    client = qwen_server.openai()
    parts = []
    for chunk in client.chat.completions.create(
            model="qwen", stream=True, max_tokens=120, temperature=0.7, seed=3,
            response_format={"type": "json_object"},
            messages=[{"role": "user", "content": "Describe a cat (name, age, colors) as JSON."}]):
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            last = chunk.choices[0].finish_reason
    assert last == "stop"
    assert isinstance(json.loads("".join(parts)), dict)


def test_unsupported_schema_feature_is_a_400_naming_it(qwen_server: LiveServer) -> None:
    client = qwen_server.openai()
    schema = {"type": "object", "properties": {"when": {"type": "string", "format": "no-such-format"}}}
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="qwen", messages=ASK, max_tokens=8, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}})
    assert "no-such-format" in str(exc.value) and exc.value.body["param"] == "response_format"


def _streamed_calls(client: openai.OpenAI, **kw: object) -> tuple[str, dict[int, dict[str, str]], str | None]:
    content, calls, reason = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):  # type: ignore[call-overload]
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            c["id"] = tc.id or c["id"]
            c["name"] += (tc.function.name or "") if tc.function else ""
            c["arguments"] += (tc.function.arguments or "") if tc.function else ""
        reason = chunk.choices[0].finish_reason or reason
    return content, calls, reason


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_call_whole_and_streamed(qwen_server: LiveServer, choice: object) -> None:
    client = qwen_server.openai()
    kw = dict(model="qwen", messages=ASK, tools=[TIME, WEATHER], tool_choice=choice, max_tokens=120,
              temperature=0, extra_body={"drafter": "model"})
    full = client.chat.completions.create(**kw)
    msg = full.choices[0].message
    assert full.choices[0].finish_reason == "tool_calls" and msg.tool_calls
    call = msg.tool_calls[0]
    args = json.loads(call.function.arguments)
    assert call.function.name == "get_weather" and isinstance(args["city"], str)
    assert args["unit"] in ("celsius", "fahrenheit")
    content, calls, reason = _streamed_calls(client, **kw)
    assert reason == "tool_calls" and not content.strip()
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [
        (t.function.name, t.function.arguments) for t in msg.tool_calls]


def test_auto_tool_choice_stream_equals_whole(qwen_server: LiveServer) -> None:
    client = qwen_server.openai()
    kw = dict(model="qwen", messages=ASK, tools=[WEATHER], max_tokens=120, temperature=0)
    full = client.chat.completions.create(**kw)
    msg = full.choices[0].message
    assert full.choices[0].finish_reason in ("stop", "tool_calls", "length")
    content, calls, reason = _streamed_calls(client, **kw)
    assert reason == full.choices[0].finish_reason
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [
        (t.function.name, t.function.arguments) for t in msg.tool_calls or []]
    assert content.strip() == (msg.content or "").strip()


def test_tool_history_round_trips(qwen_server: LiveServer) -> None:
    """A forced call, its result as a `tool` message, then the model answers from it."""
    client = qwen_server.openai()
    call = client.chat.completions.create(model="qwen", messages=ASK, tools=[WEATHER], tool_choice="required",
                                          max_tokens=120, temperature=0).choices[0].message
    assert call.tool_calls
    history = [*ASK, call.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.tool_calls[0].id, "content": '{"temperature": 18, "sky": "clear"}'}]
    answer = client.chat.completions.create(model="qwen", messages=history, tools=[WEATHER], max_tokens=60,
                                            temperature=0)
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # what the server rendered: the call and its result in the GGUF template's own syntax
    req = ChatCompletionRequest.model_validate({"messages": history, "tools": [WEATHER]})
    greq = req.to_generation_request(n_ctx=2048, chat_template=qwen_server.engine.chat_template)
    prompt = qwen_server.engine.render_chat(greq.messages or (), tools=[WEATHER])
    args = json.loads(call.tool_calls[0].function.arguments)
    assert f'<tool_call>\n{{"name": "get_weather", "arguments": {json.dumps(args)}}}\n</tool_call>' in prompt
    assert '<tool_response>\n{"temperature": 18, "sky": "clear"}\n</tool_response>' in prompt
    assert answer.usage.prompt_tokens == len(qwen_server.engine.tokenize(prompt))


def test_model_without_tool_template_is_a_400_naming_it(smol_engine: object) -> None:
    with live_server(smol_engine) as srv:  # type: ignore[arg-type]
        with pytest.raises(openai.BadRequestError) as exc:
            srv.openai().chat.completions.create(model="x", messages=ASK, tools=[WEATHER], max_tokens=8)
        assert "SmolLM2-135M" in str(exc.value) and exc.value.body["param"] == "tools"
