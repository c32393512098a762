"""Check a GenerationRequest and turn it into what the loop needs, before any compute.

The data path is one way: request -> prompt text (the target's chat template for
`messages`) -> the target's tokens -> `PreparedRequest`. `prepare` needs only a tokenizer
and the engine's limits, never the Engine itself.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from localspec.engine.backend import Tokenizer
from localspec.engine.chat import render_chat, supports_tools
from localspec.engine.constraint import compile_grammar
from localspec.errors import ContextOverflowError, InvalidRequestError
from localspec.types import (
    DRAFTER_KINDS,
    MAX_GAMMA,
    MAX_STOP_STRINGS,
    ChatMessage,
    GenerationRequest,
    SamplingParams,
)


@dataclass(frozen=True)
class Limits:
    """What a request is checked against besides its own fields."""

    n_ctx: int
    """The target's context window in tokens."""
    default_gamma: int
    """γ when the request gives none."""
    drafters: frozenset[str] = frozenset({"ngram"})
    """Names of the drafters the engine offers (besides "none" and "adaptive")."""
    target_name: str = "the target"
    """For messages."""


@dataclass(frozen=True)
class PreparedRequest:
    """A validated request: prompt tokens, sampling, budget and drafting choice."""

    prompt_tokens: tuple[int, ...]
    params: SamplingParams
    seed: int | None
    stop: tuple[str, ...]
    max_tokens: int
    """Capped by the room the prompt leaves in the context."""
    drafter: str
    """One of DRAFTER_KINDS."""
    gamma: int
    p_min: float
    grammar: str | None = None
    """The compiled llguidance grammar the output must match (engine/constraint.py), or None."""


def prompt_text(tokenizer: Tokenizer, request: GenerationRequest) -> str:
    """The text to tokenize: `prompt` as is, or `messages` under the chat template."""
    if request.messages is None:
        assert request.prompt is not None
        return request.prompt
    tools = None if request.tools is None else json.loads(request.tools)
    return chat_text(tokenizer, request.messages, request.add_generation_prompt, tools)


def chat_text(
    tokenizer: Tokenizer, messages: tuple[ChatMessage, ...] | list[ChatMessage], add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
) -> str:
    """`messages` (and `tools`) rendered with the tokenizer's own chat template."""
    return render_chat(
        tokenizer.chat_template, messages, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token,
        add_generation_prompt=add_generation_prompt, tools=tools,
    )


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRequestError(f"{name} must be a finite number, got {value!r}", param=name)
    return float(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_text(r: GenerationRequest) -> None:
    """Every string must be encodable as UTF-8: JSON may carry lone surrogates ("\\ud800"),
    which no tokenizer can encode."""
    fields: list[tuple[str, object]] = [("prompt", r.prompt)]
    for i, m in enumerate(r.messages or ()):
        fields += [(f"messages.{i}.role", m.role), (f"messages.{i}.content", m.content),
                   (f"messages.{i}.tool_call_id", m.tool_call_id), (f"messages.{i}.name", m.name)]
        fields += [(f"messages.{i}.tool_calls", t) for c in m.tool_calls for t in (c.id, c.name, c.arguments)]
    fields += [(f"stop.{i}", s) for i, s in enumerate(r.stop)]
    fields += [("tools", r.tools), ("response_format", r.constraint.source if r.constraint else None)]
    for name, value in fields:
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidRequestError(
                    f"{name} is not valid Unicode text (a lone surrogate at position {exc.start}); "
                    "send UTF-8 text", param=name.split(".")[0]
                ) from None


def prepare(request: GenerationRequest, tokenizer: Tokenizer, limits: Limits) -> PreparedRequest:
    """Validate `request` (InvalidRequestError names the field; ContextOverflowError when the
    prompt does not fit) and tokenize its prompt."""
    r = request
    if (r.prompt is None) == (r.messages is None):
        raise InvalidRequestError("give exactly one of prompt or messages", param="prompt")
    if not _is_int(r.max_tokens) or r.max_tokens < 1:
        raise InvalidRequestError(f"max_tokens must be an integer >= 1, got {r.max_tokens!r}", param="max_tokens")
    temperature = _number(r.temperature, "temperature")
    if not 0.0 <= temperature <= 100.0:
        raise InvalidRequestError(f"temperature must be in [0, 100], got {temperature}", param="temperature")
    top_p = _number(r.top_p, "top_p")
    if not 0.0 < top_p <= 1.0:
        raise InvalidRequestError(f"top_p must be in (0, 1], got {top_p}", param="top_p")
    if not _is_int(r.top_k) or r.top_k < 0:
        raise InvalidRequestError(f"top_k must be an integer >= 0, got {r.top_k!r}", param="top_k")
    p_min = _number(r.p_min, "p_min")
    if not 0.0 <= p_min < 1.0:
        raise InvalidRequestError(f"p_min must be in [0, 1), got {p_min}", param="p_min")
    if r.seed is not None and (not _is_int(r.seed) or r.seed < 0):
        raise InvalidRequestError(f"seed must be a non-negative integer, got {r.seed!r}", param="seed")
    if r.drafter not in DRAFTER_KINDS:
        raise InvalidRequestError(
            f"drafter must be one of {', '.join(DRAFTER_KINDS)}, got {r.drafter!r}", param="drafter"
        )
    if r.drafter not in ("none", "adaptive") and r.drafter not in limits.drafters:
        if r.drafter == "model":
            raise InvalidRequestError(
                "drafter 'model' needs a draft model: load one with -md/--model-draft", param="drafter"
            )
        if r.drafter == "mtp":
            raise InvalidRequestError(
                f"drafter 'mtp' needs a target with multi-token-prediction (nextn) layers, and "
                f"{limits.target_name} has none: use --drafter model with -md, or ngram", param="drafter"
            )
        raise InvalidRequestError(
            f"drafter {r.drafter!r} is not available for the loaded models "
            f"(available: {', '.join(sorted(limits.drafters | {'none', 'adaptive'}))})", param="drafter"
        )
    gamma = limits.default_gamma if r.gamma is None else r.gamma
    if not _is_int(gamma) or not 0 <= gamma <= MAX_GAMMA:
        raise InvalidRequestError(f"gamma must be an integer in [0, {MAX_GAMMA}], got {gamma!r}", param="gamma")
    stop = tuple(r.stop)
    if len(stop) > MAX_STOP_STRINGS or not all(isinstance(s, str) for s in stop):
        raise InvalidRequestError(f"stop must be at most {MAX_STOP_STRINGS} strings", param="stop")
    _check_text(r)
    if r.tools is not None:
        if r.messages is None:
            raise InvalidRequestError("tools need messages (a chat), not a raw prompt", param="tools")
        try:
            tools = json.loads(r.tools)
        except ValueError:
            tools = None
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise InvalidRequestError("tools must be the JSON text of a list of tool objects", param="tools")
        if not supports_tools(tokenizer.chat_template):
            name = getattr(tokenizer, "name", "the loaded model")
            raise InvalidRequestError(
                f"{name}'s chat template has no tool support (it does not render `tools`); send the request "
                "without tools, or serve a model whose template does (e.g. Qwen2.5)", param="tools",
            )
    grammar = None if r.constraint is None else compile_grammar(r.constraint)
    tokens = tokenizer.tokenize(prompt_text(tokenizer, r), add_special=True, parse_special=True)
    if not tokens:
        raise InvalidRequestError("the prompt is empty after tokenization", param="prompt")
    if len(tokens) >= limits.n_ctx:
        raise ContextOverflowError(
            f"the prompt has {len(tokens)} tokens but the context holds {limits.n_ctx}; "
            "shorten it or load the model with a larger context (-c/--ctx-size)"
        )
    return PreparedRequest(
        prompt_tokens=tuple(tokens),
        params=SamplingParams(temperature=temperature, top_k=r.top_k, top_p=top_p),
        seed=r.seed,
        stop=stop,
        max_tokens=min(r.max_tokens, limits.n_ctx - len(tokens)),
        drafter=r.drafter,
        gamma=gamma,
        p_min=p_min,
        grammar=grammar,
    )
