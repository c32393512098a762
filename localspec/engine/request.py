"""Check a GenerationRequest and turn it into what the loop needs (before any compute)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from localspec.engine.drafting import MAX_GAMMA
from localspec.errors import ContextOverflowError, InvalidRequestError
from localspec.types import DRAFTER_KINDS, GenerationRequest, SamplingParams

if TYPE_CHECKING:
    from localspec.engine.loop import Engine

MAX_STOP_STRINGS = 16


@dataclass(frozen=True)
class Prepared:
    """A validated request: tokens, sampling, budget."""

    prompt_tokens: tuple[int, ...]
    params: SamplingParams
    seed: int | None
    stop: tuple[str, ...]
    max_tokens: int
    drafter: str
    gamma: int
    p_min: float


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRequestError(f"{name} must be a finite number, got {value!r}", param=name)
    return float(value)


def prepare(engine: Engine, request: GenerationRequest) -> Prepared:
    """Validate `request` against `engine` and tokenize its prompt."""
    r = request
    if (r.prompt is None) == (r.messages is None):
        raise InvalidRequestError("give exactly one of prompt or messages", param="prompt")
    if not isinstance(r.max_tokens, int) or isinstance(r.max_tokens, bool) or r.max_tokens < 1:
        raise InvalidRequestError(f"max_tokens must be an integer >= 1, got {r.max_tokens!r}", param="max_tokens")
    temperature = _number(r.temperature, "temperature")
    if not 0.0 <= temperature <= 100.0:
        raise InvalidRequestError(f"temperature must be in [0, 100], got {temperature}", param="temperature")
    top_p = _number(r.top_p, "top_p")
    if not 0.0 < top_p <= 1.0:
        raise InvalidRequestError(f"top_p must be in (0, 1], got {top_p}", param="top_p")
    if not isinstance(r.top_k, int) or isinstance(r.top_k, bool) or r.top_k < 0:
        raise InvalidRequestError(f"top_k must be an integer >= 0, got {r.top_k!r}", param="top_k")
    p_min = _number(r.p_min, "p_min")
    if not 0.0 <= p_min < 1.0:
        raise InvalidRequestError(f"p_min must be in [0, 1), got {p_min}", param="p_min")
    if r.seed is not None and (not isinstance(r.seed, int) or isinstance(r.seed, bool) or r.seed < 0):
        raise InvalidRequestError(f"seed must be a non-negative integer, got {r.seed!r}", param="seed")
    if r.drafter not in DRAFTER_KINDS:
        raise InvalidRequestError(
            f"drafter must be one of {', '.join(DRAFTER_KINDS)}, got {r.drafter!r}", param="drafter"
        )
    if r.drafter == "model" and engine.draft is None:
        raise InvalidRequestError(
            "drafter 'model' needs a draft model: load one with -md/--model-draft", param="drafter"
        )
    gamma = engine.default_gamma if r.gamma is None else r.gamma
    if not isinstance(gamma, int) or isinstance(gamma, bool) or not 0 <= gamma <= MAX_GAMMA:
        raise InvalidRequestError(f"gamma must be an integer in [0, {MAX_GAMMA}], got {gamma!r}", param="gamma")
    stop = tuple(r.stop)
    if len(stop) > MAX_STOP_STRINGS or not all(isinstance(s, str) for s in stop):
        raise InvalidRequestError(f"stop must be at most {MAX_STOP_STRINGS} strings", param="stop")
    if r.messages is not None:
        text = engine.render_chat(r.messages, add_generation_prompt=r.add_generation_prompt)
    else:
        assert r.prompt is not None
        text = r.prompt
    tokens = engine.tokenize(text)
    if not tokens:
        raise InvalidRequestError("the prompt is empty after tokenization", param="prompt")
    n_ctx = engine.target.n_ctx
    if len(tokens) >= n_ctx:
        raise ContextOverflowError(
            f"the prompt has {len(tokens)} tokens but the context holds {n_ctx}; "
            "shorten it or load the model with a larger context (-c/--ctx-size)"
        )
    return Prepared(
        prompt_tokens=tuple(tokens),
        params=SamplingParams(temperature=temperature, top_k=r.top_k, top_p=top_p),
        seed=r.seed,
        stop=stop,
        max_tokens=min(r.max_tokens, n_ctx - len(tokens)),
        drafter=r.drafter,
        gamma=gamma,
        p_min=p_min,
    )
