"""Wire models of the OpenAI API subset localspec serves, and their conversion to the engine's
`GenerationRequest` (vLLM's `to_sampling_params` pattern).

Requests allow extra fields (the OpenAI API does, and clients send many); the ones that
change the meaning of a reply and cannot be honoured (`n > 1`, `logprobs`, `echo`, `best_of`,
`suffix`, `logit_bias`) are rejected with a 400
naming the field; the rest are logged as ignored. Types are strict: `"max_tokens": "10"`
is an error, as on OpenAI.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from localspec.server.errors import APIError
from localspec.server.tools import call_grammar, chosen, tool_format
from localspec.types import MAX_STOP_STRINGS, ChatMessage, Constraint, GenerationRequest, ToolCall

log = logging.getLogger(__name__)

MAX_STOP_CHARS = 512

# Accepted and ignored without a warning: they describe the caller or the transport.
_QUIET_EXTRAS = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls", "stream_options"})


class OpenAIBaseModel(BaseModel):
    """Strict types, extra fields allowed (and logged when ignored)."""

    model_config = ConfigDict(extra="allow", strict=True)

    def log_ignored(self) -> None:
        """Log the fields this server accepted but does not use."""
        ignored = sorted(set(self.model_extra or {}) - _QUIET_EXTRAS)
        if ignored:
            log.info("ignored request fields: %s", ", ".join(ignored))


class StreamOptions(OpenAIBaseModel):
    """`stream_options`: `include_usage` adds a final chunk with `choices: []` and `usage`."""

    include_usage: bool | None = False


class TextPart(OpenAIBaseModel):
    """A content part; only `{"type": "text", "text": ...}` is supported."""

    type: str
    text: str | None = None


class ChatMessageParam(OpenAIBaseModel):
    """One message of `messages`. `developer` is treated as `system` (OpenAI's newer name)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def to_chat_message(self, index: int) -> ChatMessage:
        """The engine's ChatMessage (content parts joined, null content as empty)."""
        content = self.content
        if isinstance(content, list):
            texts = []
            for j, part in enumerate(content):
                if part.type != "text" or part.text is None:
                    raise APIError(
                        400, f"messages[{index}].content[{j}] has type {part.type!r}; only text parts are supported",
                        param=f"messages.{index}.content.{j}.type", code="unsupported_content",
                    )
                texts.append(part.text)
            content = "".join(texts)
        calls = tuple(self._tool_call(index, j, c) for j, c in enumerate(self.tool_calls or []))
        if content is None:
            if self.role != "assistant":
                raise APIError(400, f"messages[{index}].content is required for role {self.role!r}",
                               param=f"messages.{index}.content", code="invalid_value")
            content = ""
        role = "system" if self.role == "developer" else self.role
        return ChatMessage(role, content, calls, self.tool_call_id, self.name)

    @staticmethod
    def _tool_call(index: int, j: int, call: dict[str, Any]) -> ToolCall:
        fn = call.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise APIError(400, f"messages[{index}].tool_calls[{j}] needs function.name",
                           param=f"messages.{index}.tool_calls.{j}.function", code="invalid_value")
        args = fn.get("arguments", "{}")
        return ToolCall(str(call.get("id", "")), fn["name"], args if isinstance(args, str) else json.dumps(args))


class _SamplingFields(OpenAIBaseModel):
    """Fields shared by /v1/chat/completions and /v1/completions (plus localspec extras)."""

    model: str | None = Field(None, max_length=512, description="The served alias (see /v1/models).")
    max_tokens: int | None = Field(None, ge=1, description="Tokens to generate at most.")
    temperature: float | None = Field(None, ge=0.0, le=100.0, description="0 = greedy.")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = 1
    logprobs: Any = None
    logit_bias: dict[str, Any] | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    # localspec extras
    top_k: int | None = Field(None, ge=0, description="Keep the k most likely tokens; 0 = off.")
    drafter: str | None = Field(None, description="adaptive | model | ngram | mtp | eagle3 | dflash | dspark | none.")
    gamma: int | None = Field(None, ge=0, description="Draft length γ (maximum for adaptive).")
    num_speculative_tokens: int | None = Field(None, ge=0, description="vLLM's name for gamma.")
    p_min: float | None = Field(None, ge=0.0, lt=1.0)

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        items = [value] if isinstance(value, str) else (value or [])
        if len(items) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings are supported, got {len(items)}")
        if any(len(s) > MAX_STOP_CHARS for s in items):
            raise ValueError(f"stop strings must be at most {MAX_STOP_CHARS} characters")
        return value

    @property
    def include_usage(self) -> bool:
        """True when a streamed reply should end with a usage chunk."""
        return bool(self.stream_options and self.stream_options.include_usage)

    def _reject_unsupported(self) -> None:
        if self.n not in (None, 1):
            raise APIError(400, f"n={self.n} is not supported: localspec generates one choice (n=1)",
                           param="n", code="unsupported_value")
        if self.logprobs not in (None, False, 0):
            raise APIError(400, "logprobs are not supported by localspec", param="logprobs", code="unsupported_value")
        if self.logit_bias:
            raise APIError(400, "logit_bias is not supported by localspec", param="logit_bias", code="unsupported_value")
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(self, name):
                log.info("ignored %s=%s (penalties are not applied)", name, getattr(self, name))

    def _common(self, *, n_ctx: int, default_max_tokens: int | None, default_temperature: float,
                default_drafter: str) -> dict[str, Any]:
        self._reject_unsupported()
        self.log_ignored()
        # max_completion_tokens is OpenAI's newer name; it wins when both are given
        max_tokens = getattr(self, "max_completion_tokens", None) or self.max_tokens
        if max_tokens is None:
            max_tokens = default_max_tokens or n_ctx
        if max_tokens > n_ctx:
            raise APIError(
                400, f"max_tokens={max_tokens} exceeds the context window ({n_ctx} tokens); ask for fewer "
                "or restart the server with a larger -c/--ctx-size", param="max_tokens",
                code="context_length_exceeded",
            )
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        gamma = self.gamma if self.gamma is not None else self.num_speculative_tokens
        return dict(
            max_tokens=max_tokens,
            temperature=default_temperature if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=self.top_k or 0,
            seed=self.seed,
            stop=tuple(s for s in stop if s),
            drafter=self.drafter or default_drafter,
            gamma=gamma,
            p_min=self.p_min or 0.0,
        )


def response_constraint(response_format: dict[str, Any] | None) -> Constraint | None:
    """`response_format` as the engine's Constraint: `text` (none), `json_object`, or
    `json_schema` (`{"json_schema": {"name", "schema", "strict"}}`; the schema is enforced
    whether or not `strict` is set). 400 for anything else."""
    if response_format is None:
        return None
    fmt = response_format.get("type", "text")
    if fmt == "text":
        return None
    if fmt == "json_object":
        return Constraint("json_object")
    if fmt == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, (dict, bool)):
            raise APIError(400, "response_format json_schema needs {\"json_schema\": {\"name\": ..., \"schema\": {...}}}",
                           param="response_format.json_schema.schema", code="invalid_value")
        return Constraint("json_schema", json.dumps(schema))
    raise APIError(400, f"response_format type {fmt!r} is not supported (text, json_object or json_schema)",
                   param="response_format.type", code="unsupported_value")


class ChatCompletionRequest(_SamplingFields):
    """`POST /v1/chat/completions`."""

    messages: list[ChatMessageParam] = Field(..., min_length=1, max_length=10_000)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: list[Any] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    top_logprobs: int | None = None

    def to_generation_request(self, *, n_ctx: int, default_max_tokens: int | None = None,
                              default_temperature: float = 1.0, default_drafter: str = "adaptive",
                              chat_template: str | None = None) -> GenerationRequest:
        """The engine request; raises APIError (400) for what localspec cannot honour.
        `chat_template` (the served model's) picks the tool-call syntax (server/tools.py)."""
        constraint = response_constraint(self.response_format)
        tools_json = None
        if self.tools:
            choice, functions = chosen(self.tools, self.tool_choice)
            if choice != "none":
                tools_json = json.dumps(self.tools)
            if choice == "required":
                fmt = tool_format(chat_template)
                if fmt is None:
                    raise APIError(400, "tool_choice 'required' or a named function needs a model whose "
                                   "tool-call syntax localspec knows (Qwen/Hermes, Mistral, Llama 3); use 'auto'",
                                   param="tool_choice", code="unsupported_value")
                if constraint is not None:
                    raise APIError(400, "response_format cannot be combined with a forced tool call",
                                   param="response_format", code="unsupported_value")
                constraint = call_grammar(fmt, functions)
        if self.top_logprobs:
            raise APIError(400, "top_logprobs is not supported", param="top_logprobs", code="unsupported_value")
        messages = tuple(m.to_chat_message(i) for i, m in enumerate(self.messages))
        common = self._common(n_ctx=n_ctx, default_max_tokens=default_max_tokens,
                              default_temperature=default_temperature, default_drafter=default_drafter)
        return GenerationRequest(messages=messages, constraint=constraint, tools=tools_json, **common)


class CompletionRequest(_SamplingFields):
    """`POST /v1/completions` (text in, text out; one prompt string)."""

    prompt: Any = Field(..., description="A string, or a list holding one string.")
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, value: Any) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
            return value[0]
        if value is None:
            raise ValueError("prompt is required (a string)")
        if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ValueError("token-id prompts are not supported; send the prompt as text")
        if isinstance(value, list) and len(value) > 1:
            raise ValueError("batched prompts are not supported; send one prompt per request")
        raise ValueError("prompt must be a string")

    def to_generation_request(self, *, n_ctx: int, default_max_tokens: int | None = None,
                              default_temperature: float = 1.0, default_drafter: str = "adaptive") -> GenerationRequest:
        """The engine request; raises APIError (400) for what localspec cannot honour."""
        if self.echo:
            raise APIError(400, "echo is not supported", param="echo", code="unsupported_value")
        if self.suffix:
            raise APIError(400, "suffix (fill-in-the-middle) is not supported", param="suffix", code="unsupported_value")
        if self.best_of not in (None, 1):
            raise APIError(400, "best_of is not supported", param="best_of", code="unsupported_value")
        common = self._common(n_ctx=n_ctx, default_max_tokens=default_max_tokens,
                              default_temperature=default_temperature, default_drafter=default_drafter)
        return GenerationRequest(prompt=self.prompt, **common)
