"""Every failure becomes an OpenAI-shaped error, in one place.

`{"error": {"message", "type", "param", "code"}}` with a 4xx status for anything the
client can fix; 500 `internal_server_error` only for bugs (the server stays up). The
`openai` client turns these into `BadRequestError`, `NotFoundError`, `RateLimitError`...
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from localspec.errors import (
    ContextOverflowError,
    DecodeError,
    EngineBusyError,
    InvalidRequestError,
    KernelUnavailableError,
    LocalSpecError,
    ModelLoadError,
    ModelNotFoundError,
)

log = logging.getLogger(__name__)

# pydantic puts the union member it tried into `loc` ("stop.list[str].3"): not a field name
_UNION_TAG = re.compile(r"^(str|int|float|bool|none|list|dict|[a-z-]+\[.*\])$")

_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
    415: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error",
    500: "internal_server_error", 503: "service_unavailable",
}


class APIError(Exception):
    """An error to send to the client as-is: status, message, OpenAI type/param/code."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(status, "invalid_request_error")
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON body: {"error": {...}}."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        """This error as a JSON response."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def from_engine_error(exc: LocalSpecError) -> APIError:
    """Map an engine/library error to the status and code a client expects."""
    if isinstance(exc, ContextOverflowError):
        return APIError(400, str(exc), param="messages", code="context_length_exceeded")
    if isinstance(exc, InvalidRequestError):
        return APIError(400, str(exc), param=exc.param, code="invalid_value")
    if isinstance(exc, ModelNotFoundError):
        return APIError(404, str(exc), param="model", code="model_not_found")
    if isinstance(exc, EngineBusyError):
        return APIError(503, str(exc), code="engine_busy", headers={"Retry-After": "1"})
    if isinstance(exc, (DecodeError, ModelLoadError, KernelUnavailableError)):
        # the server's own failure, not the request's: a client must not "fix" its request
        log.error("%s: %s", type(exc).__name__, exc)
        return APIError(500, str(exc), code="server_error")
    log.warning("unexpected %s mapped to 400: %s", type(exc).__name__, exc)
    return APIError(400, str(exc), code=type(exc).__name__)


def from_validation_error(exc: ValidationError | RequestValidationError) -> APIError:
    """The first pydantic problem, named by its field path (`messages.0.role`)."""
    errors = exc.errors()
    if not errors:
        return APIError(400, "invalid request body", code="invalid_request")
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body" and not _UNION_TAG.match(str(p))]
    param = ".".join(loc) or None
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    where = f"{param}: " if param else ""
    return APIError(400, f"{where}{msg}{more}", param=param, code="invalid_value")


def install_handlers(app: FastAPI) -> None:
    """Register the handlers that turn every exception into an OpenAI-shaped response."""

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, APIError)
        return exc.response()

    async def engine_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, LocalSpecError)
        return from_engine_error(exc).response()

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, (ValidationError, RequestValidationError))
        return from_validation_error(exc).response()

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}; see GET /v1/models, POST /v1/chat/completions"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        headers = dict(exc.headers or {})
        return APIError(exc.status_code, message, code=code, headers=headers).response()

    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return APIError(
            500, "internal server error (a bug in localspec; the server keeps running, see its log)",
            code="internal_server_error",
        ).response()

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(LocalSpecError, engine_error)
    app.add_exception_handler(ValidationError, validation_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, internal_error)
