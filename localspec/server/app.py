"""`create_app(engine, settings)`: the OpenAI-compatible server, the only way to build it.

Routes (thin; the work is in serving.py):
    POST /v1/chat/completions   POST /v1/completions     (stream or not)
    GET  /v1/models             GET  /v1/models/{model}
    GET  /health                GET  /metrics            (open even with an API key, as in vLLM)
State lives on `app.state` (engine, settings, metrics, queue); nothing happens at import.
"""

from __future__ import annotations

import hmac
import logging
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localspec.engine import Engine
from localspec.server import responses as R
from localspec.server.errors import APIError, install_handlers
from localspec.server.metrics import CONTENT_TYPE, ServerMetrics
from localspec.server.scheduler import GenerationQueue
from localspec.server.serving import Serving
from localspec.server.settings import ServerSettings

log = logging.getLogger(__name__)

_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics")


def endpoint_label(path: str) -> str:
    """A bounded metrics label for a request path (hostile paths all become "other")."""
    if path in _ENDPOINTS:
        return path
    if path.startswith("/v1/models/"):
        return "/v1/models/{model}"
    return "other"


class _Gate:
    """ASGI middleware: API-key check on /v1/* (constant-time) and per-request metrics."""

    def __init__(self, app: ASGIApp, *, api_key: str | None, metrics: ServerMetrics) -> None:
        self.app = app
        self.key = api_key.encode() if api_key else None
        self.metrics = metrics

    def _authorized(self, scope: Scope) -> bool:
        assert self.key is not None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.key)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        status = [500]
        t0 = time.perf_counter()

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if self.key is not None and path.startswith("/v1") and not self._authorized(scope):
                err = APIError(401, "invalid or missing API key: send 'Authorization: Bearer <key>'",
                               code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
                await err.response()(scope, receive, send_status)
            else:
                await self.app(scope, receive, send_status)
        finally:
            self.metrics.observe_http(endpoint_label(path), status[0], time.perf_counter() - t0)


def create_app(engine: Engine, settings: ServerSettings | None = None) -> FastAPI:
    """The FastAPI app serving `engine` (`engine.parallel` generations at a time, the rest queued)."""
    settings = settings or ServerSettings()
    metrics = ServerMetrics(numerics=engine.info.numerics)
    queue = GenerationQueue(engine, settings.max_queue, settings.retry_after_s)
    serving = Serving(engine, settings, metrics, queue)
    metrics.waiting.set_function(lambda: queue.waiting)
    metrics.running.set_function(lambda: queue.running)
    metrics.slots.set(queue.slots)
    created = R.now()

    app = FastAPI(title="localspec", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine = engine
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.queue = queue
    app.state.serving = serving
    install_handlers(app)
    app.add_middleware(_Gate, api_key=settings.api_key_value, metrics=metrics)

    def card() -> dict[str, Any]:
        info = engine.info
        return R.model_card(serving.model_id, created, target=info.target, draft=info.draft,
                            n_ctx=info.n_ctx, kernel=info.kernel, numerics=info.numerics)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await serving.chat(request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await serving.completion(request)

    @app.get("/v1/models")
    async def list_models() -> JSONResponse:
        return JSONResponse({"object": "list", "data": [card()]})

    @app.get("/v1/models/{model:path}")
    async def retrieve_model(model: str) -> JSONResponse:
        if model not in serving.model_names:
            raise APIError(404, f"model {model[:100]!r} is not served here; this server serves "
                           f"{serving.model_id!r}", param="model", code="model_not_found")
        return JSONResponse(card())

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok", "model": serving.model_id, "running": queue.running,
                             "parallel": queue.slots, "waiting": queue.waiting, "max_queue": queue.max_queue})

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    return app
