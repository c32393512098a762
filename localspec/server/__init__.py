"""The local OpenAI-compatible server: `from localspec.server.app import create_app`.

    localspec serve [-m TARGET -md DRAFT] [--host 127.0.0.1] [--port 8000] [--api-key K]
    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="K or anything")

Decisions (what clients can rely on):
- Endpoints: POST /v1/chat/completions, POST /v1/completions (SSE with `stream: true`,
  `stream_options.include_usage`), GET /v1/models[/{id}], GET /health, GET /metrics.
  With an API key (`--api-key` / LOCALSPEC_API_KEY) every /v1/* route needs
  `Authorization: Bearer K` (constant-time compare); /health and /metrics stay open, as in vLLM.
- `model`: the served id is `--alias` or the target's name. Like llama.cpp's server (one
  model loaded), any other *plain* name is accepted and answered by the served model, so
  editors configured with e.g. "gpt-4o" just work; `--strict-model` makes them 404. Names
  that look like paths or files ("../x", "/etc/passwd", "C:\\x", "~/x", "x.gguf", control
  characters) always get 404 `model_not_found`; a name is only ever compared, never opened.
- Defaults when a request omits them: temperature 1.0 (OpenAI's; `--temp`), max_tokens =
  until EOS or the context is full (`-n`), drafter adaptive (`--drafter`). max_tokens larger
  than the whole context is a 400 `context_length_exceeded`; otherwise it is capped by the
  room the prompt leaves (finish_reason "length").
- Extras accepted in the body: `drafter`, `gamma` (or vLLM's `num_speculative_tokens`),
  `top_k`, `p_min`. Responses add `speculative` (SpecStats summary) to the final response /
  last chunk, and `usage.prompt_tokens_details.cached_tokens` (KV reused from the last request).
- Refused with a 400 naming the field: n > 1, logprobs, top_logprobs, logit_bias, tools
  (unless tool_choice "none"), response_format other than text, echo, suffix, best_of > 1,
  token-id or batched prompts. Penalties and other unknown fields are accepted and ignored
  (logged at INFO).
- One generation at a time; up to `--max-queue` (16) wait, more get 429 + Retry-After. A client
  that disconnects cancels its generation at the next speculative step.
- Errors are always `{"error": {"message", "type", "param", "code"}}`; bodies over 4 MiB get
  413, non-JSON content types 415; 500 `internal_server_error` only for bugs.
- Metrics use vLLM's names under a `localspec:` prefix (see metrics.py), counters with the
  `_total` suffix, e.g. `localspec:spec_decode_num_accepted_tokens_per_pos_total{position="0"}`.
"""

from __future__ import annotations
