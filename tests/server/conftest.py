"""Server test helpers: a real uvicorn server in a thread on 127.0.0.1 (port 0), fake engines,
and an SSE reader that checks the framing (content type, `data: ` lines, final `[DONE]`)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from localspec.engine import Engine
from localspec.engine.fake import FakeBackend
from localspec.server.app import create_app
from localspec.server.settings import ServerSettings

SCRIPT = "Hello! I am a fake model. I repeat my script and then stop. " * 3


class LiveServer:
    """A running server: `url` (http://127.0.0.1:PORT), `base` (…/v1), the app and its engine."""

    def __init__(self, app: Any, url: str) -> None:
        self.app = app
        self.url = url
        self.base = url + "/v1"

    @property
    def engine(self) -> Engine:
        return self.app.state.engine

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until no generation runs or waits (cancelled ones release the engine)."""
        queue = self.app.state.queue
        deadline = time.monotonic() + timeout
        while queue.running or queue.waiting:
            assert time.monotonic() < deadline, "the server did not become idle"
            time.sleep(0.01)

    def openai(self, **kw: Any) -> Any:
        import openai

        kw.setdefault("api_key", "unused")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 60.0)
        return openai.OpenAI(base_url=self.base, **kw)


@contextmanager
def live_server(engine: Engine, settings: ServerSettings | None = None) -> Iterator[LiveServer]:
    """Run `create_app(engine, settings)` on uvicorn in a thread; stop it afterwards."""
    import uvicorn

    app = create_app(engine, settings or ServerSettings())
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off",
                            timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield LiveServer(app, f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(10)


def fake_engine(script: str = SCRIPT, **kw: Any) -> Engine:
    """A fast fake pair: the drafter errs at some positions so acceptance < 1."""
    return Engine(FakeBackend(script, name="fake-target", **kw),
                  FakeBackend(script, name="fake-draft", error_rate=0.2, seed=1, **kw))


@pytest.fixture
def make_server() -> Iterator[Callable[..., LiveServer]]:
    """Start servers (fake engine unless one is given); all are stopped at the end of the test."""
    stack: list[Any] = []

    def start(engine: Engine | None = None, **settings: Any) -> LiveServer:
        cm = live_server(engine or fake_engine(), ServerSettings(**settings))
        stack.append(cm)
        return cm.__enter__()

    yield start
    for cm in reversed(stack):
        cm.__exit__(None, None, None)


@pytest.fixture(scope="module")
def fake_server() -> Iterator[LiveServer]:
    """One fake-engine server shared by a module (tests must leave it idle)."""
    with live_server(fake_engine()) as srv:
        yield srv


def sse_payloads(response: httpx.Response) -> list[str]:
    """The `data:` payloads of a finished SSE response, checking framing and the final [DONE]."""
    assert response.headers["content-type"].startswith("text/event-stream"), response.headers["content-type"]
    lines = [ln for ln in response.text.split("\n") if ln and not ln.startswith(":")]
    assert all(ln.startswith("data: ") for ln in lines), lines[:5]
    assert lines[-1] == "data: [DONE]", lines[-3:]
    assert lines.count("data: [DONE]") == 1
    return [ln[6:] for ln in lines[:-1]]


def completion_chunk(payload: str) -> Any:
    """Validate a streamed /v1/completions chunk with the SDK's `Completion` type.

    The SDK streams completions as `Completion` objects without validating them, and its
    `CompletionChoice.finish_reason` is a required literal, although OpenAI (and vLLM,
    llama.cpp) send `finish_reason: null` in every chunk but the last. So chunks with a
    null finish_reason are checked against the same type with only that field relaxed;
    the final chunk must pass the SDK's type unchanged.
    """
    from openai.types import Completion

    data = json.loads(payload)
    if any(c.get("finish_reason") is None for c in data.get("choices", [])):
        return _StreamingCompletion.model_validate(data)
    return Completion.model_validate(data)


def _streaming_completion_type() -> Any:
    from typing import Literal, Optional

    from openai.types import Completion, CompletionChoice

    class _Choice(CompletionChoice):
        finish_reason: Optional[Literal["stop", "length", "content_filter"]]  # type: ignore[assignment]

    class _Chunk(Completion):
        choices: list[_Choice]  # type: ignore[assignment]

    return _Chunk


_StreamingCompletion = _streaming_completion_type()


def post_json(url: str, body: Any, **kw: Any) -> httpx.Response:
    """POST `body` as JSON (raw httpx, no SDK)."""
    headers = {"Content-Type": "application/json", **kw.pop("headers", {})}
    return httpx.post(url, content=json.dumps(body), headers=headers, timeout=kw.pop("timeout", 60.0), **kw)
