"""Render multi-turn chat messages with the model's own GGUF chat template (Jinja)."""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Sequence
from typing import Any

from localspec.errors import InvalidRequestError
from localspec.types import ChatMessage

log = logging.getLogger(__name__)

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""Used when a GGUF has no template (ChatML, the most common format)."""

ROLES = ("system", "user", "assistant", "tool")


def _raise(message: str) -> None:
    raise InvalidRequestError(f"the chat template refused the messages: {message}", param="messages")


_compiled: dict[str, Any] = {}


def _message_dict(m: ChatMessage) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        d["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        d["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        d["name"] = m.name
    return d


def _arguments(text: str) -> Any:
    """HF templates write `arguments | tojson`: give them the object, not its JSON text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """HF's `tojson`: keys in the order given (Jinja's own sorts them, which would render a
    tool call as {"arguments": ..., "name": ...} while the model writes name first)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def supports_tools(template: str | None) -> bool:
    """Whether a chat template renders a `tools` list (else tool definitions would be dropped)."""
    return template is not None and "tools" in template


def render_chat(
    template: str | None,
    messages: Sequence[ChatMessage],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
) -> str:
    """The prompt text for `messages` under `template` (sandboxed Jinja, as HF renders it);
    `tools` (OpenAI's list) goes to the template's `tools` variable, assistant tool calls and
    tool results as in HF's chat format (arguments as objects)."""
    if not messages:
        raise InvalidRequestError("messages must not be empty", param="messages")
    for i, m in enumerate(messages):
        if m.role not in ROLES:
            raise InvalidRequestError(
                f"messages[{i}].role {m.role!r} is not one of {', '.join(ROLES)}", param="messages"
            )
    source = template or CHATML_TEMPLATE
    compiled = _compiled.get(source)
    if compiled is None:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            compiled = env.from_string(source)
        except TemplateError as exc:
            log.warning("chat template does not compile (%s); using ChatML", exc)
            compiled = env.from_string(CHATML_TEMPLATE)
        _compiled[source] = compiled
    return str(
        compiled.render(
            messages=[_message_dict(m) for m in messages],
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            bos_token=bos_token,
            eos_token=eos_token,
        )
    )
