"""Tool calling for the chat endpoint: each model family's tool-call syntax as data, the
grammar that forces a call (`tool_choice` `required` or a named function), and the parser
that turns generated text into OpenAI `tool_calls`, whole or as streaming deltas.

A family is recognised by a marker in its GGUF chat template; its calls are JSON objects
(`name_key`, `args_key`) between `start` and `end` markers, one per block, or a JSON list
after `start` when `is_list`. Families whose template renders `tools` but matches no row
get their tool definitions rendered and the text back unparsed; templates that do not
render `tools` at all are refused by the engine (400 naming the model).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from localspec.server.errors import APIError
from localspec.types import Constraint


@dataclass(frozen=True)
class ToolFormat:
    """One family's tool-call syntax."""

    family: str
    detect: str
    """Text whose presence in the chat template identifies the family."""
    start: str
    end: str | None
    """Closes one call block; None: the call runs to the end of the reply."""
    name_key: str = "name"
    args_key: str = "arguments"
    is_list: bool = False
    """The payload after `start` is a JSON list of calls (else one object per block)."""


TOOL_FORMATS: tuple[ToolFormat, ...] = (
    # Qwen2.5 / Qwen3 / Hermes 2-3: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
    ToolFormat("hermes", "<tool_call>", "<tool_call>", "</tool_call>"),
    # Mistral (v0.3+, Nemo): [TOOL_CALLS][{"name": ..., "arguments": {...}}]
    ToolFormat("mistral", "[TOOL_CALLS]", "[TOOL_CALLS]", None, is_list=True),
    # Llama 3.1-3.3 JSON tool calling: <|python_tag|>{"name": ..., "parameters": {...}}
    ToolFormat("llama3", "<|python_tag|>", "<|python_tag|>", "<|eom_id|>", args_key="parameters"),
)


def tool_format(template: str | None) -> ToolFormat | None:
    """The row of TOOL_FORMATS whose marker the template contains, or None."""
    for fmt in TOOL_FORMATS:
        if template and fmt.detect in template:
            return fmt
    return None


# -- the request side ---------------------------------------------------------------------
def _functions(tools: list[Any]) -> list[dict[str, Any]]:
    out = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise APIError(400, f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": ..., "
                           "\"parameters\": {...}}}}", param=f"tools.{i}", code="invalid_value")
        params = fn.get("parameters", {"type": "object"})
        if not isinstance(params, dict):
            raise APIError(400, f"tools[{i}].function.parameters must be a JSON schema object",
                           param=f"tools.{i}.function.parameters", code="invalid_value")
        out.append(fn)
    return out


def chosen(tools: list[Any], tool_choice: Any) -> tuple[str, list[dict[str, Any]]]:
    """(`auto` | `none` | `required`, the functions a call may name), checked; 400 names the field."""
    functions = _functions(tools)
    if tool_choice is None or tool_choice in ("auto", "none", "required"):
        return (tool_choice or "auto"), functions
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        name = (tool_choice.get("function") or {}).get("name")
        named = [f for f in functions if f["name"] == name]
        if not named:
            raise APIError(400, f"tool_choice names {name!r}, which is not in tools",
                           param="tool_choice", code="invalid_value")
        return "required", named
    raise APIError(400, "tool_choice must be 'auto', 'none', 'required' or {\"type\": \"function\", "
                   "\"function\": {\"name\": ...}}", param="tool_choice", code="invalid_value")


def call_grammar(fmt: ToolFormat, functions: list[dict[str, Any]]) -> Constraint:
    """A Lark grammar (llguidance's dialect, `%json` for the schema) that forces one call to
    one of `functions`, its arguments matching the function's parameters schema."""
    options = [
        {"type": "object", "properties": {fmt.name_key: {"const": f["name"]},
                                          fmt.args_key: f.get("parameters", {"type": "object"})},
         "required": [fmt.name_key, fmt.args_key], "additionalProperties": False}
        for f in functions
    ]
    schema: dict[str, Any] = options[0] if len(options) == 1 else {"anyOf": options}
    if fmt.is_list:
        schema = {"type": "array", "items": schema, "minItems": 1, "maxItems": 1}
    end = f" \"\\n\" {json.dumps(fmt.end)}" if fmt.end else ""
    lark = f"start: {json.dumps(fmt.start)} \"\\n\"? call{end}\ncall: %json {json.dumps(schema)}\n"
    return Constraint("lark", lark)


# -- the reply side -----------------------------------------------------------------------
@dataclass
class _Call:
    index: int
    id: str
    name: str | None = None
    args_sent: str = ""
    done: bool = False


_HEAD = r'\s*\{\s*"%s"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"%s"\s*:\s*'


@dataclass
class ToolCallParser:
    """Feeds on reply text; yields ("content", text), ("call", index, id, name) and
    ("args", index, text) events. Call arguments stream as the raw JSON text the model
    writes (their concatenation is the call's `arguments`)."""

    fmt: ToolFormat
    _buf: str = ""
    _in_call: bool = False
    _calls: list[_Call] = field(default_factory=list)

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The finished calls as OpenAI `tool_calls` entries."""
        return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.args_sent}}
                for c in self._calls if c.name is not None]

    def feed(self, text: str) -> Iterator[tuple[Any, ...]]:
        """Events for `text` appended to the reply."""
        self._buf += text
        while True:
            if not self._in_call:
                at = self._buf.find(self.fmt.start)
                if at < 0:
                    keep = _partial_suffix(self._buf, self.fmt.start)
                    if len(self._buf) > keep:
                        yield ("content", self._buf[: len(self._buf) - keep])
                        self._buf = self._buf[len(self._buf) - keep :]
                    return
                if at:
                    yield ("content", self._buf[:at])
                self._buf = self._buf[at + len(self.fmt.start) :]
                self._in_call = True
                if self.fmt.is_list:  # one JSON list to the end of the reply: parsed whole at finish
                    return
                self._calls.append(_Call(len(self._calls), "call_" + secrets.token_hex(12)))
            if self.fmt.is_list:
                return
            call = self._calls[-1]
            end = self._buf.find(self.fmt.end) if self.fmt.end else -1
            body = self._buf if end < 0 else self._buf[:end]
            yield from self._stream_call(call, body, closed=end >= 0)
            if end < 0:
                return
            self._buf = self._buf[end + len(self.fmt.end or "") :]
            self._in_call = False

    def _stream_call(self, call: _Call, body: str, closed: bool) -> Iterator[tuple[Any, ...]]:
        head = re.match(_HEAD % (re.escape(self.fmt.name_key), re.escape(self.fmt.args_key)), body)
        if head and call.name is None:
            call.name = json.loads(f'"{head.group(1)}"')
            yield ("call", call.index, call.id, call.name)
        if closed:
            yield from self._close(call, body, head)
            return
        if head:
            args = body[head.end() : len(body) - _partial_suffix(body, self.fmt.end or "")]
            safe = len(args.rstrip("} \n\r\t"))  # the tail may be the outer object's closing brace
            if safe > len(call.args_sent):
                yield ("args", call.index, args[len(call.args_sent) : safe])
                call.args_sent = args[:safe]

    def _close(self, call: _Call, body: str, head: re.Match[str] | None) -> Iterator[tuple[Any, ...]]:
        call.done = True
        try:
            obj = json.loads(body)
        except ValueError:
            obj = None
        if not isinstance(obj, dict) or not isinstance(obj.get(self.fmt.name_key), str):
            self._calls.remove(call)  # not a call after all: give the text back
            yield ("content", self.fmt.start + body + (self.fmt.end or ""))
            return
        if head is not None:  # the raw arguments text, of which a prefix was sent
            stripped = body.rstrip()
            args = stripped[head.end() : len(stripped) - 1].rstrip()
        else:
            args = json.dumps(obj.get(self.fmt.args_key, {}), ensure_ascii=False)
            call.name = obj[self.fmt.name_key]
            yield ("call", call.index, call.id, call.name)
        if not args.startswith(call.args_sent):  # cannot happen with the hold-back rule; keep it exact anyway
            args = call.args_sent
        yield ("args", call.index, args[len(call.args_sent) :])
        call.args_sent = args

    def finish(self) -> Iterator[tuple[Any, ...]]:
        """Events for what is still held back when the reply ends."""
        if not self._in_call:
            if self._buf:
                yield ("content", self._buf)
            self._buf = ""
            return
        if self.fmt.is_list:
            try:
                items = json.loads(self._buf)
            except ValueError:
                items = None
            if isinstance(items, list) and items and all(
                    isinstance(x, dict) and isinstance(x.get(self.fmt.name_key), str) for x in items):
                for x in items:
                    c = _Call(len(self._calls), "call_" + secrets.token_hex(12), x[self.fmt.name_key])
                    c.args_sent = json.dumps(x.get(self.fmt.args_key, {}), ensure_ascii=False)
                    c.done = True
                    self._calls.append(c)
                    yield ("call", c.index, c.id, c.name)
                    yield ("args", c.index, c.args_sent)
            else:
                yield ("content", self.fmt.start + self._buf)
        else:
            call = self._calls[-1]
            yield from self._close(call, self._buf, re.match(
                _HEAD % (re.escape(self.fmt.name_key), re.escape(self.fmt.args_key)), self._buf))
        self._buf = ""
        self._in_call = False


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def parse_reply(fmt: ToolFormat, text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content or None, tool_calls) of a whole reply."""
    parser = ToolCallParser(fmt)
    content = "".join(e[1] for e in [*parser.feed(text), *parser.finish()] if e[0] == "content")
    calls = parser.calls
    content = content.strip() if calls else content
    return (content or None) if calls else content, calls
