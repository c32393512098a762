"""Render multi-turn chat messages with the model's own GGUF chat template (Jinja)."""

from __future__ import annotations

import datetime
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


def render_chat(
    template: str | None,
    messages: Sequence[ChatMessage],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text for `messages` under `template` (sandboxed Jinja, as HF renders it)."""
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
            messages=[{"role": m.role, "content": m.content} for m in messages],
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
        )
    )
