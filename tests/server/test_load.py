"""Load on real weights, loopback only and bounded: 8 concurrent streaming clients × 20 requests
each (SmolLM2, greedy, short replies). Zero failures, no mixed-up streams (each client's
stream must equal its request's non-concurrent output), queue limits hold."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from openai.types.chat import ChatCompletionChunk

from tests.server.conftest import LiveServer, live_server, sse_payloads

pytestmark = [pytest.mark.models, pytest.mark.slow]

CLIENTS = 8
REQUESTS = 20
MAX_TOKENS = 16
TOPICS = ["the sea", "a mountain", "coffee", "a red bicycle", "winter", "the moon", "bread", "a violin"]


def body(i: int, stream: bool = True) -> dict:
    return {"model": "SmolLM2-135M", "messages": [{"role": "user", "content": f"Describe {TOPICS[i]} in one line."}],
            "max_tokens": MAX_TOKENS, "temperature": 0, "seed": i, "stream": stream}


def stream_text(client: httpx.Client, url: str, payload: dict) -> str:
    r = client.post(url, json=payload)
    assert r.status_code == 200, r.text[:200]
    chunks = [ChatCompletionChunk.model_validate_json(p) for p in sse_payloads(r)]
    assert len({c.id for c in chunks}) == 1
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.fixture(scope="module")
def load_server(smol_engine: object) -> Iterator[LiveServer]:
    with live_server(smol_engine) as srv:  # type: ignore[arg-type]
        yield srv
        srv.wait_idle()


def test_load_8_clients_x_20_streams_no_failures_no_mixups(load_server: LiveServer) -> None:
    url = load_server.base + "/chat/completions"
    with httpx.Client(timeout=120) as client:
        reference = [stream_text(client, url, body(i)) for i in range(CLIENTS)]
    assert len(set(reference)) == CLIENTS, "prompts must give distinct replies to detect mix-ups"

    def run_client(i: int) -> list[str]:
        with httpx.Client(timeout=120) as client:
            return [stream_text(client, url, body(i)) for _ in range(REQUESTS)]

    t0 = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(run_client, range(CLIENTS)))
    elapsed = time.monotonic() - t0
    for i, texts in enumerate(results):
        assert len(texts) == REQUESTS
        mismatched = [t for t in texts if t != reference[i]]
        assert not mismatched, (i, reference[i], mismatched[:2])
    metrics = httpx.get(load_server.url + "/metrics").text
    assert 'status="500"' not in metrics and 'status="429"' not in metrics
    print(f"\n{CLIENTS * REQUESTS} streamed requests in {elapsed:.1f}s")


def test_load_small_queue_sees_429s_never_500s(smol_engine: object) -> None:
    from localspec.server.settings import ServerSettings

    with live_server(smol_engine, ServerSettings(max_queue=1)) as srv:  # type: ignore[arg-type]
        def one(i: int) -> int:
            with httpx.Client(timeout=120) as client:
                r = client.post(srv.base + "/chat/completions", json=body(i % CLIENTS))
                if r.status_code == 200:
                    sse_payloads(r)
                else:
                    assert r.json()["error"]["code"] == "queue_full" and "retry-after" in r.headers
                return r.status_code

        with ThreadPoolExecutor(CLIENTS) as pool:
            statuses = list(pool.map(one, range(CLIENTS * 2)))
        assert set(statuses) <= {200, 429}, statuses
        assert statuses.count(429) > 0 and statuses.count(200) >= 2
        srv.wait_idle()
        r = httpx.post(srv.base + "/chat/completions", json=body(0, stream=False), timeout=60)
        assert r.status_code == 200
