"""The completion endpoints: body -> request model -> engine request -> queue -> response.

Order matters: the body is read with a size limit, parsed, validated (pydantic, then the
engine's own eager checks in `engine.generate(...)`) *before* the request queues or a
stream starts, so bad requests get a 4xx and never a broken stream. Streams are SSE
(`data: {...}` lines, then `data: [DONE]`), one chunk per batch of tokens the engine
emitted together (see scheduler); a client that goes away cancels its
generation (sse-starlette cancels the body on disconnect; a non-streamed request has a
watcher on the connection).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from localspec.engine import Engine
from localspec.errors import LocalSpecError
from localspec.server import responses as R
from localspec.server.errors import APIError, from_engine_error, from_validation_error
from localspec.server.metrics import ServerMetrics
from localspec.server.protocol import ChatCompletionRequest, CompletionRequest
from localspec.server.scheduler import GenerationQueue, Relay
from localspec.server.settings import ServerSettings
from localspec.server.tools import ToolCallParser, ToolFormat, parse_reply, tool_format

log = logging.getLogger(__name__)

PING_S = 15.0
DONE_EVENT = b"data: [DONE]\n\n"


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The request body as a JSON object; 413 above `limit` bytes, 415/400 for non-JSON."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype and ctype != "application/json" and not ctype.endswith("+json"):
        raise APIError(415, f"Content-Type {ctype!r} is not supported; send JSON with "
                       "'Content-Type: application/json'", code="unsupported_media_type")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"the request body ({declared} bytes) exceeds the limit of {limit} bytes",
                       code="request_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"the request body exceeds the limit of {limit} bytes", code="request_too_large")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise APIError(400, "the request body is empty; send a JSON object", code="invalid_json")
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise APIError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, f"the request body must be a JSON object, not {type(data).__name__}",
                       code="invalid_json")
    return data


def _looks_like_path(name: str) -> bool:
    return (".." in name or name.startswith(("/", "\\", "~")) or "\\" in name or ":" in name[1:3]
            or any(ord(c) < 32 for c in name) or name.lower().endswith(".gguf"))


class Serving:
    """Handlers of /v1/chat/completions and /v1/completions over one engine."""

    def __init__(self, engine: Engine, settings: ServerSettings, metrics: ServerMetrics,
                 queue: GenerationQueue) -> None:
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        self.queue = queue
        info = engine.info
        self.model_id = settings.alias or info.target
        """The id served in /v1/models and echoed in responses."""
        self.model_names = {self.model_id, info.target}
        stem = info.target.rsplit("/", 1)[-1]
        self.model_names |= {stem, stem.removesuffix(".gguf")}

    def resolve_model(self, name: str | None) -> str:
        """The served id for a request's `model`, or 404 (paths are never looked at)."""
        if not name or name in self.model_names:
            return self.model_id
        if _looks_like_path(name) or self.settings.strict_model:
            raise APIError(404, f"model {name[:100]!r} is not served here; this server serves "
                           f"{self.model_id!r} (GET /v1/models)", param="model", code="model_not_found")
        log.debug("model %r accepted as %r (one model is served)", name, self.model_id)
        return self.model_id

    # -- shared -----------------------------------------------------------------------
    async def _admit(self, req: ChatCompletionRequest | CompletionRequest) -> tuple[Relay, str, float]:
        t0 = time.perf_counter()
        model = self.resolve_model(req.model)
        s = self.settings
        kw = {"chat_template": self.engine.chat_template} if isinstance(req, ChatCompletionRequest) else {}
        greq = req.to_generation_request(n_ctx=self.engine.info.n_ctx, default_max_tokens=s.default_max_tokens,
                                         default_temperature=s.default_temperature,
                                         default_drafter=s.default_drafter, **kw)
        try:
            generation = await run_in_threadpool(self.engine.generate, greq)  # eager validation
        except LocalSpecError as exc:
            raise from_engine_error(exc) from None

        def observe(relay: Relay) -> None:
            ttft = relay.t_first_token - t0 if relay.t_first_token is not None else None
            self.metrics.observe_generation(relay.stats, relay.finish_reason or "stop",
                                            time.perf_counter() - t0, ttft, relay.queue_s)

        relay = await self.queue.start(generation, on_finish=observe)
        return relay, model, t0

    @staticmethod
    def _parse(model_cls: type[ChatCompletionRequest] | type[CompletionRequest],
               data: dict[str, Any]) -> ChatCompletionRequest | CompletionRequest:
        try:
            return model_cls.model_validate(data)
        except ValidationError as exc:
            raise from_validation_error(exc) from None

    @staticmethod
    async def _watch_disconnect(request: Request, gen: Relay) -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                log.info("client disconnected; cancelling its generation")
                gen.cancel()
                return

    async def _collect(self, request: Request, gen: Relay) -> tuple[str, int]:
        watcher = asyncio.create_task(self._watch_disconnect(request, gen))
        parts: list[str] = []
        n = 0
        try:
            async for ev in gen.events():
                parts.append(ev.text)
                n += ev.token_id >= 0
        except LocalSpecError as exc:
            raise from_engine_error(exc) from None
        finally:
            watcher.cancel()
            if gen.cancelled:
                await gen.wait_closed()
        return "".join(parts), n

    # -- endpoints --------------------------------------------------------------------
    async def chat(self, request: Request) -> Any:
        """POST /v1/chat/completions."""
        data = await read_json(request, self.settings.max_body_bytes)
        req = self._parse(ChatCompletionRequest, data)
        assert isinstance(req, ChatCompletionRequest)
        gen, model, _ = await self._admit(req)
        rid, created = R.new_id("chatcmpl"), R.now()
        fmt = tool_format(self.engine.chat_template) if req.tools and req.tool_choice != "none" else None
        if req.stream:
            return self._sse(self._chat_stream(gen, rid, created, model, req.include_usage, fmt))
        text, n = await self._collect(request, gen)
        body = R.chat_completion(rid, created, model, text, gen.finish_reason, gen.stats, n)
        if fmt is not None:
            content, calls = parse_reply(fmt, text)
            if calls:
                choice = body["choices"][0]
                choice["message"] = {"role": "assistant", "content": content, "tool_calls": calls}
                if gen.finish_reason == "stop":
                    choice["finish_reason"] = "tool_calls"
        return JSONResponse(body)

    async def completion(self, request: Request) -> Any:
        """POST /v1/completions."""
        data = await read_json(request, self.settings.max_body_bytes)
        req = self._parse(CompletionRequest, data)
        assert isinstance(req, CompletionRequest)
        gen, model, _ = await self._admit(req)
        rid, created = R.new_id("cmpl"), R.now()
        if req.stream:
            return self._sse(self._text_stream(gen, rid, created, model, req.include_usage))
        text, n = await self._collect(request, gen)
        return JSONResponse(R.text_completion(rid, created, model, text, gen.finish_reason, gen.stats, n))

    # -- streaming --------------------------------------------------------------------
    @staticmethod
    def _sse(body: AsyncIterator[bytes]) -> EventSourceResponse:
        return EventSourceResponse(body, sep="\n", ping=PING_S)

    async def _guarded(self, gen: Relay, chunks: AsyncIterator[str]) -> AsyncIterator[bytes]:
        """`data: <chunk>` events, then `data: [DONE]`; an engine failure becomes an error
        event. If the client goes away (the body is cancelled or closed), cancel the generation."""
        done = False
        try:
            async for chunk in chunks:
                yield b"data: " + chunk.encode() + b"\n\n"
            done = True
            yield DONE_EVENT
        except Exception as exc:
            done = True
            if isinstance(exc, LocalSpecError):
                err = from_engine_error(exc)
            else:
                log.exception("generation failed mid-stream")
                err = APIError(500, "internal server error during generation", code="internal_server_error")
            yield b"data: " + json.dumps(err.body()).encode() + b"\n\n"
            yield DONE_EVENT
        finally:
            if not done:
                gen.cancel()

    def _chat_stream(self, gen: Relay, rid: str, created: int, model: str,
                     include_usage: bool, fmt: ToolFormat | None = None) -> AsyncIterator[bytes]:
        parser = ToolCallParser(fmt) if fmt is not None else None

        def deltas(events: Any) -> Iterator[dict[str, Any]]:
            for e in events:
                if e[0] == "content":
                    if e[1]:
                        yield {"content": e[1]}
                elif e[0] == "call":
                    yield {"tool_calls": [{"index": e[1], "id": e[2], "type": "function",
                                           "function": {"name": e[3], "arguments": ""}}]}
                elif e[1:] and e[2]:
                    yield {"tool_calls": [{"index": e[1], "function": {"arguments": e[2]}}]}

        async def chunks() -> AsyncIterator[str]:
            yield _dumps(R.chat_chunk(rid, created, model, {"role": "assistant", "content": ""}))
            n = 0
            async for batch in gen.batches():
                n += sum(ev.token_id >= 0 for ev in batch)
                text = "".join(ev.text for ev in batch)
                if text and parser is None:
                    yield _dumps(R.chat_chunk(rid, created, model, {"content": text}))
                elif text and parser is not None:
                    for delta in deltas(parser.feed(text)):
                        yield _dumps(R.chat_chunk(rid, created, model, delta))
            reason = gen.finish_reason or "stop"
            if parser is not None:
                for delta in deltas(parser.finish()):
                    yield _dumps(R.chat_chunk(rid, created, model, delta))
                if parser.calls and reason == "stop":
                    reason = "tool_calls"
            extra = {} if include_usage else {"speculative": R.speculative(gen.stats)}
            yield _dumps(R.chat_chunk(rid, created, model, {}, reason, **extra))
            if include_usage:
                yield _dumps(R.usage_chunk("chat.completion.chunk", rid, created, model, gen.stats, n))

        return self._guarded(gen, chunks())

    def _text_stream(self, gen: Relay, rid: str, created: int, model: str,
                     include_usage: bool) -> AsyncIterator[bytes]:
        async def chunks() -> AsyncIterator[str]:
            n = 0
            async for batch in gen.batches():
                n += sum(ev.token_id >= 0 for ev in batch)
                text = "".join(ev.text for ev in batch)
                if text:
                    yield _dumps(R.text_chunk(rid, created, model, text))
            extra = {} if include_usage else {"speculative": R.speculative(gen.stats)}
            yield _dumps(R.text_chunk(rid, created, model, "", gen.finish_reason or "stop", **extra))
            if include_usage:
                yield _dumps(R.usage_chunk("text_completion", rid, created, model, gen.stats, n))

        return self._guarded(gen, chunks())
