"""The server when the target's RPC worker goes away (a fake target raising what the llama.cpp
backend raises then; the real path is tests/engine/test_rpc.py): the stream ends with an error
event naming the worker, later requests get the same error, and the server keeps answering."""

from __future__ import annotations

import json
from collections.abc import Sequence

import httpx
import numpy as np
import numpy.typing as npt

from localspec.engine import Engine
from localspec.engine.fake import FakeBackend
from localspec.errors import WorkerLostError
from tests.server.conftest import SCRIPT, live_server, post_json, sse_payloads

WORKER = "10.0.0.2:50052"
MESSAGE = (f"the RPC worker at {WORKER} is gone (it closed the connection), and with it the model layers it held; "
           "restart it on 10.0.0.2 (`localspec worker --port 50052`, with the --host it had), then load the model again")


class _LosesItsWorker(FakeBackend):
    """A target whose worker goes away after `after` forwards, and stays away."""

    def __init__(self, after: int, **kw: object) -> None:
        super().__init__(SCRIPT, name="fake-target", **kw)  # type: ignore[arg-type]
        self.after = after
        self.forwards = 0

    def decode(self, tokens: Sequence[int], all_logits: bool = False) -> npt.NDArray[np.float32]:
        self.forwards += 1
        if self.forwards > self.after:
            raise WorkerLostError(MESSAGE, WORKER)
        return super().decode(tokens, all_logits)


def test_a_lost_worker_ends_the_stream_with_an_error_and_the_server_stays_up() -> None:
    engine = Engine(_LosesItsWorker(after=4), FakeBackend(SCRIPT, name="fake-draft", error_rate=0.2, seed=1))
    body = {"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 40, "temperature": 0}
    with live_server(engine) as srv:
        r = post_json(srv.base + "/chat/completions", {**body, "stream": True})
        assert r.status_code == 200
        payloads = sse_payloads(r)
        err = json.loads(payloads[-1])["error"]
        assert err["message"] == MESSAGE and err["code"] == "server_error"
        assert any(json.loads(p).get("choices") for p in payloads[:-1])  # text came before the loss
        again = post_json(srv.base + "/chat/completions", body)
        assert again.status_code == 500 and again.json()["error"]["message"] == MESSAGE
        health = httpx.get(srv.url + "/health", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        srv.wait_idle()
