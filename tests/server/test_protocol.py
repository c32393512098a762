"""Request models -> the engine's GenerationRequest (no server, no engine)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from localspec.server.errors import APIError, from_validation_error
from localspec.server.protocol import ChatCompletionRequest, CompletionRequest
from localspec.types import ChatMessage, Constraint, ToolCall

MSGS = [{"role": "user", "content": "Hi"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


def test_chat_request_converts_fields_and_extras() -> None:
    req = ChatCompletionRequest.model_validate({
        "messages": [{"role": "developer", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                     {"role": "assistant", "content": None}],
        "max_completion_tokens": 7, "max_tokens": 99, "temperature": 0.3, "top_p": 0.9, "seed": 5,
        "stop": "END", "num_speculative_tokens": 3, "drafter": "ngram", "top_k": 40, "user": "me",
    })
    g = req.to_generation_request(n_ctx=2048)
    assert g.messages == (ChatMessage("system", "Be brief."), ChatMessage("user", "ab"), ChatMessage("assistant", ""))
    assert (g.max_tokens, g.temperature, g.top_p, g.seed, g.stop) == (7, 0.3, 0.9, 5, ("END",))
    assert (g.gamma, g.drafter, g.top_k) == (3, "ngram", 40)


def test_chat_request_defaults_from_settings() -> None:
    req = ChatCompletionRequest.model_validate({"messages": MSGS})
    g = req.to_generation_request(n_ctx=512, default_max_tokens=None, default_temperature=0.0,
                                  default_drafter="model")
    assert (g.max_tokens, g.temperature, g.drafter, g.gamma, g.stop) == (512, 0.0, "model", None, ())
    assert req.include_usage is False


def test_gamma_wins_over_num_speculative_tokens_and_empty_stops_dropped() -> None:
    req = ChatCompletionRequest.model_validate({"messages": MSGS, "gamma": 2, "num_speculative_tokens": 6,
                                                "stop": ["", "x"]})
    g = req.to_generation_request(n_ctx=512)
    assert g.gamma == 2 and g.stop == ("x",)


def test_max_tokens_beyond_context_is_400() -> None:
    req = ChatCompletionRequest.model_validate({"messages": MSGS, "max_tokens": 4097})
    with pytest.raises(APIError) as exc:
        req.to_generation_request(n_ctx=4096)
    assert exc.value.status == 400 and exc.value.code == "context_length_exceeded"


@pytest.mark.parametrize("field, param", [
    ({"n": 3}, "n"), ({"logprobs": True}, "logprobs"), ({"logit_bias": {"1": 2}}, "logit_bias"),
    ({"tools": [{"type": "function"}]}, "tools.0"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema.schema"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "required"}, "tool_choice"),  # no template: syntax unknown
])
def test_unsupported_chat_fields_rejected(field: dict, param: str) -> None:
    req = ChatCompletionRequest.model_validate({"messages": MSGS, **field})
    with pytest.raises(APIError) as exc:
        req.to_generation_request(n_ctx=512)
    assert exc.value.status == 400 and exc.value.param == param


def test_tools_with_tool_choice_none_are_not_rendered() -> None:
    req = ChatCompletionRequest.model_validate({"messages": MSGS, "tools": [WEATHER], "tool_choice": "none"})
    g = req.to_generation_request(n_ctx=512)
    assert g.tools is None and g.constraint is None


def test_response_formats_become_constraints() -> None:
    obj = ChatCompletionRequest.model_validate({"messages": MSGS, "response_format": {"type": "json_object"}})
    assert obj.to_generation_request(n_ctx=64).constraint == Constraint("json_object")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = ChatCompletionRequest.model_validate({"messages": MSGS, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}})
    c = req.to_generation_request(n_ctx=64).constraint
    assert c is not None and c.kind == "json_schema" and json.loads(c.source or "") == schema
    text = ChatCompletionRequest.model_validate({"messages": MSGS, "response_format": {"type": "text"}})
    assert text.to_generation_request(n_ctx=64).constraint is None


def test_forced_tool_call_is_a_grammar_in_the_templates_syntax() -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice in ("required", named):
        req = ChatCompletionRequest.model_validate({"messages": MSGS, "tools": [WEATHER], "tool_choice": choice})
        g = req.to_generation_request(n_ctx=64, chat_template="{{ tools }} <tool_call> </tool_call>")
        assert g.constraint is not None and g.constraint.kind == "lark" and "<tool_call>" in (g.constraint.source or "")
        assert json.loads(g.tools or "") == [WEATHER]
    auto = ChatCompletionRequest.model_validate({"messages": MSGS, "tools": [WEATHER]})
    assert auto.to_generation_request(n_ctx=64, chat_template="<tool_call>").constraint is None


def test_tool_history_round_trips_into_chat_messages() -> None:
    req = ChatCompletionRequest.model_validate({"messages": [
        *MSGS,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
    ]})
    g = req.to_generation_request(n_ctx=64)
    assert g.messages is not None
    assert g.messages[1] == ChatMessage("assistant", "", (ToolCall("call_1", "get_weather", '{"city": "Paris"}'),))
    assert g.messages[2] == ChatMessage("tool", "18 C", tool_call_id="call_1")


def test_completion_prompt_forms() -> None:
    assert CompletionRequest.model_validate({"prompt": ["one"]}).to_generation_request(n_ctx=64).prompt == "one"
    for bad, words in [(None, "required"), ([1, 2], "token-id"), (["a", "b"], "batched"), (3, "string")]:
        with pytest.raises(ValidationError) as exc:
            CompletionRequest.model_validate({"prompt": bad})
        err = from_validation_error(exc.value)
        assert err.param == "prompt" and words in err.message


def test_strict_types_and_union_param_names() -> None:
    with pytest.raises(ValidationError) as exc:
        ChatCompletionRequest.model_validate({"messages": MSGS, "stop": ["a", 5]})
    err = from_validation_error(exc.value)
    assert err.status == 400 and err.param and err.param.startswith("stop")
    assert "list[" not in err.param and "str" not in err.param.split(".")
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate({"messages": MSGS, "max_tokens": True})
