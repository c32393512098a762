"""Tool-call syntax table, parser (whole and streamed) and forced-call grammar (no server)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from localspec.engine.chat import render_chat
from localspec.engine.constraint import GrammarCursor, compile_grammar, grammar_tokenizer
from localspec.engine.fake import FakeBackend
from localspec.server.tools import TOOL_FORMATS, ToolCallParser, call_grammar, parse_reply, tool_format
from localspec.types import ChatMessage, ToolCall

HERMES, MISTRAL, LLAMA3 = TOOL_FORMATS
REPLY = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "opts": {"c": true}}}\n'
         '</tool_call>\n<tool_call>\n{"arguments": {}, "name": "noop"}\n</tool_call>')


def _streamed(fmt, text: str, step: int) -> tuple[str, dict[int, str], dict[int, str]]:
    parser = ToolCallParser(fmt)
    events = []
    for i in range(0, len(text), step):
        events += list(parser.feed(text[i : i + step]))
    events += list(parser.finish())
    content = "".join(e[1] for e in events if e[0] == "content")
    names = {e[1]: e[3] for e in events if e[0] == "call"}
    args: dict[int, str] = {}
    for e in events:
        if e[0] == "args":
            args[e[1]] = args.get(e[1], "") + e[2]
    return content, names, args


def test_family_is_detected_from_the_template() -> None:
    assert tool_format("{% if tools %}<tool_call>{% endif %}") is HERMES
    assert tool_format("[TOOL_CALLS] {{ tools }}") is MISTRAL
    assert tool_format("{{ messages }}") is None and tool_format(None) is None


def test_whole_reply_parses_into_openai_tool_calls() -> None:
    content, calls = parse_reply(HERMES, REPLY)
    assert content == "Let me check."
    assert [c["function"]["name"] for c in calls] == ["get_weather", "noop"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris", "opts": {"c": True}}
    assert calls[0]["id"].startswith("call_") and calls[0]["id"] != calls[1]["id"]


@pytest.mark.parametrize("step", [1, 2, 5, 17, 1000])
def test_streamed_deltas_add_up_to_the_whole_reply(step: int) -> None:
    content, names, args = _streamed(HERMES, REPLY, step)
    _, calls = parse_reply(HERMES, REPLY)
    assert content.strip() == "Let me check."
    assert names == {0: "get_weather", 1: "noop"}
    assert [args[0], args[1]] == [c["function"]["arguments"] for c in calls]


def test_arguments_stream_as_they_are_written_not_at_the_calls_end() -> None:
    """Fed a few characters at a time, the parser hands out argument text before the call
    closes: a client sees the arguments grow."""
    parser = ToolCallParser(HERMES)
    head, tail = REPLY.split('"opts"', 1)
    seen = [e for i in range(0, len(head), 3) for e in parser.feed(head[i : i + 3])]
    partial = "".join(e[2] for e in seen if e[0] == "args" and e[1] == 0)
    assert partial and sum(e[0] == "args" for e in seen) > 1
    _, calls = parse_reply(HERMES, REPLY)
    assert calls[0]["function"]["arguments"].startswith(partial)


def test_text_that_is_not_a_call_stays_content() -> None:
    for text in ("a < b and <tool_c", "x <tool_call>not json</tool_call> y"):
        assert parse_reply(HERMES, text) == (text, [])
        assert _streamed(HERMES, text, 1)[0] == text


def test_mistral_list_and_llama3_parameters() -> None:
    content, calls = parse_reply(MISTRAL, '[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]')
    assert content is None and [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("a", {"x": 1}), ("b", {})]
    _, calls = parse_reply(LLAMA3, '<|python_tag|>{"name": "f", "parameters": {"q": "s"}}<|eom_id|>')
    assert json.loads(calls[0]["function"]["arguments"]) == {"q": "s"}


WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                   "required": ["city"], "additionalProperties": False}}


@pytest.mark.parametrize("fmt", TOOL_FORMATS, ids=[f.family for f in TOOL_FORMATS])
def test_forced_call_grammar_accepts_a_call_and_refuses_other_names(fmt) -> None:
    model = FakeBackend()
    tok = grammar_tokenizer(model)
    grammar = compile_grammar(call_grammar(fmt, [WEATHER, {"name": "noop"}]))
    payload = {fmt.name_key: "get_weather", fmt.args_key: {"city": "Paris"}}
    good = fmt.start + "\n" + json.dumps([payload] if fmt.is_list else payload) + ("\n" + fmt.end if fmt.end else "")
    cur = GrammarCursor(tok, grammar, model.n_vocab)
    for b in good.encode():  # commit token by token (a draft stack holds at most 64)
        assert cur.allowed()[b], (good, chr(b))
        cur.commit(0, b)
    assert cur.allowed()[256]  # complete: the end of generation is allowed
    bad = GrammarCursor(tok, grammar, model.n_vocab)
    text = fmt.start + "\n" + ('[{"' if fmt.is_list else '{"') + fmt.name_key + '": "get_w'
    for b in text.encode():
        assert bad.allowed()[b]
        bad.commit(0, b)
    assert not bad.push(ord("x"))  # "get_wx..." names no tool
    assert np.flatnonzero(bad.allowed()).tolist() == [ord("e")]


QWEN_LIKE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
    "{% if m.tool_call_id %}[{{ m.tool_call_id }}]{% endif %}{% endfor %}"
)


def test_tools_and_tool_history_reach_the_template() -> None:
    msgs = [ChatMessage("user", "Weather?"),
            ChatMessage("assistant", "", (ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)),
            ChatMessage("tool", "18 C", tool_call_id="call_1")]
    text = render_chat(QWEN_LIKE, msgs, tools=[{"type": "function", "function": WEATHER}])
    assert '<tools>{"type": "function"' in text
    # arguments reach the template as an object (HF convention), not as a JSON string
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>' in text
    assert "<|tool|>18 C[call_1]" in text
