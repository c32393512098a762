"""Response bodies in OpenAI's shapes (validated in tests by the `openai` SDK's own types).

Extra fields the SDK ignores: `speculative` (the generation's SpecStats summary) on the
final response / last chunk, and `usage.prompt_tokens_details.cached_tokens` (prompt
tokens whose KV was reused from the previous request).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from localspec.engine import SpecStats

FINISH_REASONS = {"stop": "stop", "length": "length", "cancelled": "stop", "tool_calls": "tool_calls"}
"""Engine finish reason -> OpenAI's. "cancelled" only reaches a client when the server
itself stops a generation (shutdown); a client that disconnected sees nothing."""


def new_id(kind: str) -> str:
    """`chatcmpl-…` / `cmpl-…` ids, unique per response."""
    return f"{kind}-{uuid.uuid4().hex}"


def now() -> int:
    """`created`: Unix seconds."""
    return int(time.time())


def finish_reason(engine_reason: str | None) -> str:
    """OpenAI's finish_reason for the engine's."""
    return FINISH_REASONS.get(engine_reason or "stop", "stop")


def usage(stats: SpecStats | None, completion_tokens: int) -> dict[str, Any]:
    """`usage`: prompt/completion/total tokens (+ cached prompt tokens)."""
    prompt = stats.num_prompt_tokens if stats else 0
    cached = stats.num_cached_prompt_tokens if stats else 0
    return {
        "prompt_tokens": prompt, "completion_tokens": completion_tokens, "total_tokens": prompt + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def speculative(stats: SpecStats | None) -> dict[str, Any] | None:
    """The `speculative` summary of one generation (the same definitions as SpecStats)."""
    if stats is None:
        return None
    return {
        "num_steps": stats.num_steps,
        "num_drafts": stats.num_drafts,
        "num_draft_tokens": stats.num_draft_tokens,
        "num_accepted_tokens": stats.num_accepted_tokens,
        "mean_acceptance_length": round(stats.mean_acceptance_length, 4),
        "acceptance_rate": round(stats.acceptance_rate, 4),
        "accepted_per_position": list(stats.accepted_per_position),
        "drafted_per_position": list(stats.drafted_per_position),
        "kernel": stats.kernel,
        "numerics": stats.numerics,
        "drafter": stats.drafter,
        "drafter_counts": dict(stats.drafter_counts),
        "mean_gamma": round(stats.mean_gamma, 4),
        "gamma_counts": {str(k): v for k, v in sorted(stats.gamma_counts.items())},
        "mean_batch_size": round(stats.mean_batch_size, 4),
        "tokens_per_s": round(stats.tokens_per_s, 3),
        "t_prefill_s": round(stats.t_prefill_s, 4),
        "t_generate_s": round(stats.t_generate_s, 4),
    }


def chat_completion(rid: str, created: int, model: str, text: str, reason: str | None,
                    stats: SpecStats | None, completion_tokens: int) -> dict[str, Any]:
    """A non-streamed `chat.completion`."""
    return {
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{
            "index": 0, "message": {"role": "assistant", "content": text},
            "logprobs": None, "finish_reason": finish_reason(reason),
        }],
        "usage": usage(stats, completion_tokens),
        "speculative": speculative(stats),
    }


def chat_chunk(rid: str, created: int, model: str, delta: dict[str, Any], reason: str | None = None,
               **extra: Any) -> dict[str, Any]:
    """One `chat.completion.chunk` with a single choice."""
    return {
        "id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None,
                     "finish_reason": finish_reason(reason) if reason else None}],
        **extra,
    }


def usage_chunk(obj: str, rid: str, created: int, model: str, stats: SpecStats | None,
                completion_tokens: int) -> dict[str, Any]:
    """The last chunk with `stream_options.include_usage`: `choices: []` plus usage."""
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [],
            "usage": usage(stats, completion_tokens), "speculative": speculative(stats)}


def text_completion(rid: str, created: int, model: str, text: str, reason: str | None,
                    stats: SpecStats | None, completion_tokens: int) -> dict[str, Any]:
    """A non-streamed `text_completion`."""
    return {
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason(reason)}],
        "usage": usage(stats, completion_tokens),
        "speculative": speculative(stats),
    }


def text_chunk(rid: str, created: int, model: str, text: str, reason: str | None = None,
               **extra: Any) -> dict[str, Any]:
    """One streamed `text_completion` chunk."""
    return {
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None,
                     "finish_reason": finish_reason(reason) if reason else None}],
        **extra,
    }


def model_card(model_id: str, created: int, *, target: str, draft: str | None, n_ctx: int,
               kernel: str, numerics: str) -> dict[str, Any]:
    """One entry of `GET /v1/models`."""
    return {"id": model_id, "object": "model", "created": created, "owned_by": "localspec",
            "target": target, "draft": draft, "n_ctx": n_ctx, "kernel": kernel, "numerics": numerics}
