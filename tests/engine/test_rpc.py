"""RPC workers: the target's layers on `localspec worker` processes over loopback, the drafter
local. Greedy output over RPC must equal the local run (workers compute with the same CPU
kernels in exact numerics); unreachable workers, workers of another protocol version and busy
workers are clear errors before any weights load."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from localspec.engine.llama import rpc
from localspec.errors import ModelLoadError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _FakeWorker:
    """A TCP server that answers HELLO with a chosen version (or never answers)."""

    def __init__(self, version: tuple[int, int, int] | None) -> None:
        self.version = version
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(1 + 8 + 24)
            if self.version is None:
                time.sleep(5)  # busy: never answers
                return
            conn.sendall(struct.pack("<Q", 28) + bytes(self.version) + bytes(25))

    def close(self) -> None:
        self.sock.close()


def test_endpoints_are_checked() -> None:
    assert rpc.parse_endpoint("127.0.0.1:50052") == ("127.0.0.1", 50052)
    assert rpc.parse_endpoint("[::1]:7000") == ("::1", 7000)
    for bad in ("127.0.0.1", "host:", ":50052", "host:99999", "host:port"):
        with pytest.raises(ValueError, match="host:port"):
            rpc.parse_endpoint(bad)


def test_unreachable_worker_is_a_clear_error() -> None:
    port = _free_port()
    with pytest.raises(ModelLoadError, match=rf"cannot reach the RPC worker at 127.0.0.1:{port}.*localspec worker"):
        rpc.probe(f"127.0.0.1:{port}", timeout_s=2)


def test_worker_of_another_build_is_refused() -> None:
    fake = _FakeWorker((rpc.PROTO_VERSION[0] - 1, 0, 0))
    try:
        with pytest.raises(ModelLoadError, match="same llama.cpp build"):
            rpc.probe(fake.endpoint, timeout_s=2)
    finally:
        fake.close()


def test_busy_worker_times_out_with_a_reason() -> None:
    fake = _FakeWorker(None)
    try:
        with pytest.raises(ModelLoadError, match="serving another client"):
            rpc.probe(fake.endpoint, timeout_s=0.5)
    finally:
        fake.close()


def test_worker_refuses_a_network_address_without_the_flag() -> None:
    from localspec.cli import _register_all

    result = CliRunner().invoke(_register_all(), ["worker", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "--allow-network" in result.output and "authentication" in result.output


def test_rpc_flag_is_parsed_for_the_target_only() -> None:
    from localspec.cli._options import ModelFlags

    flags = ModelFlags(model="t.gguf", model_draft="d.gguf", n_gpu_layers=-1, rpc="127.0.0.1:5,10.0.0.2:6")
    target, draft = flags.specs()
    assert target.rpc == ("127.0.0.1:5", "10.0.0.2:6") and draft is not None and draft.rpc == ()
    import typer

    with pytest.raises(typer.BadParameter, match="host:port"):
        ModelFlags(model="t.gguf", rpc="10.0.0.2").specs()


def test_this_build_has_rpc() -> None:
    """`make setup` builds llama.cpp with its RPC backend (-DGGML_RPC=ON)."""
    assert rpc.rpc_supported(), "rebuild llama-cpp-python with `make setup` (LLAMA_CMAKE_ARGS gains -DGGML_RPC=ON)"


def test_gpu_offload_check_ignores_rpc() -> None:
    """An RPC build says llama_supports_gpu_offload() = true on any machine; localspec asks
    the device list instead."""
    from localspec.engine.llama.backend import gpu_offload_supported

    local_gpus = [d for d in rpc.devices() if d.kind in ("GPU", "IGPU") and not d.is_rpc]
    assert gpu_offload_supported() == bool(local_gpus)


# -- real workers, real weights ---------------------------------------------------------------
def _start_worker(port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "localspec", "worker", "--port", str(port), "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert f"127.0.0.1:{port}" in line, line
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # listening once a probe answers
        try:
            rpc.probe(f"127.0.0.1:{port}", timeout_s=2)
            return proc
        except ModelLoadError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("the worker did not start listening")


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[str, str]]:
    ports = (_free_port(), _free_port())
    procs = [_start_worker(p) for p in ports]
    yield (f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}")
    for p in procs:
        p.terminate()
        p.wait(10)


@pytest.mark.models
def test_workers_speak_this_builds_protocol(workers: tuple[str, str]) -> None:
    for endpoint in workers:
        info = rpc.probe(endpoint)
        assert info.version == rpc.PROTO_VERSION and info.devices == 1 and info.total_bytes > 0


@pytest.mark.models
def test_greedy_over_two_workers_equals_the_local_run(
    workers: tuple[str, str], qwen_target_path: Path, qwen_draft_path: Path
) -> None:
    from localspec.engine import Engine, GenerationRequest, ModelSpec

    prompt = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
    local = Engine(ModelSpec(str(qwen_target_path), n_ctx=512))
    try:
        want = list(local.generate(GenerationRequest(prompt=prompt, max_tokens=24, drafter="none")))
    finally:
        local.close()
    remote = Engine(ModelSpec(str(qwen_target_path), n_ctx=512, n_gpu_layers=-1, rpc=workers),
                    ModelSpec(str(qwen_draft_path), n_ctx=512))
    try:
        assert remote.target.numerics == "exact"
        for drafter in ("model", "ngram", "none"):
            got = list(remote.generate(GenerationRequest(prompt=prompt, max_tokens=24, drafter=drafter, gamma=3)))
            assert "".join(e.text for e in got) == "".join(e.text for e in want), drafter
        assert len("".join(e.text for e in want)) > 20
        devices = [d for d in rpc.devices() if d.is_rpc]
        assert {d.description for d in devices} == set(workers)  # the layers went to both workers
    finally:
        remote.close()


@pytest.mark.models
def test_an_unreachable_worker_fails_before_weights_load(qwen_target_path: Path) -> None:
    from localspec.engine import Engine, ModelSpec

    t0 = time.monotonic()
    with pytest.raises(ModelLoadError, match="cannot reach the RPC worker"):
        Engine(ModelSpec(str(qwen_target_path), n_gpu_layers=-1, rpc=(f"127.0.0.1:{_free_port()}",)))
    assert time.monotonic() - t0 < 10


# -- a worker that goes away while a model uses it --------------------------------------------
class _Connection:
    """A TCP server and one connection to it: the client end stands in for libggml's socket
    to a worker, the accepted end for the worker."""

    def __init__(self, clients: int = 1) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.clients = [socket.create_connection(self.server.getsockname()) for _ in range(clients)]
        self.workers = [self.server.accept()[0] for _ in range(clients)]

    def close(self) -> None:
        for s in (*self.clients, *self.workers, self.server):
            s.close()


def _wait_gone(endpoint: str) -> str | None:
    deadline = time.monotonic() + 5
    while (reason := rpc.gone(endpoint)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return reason


def test_a_worker_that_closes_its_connection_is_a_clear_error_and_the_socket_is_fenced() -> None:
    from localspec.errors import WorkerLostError

    conn = _Connection()
    watch = rpc.attach((conn.endpoint,))
    try:
        assert rpc.gone(conn.endpoint) is None
        watch.check()
        conn.workers[0].sendall(b"reply")  # data in flight is not an end
        watch.check()
        assert conn.clients[0].recv(5) == b"reply"
        conn.workers[0].close()  # the worker process ends: its kernel closes the connection
        assert _wait_gone(conn.endpoint) == "it closed the connection"
        port = conn.endpoint.rsplit(":", 1)[1]
        for _ in range(2):  # and stays lost
            with pytest.raises(WorkerLostError, match=rf"RPC worker at {conn.endpoint} is gone.*"
                               rf"`localspec worker --port {port}`.*load the model again") as info:
                watch.check()
            assert info.value.endpoint == conn.endpoint
        # what libggml still writes (FREE_BUFFER when the model is freed) goes to the stand-in
        conn.clients[0].sendall(b"\0" * (1 << 20))
        with pytest.raises(ModelLoadError, match="close the models that use it first"):
            rpc.connect((conn.endpoint,))  # no new model onto a lost worker while one holds it
    finally:
        watch.release()
        conn.close()
    with pytest.raises(KeyError):
        rpc.gone(conn.endpoint)  # released with the last model


def test_a_reset_connection_is_found_too() -> None:
    conn = _Connection()
    watch = rpc.attach((conn.endpoint,))
    try:
        conn.workers[0].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.workers[0].close()  # RST instead of FIN
        assert _wait_gone(conn.endpoint) is not None
        watch.before_free()  # what close() does: the stand-in goes in before anything is freed
        conn.clients[0].sendall(b"\0" * 64)
    finally:
        watch.release()
        conn.close()


def test_watching_leaves_the_connection_as_libggml_set_it() -> None:
    """Blocking mode untouched even under a default socket timeout (a socket object made on
    libggml's descriptor would turn it non-blocking, and libggml's calls block); TCP keepalive
    on, so that a worker machine that vanished shows up as gone."""
    conn = _Connection()
    socket.setdefaulttimeout(5.0)
    try:
        watch = rpc.attach((conn.endpoint,))
        watch.check()
        conn.workers[0].sendall(b"x")  # readable: the peek path
        watch.check()
        assert rpc.gone(conn.endpoint) is None
    finally:
        socket.setdefaulttimeout(None)
    try:
        assert conn.clients[0].getblocking()
        assert conn.clients[0].getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert conn.clients[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == rpc.KEEPALIVE[0]
    finally:
        watch.release()
        conn.close()


def test_an_ambiguous_connection_is_counted_not_watched(caplog: pytest.LogCaptureFixture) -> None:
    conn = _Connection(clients=2)
    watch = rpc.attach((conn.endpoint,))
    try:
        assert "cannot tell which of 2 connections" in caplog.text
        conn.workers[0].close()
        time.sleep(0.05)
        watch.check()  # unwatched: nothing to say (as before watching existed)
        assert rpc.gone(conn.endpoint) is None
        assert conn.endpoint in rpc._links  # counted: a load next to it skips the probe
    finally:
        watch.release()
        conn.close()


def test_a_guarded_call_comes_back_when_a_worker_fails_it() -> None:
    """The Python side of `guarded`: results and errors come back; a call whose worker failed
    it (the abort callback wakes the caller; here another thread does what it does) raises
    Stuck while the call itself stays blocked, and the next call runs on a fresh thread. Only
    a libggml thread failing with RPC_FAILURE is parked; anything else goes on to abort."""
    assert rpc.guarded(lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(ZeroDivisionError):
        rpc.guarded(lambda: 1 / 0)
    release = threading.Event()
    first_thread = rpc._calls.thread if rpc._calls else None

    def never_returns() -> None:
        guard = rpc._guarding
        assert guard is not None
        threading.Timer(0.05, guard.fail).start()  # what the callback does from the failed thread
        release.wait(30)

    with pytest.raises(rpc.Stuck):
        rpc.guarded(never_returns)
    assert rpc._guarding is None and rpc._calls is None
    assert rpc.guarded(lambda: "fresh") == "fresh"
    assert rpc._calls is not None and rpc._calls.thread is not first_thread
    release.set()
    rpc._park_if_guarded(rpc.RPC_FAILURE)  # no guarded call running: returns (the process would end)


@pytest.mark.models
@pytest.mark.parametrize("when", ["between", "during"])
def test_a_worker_killed_during_a_generation_ends_it_with_an_error_not_the_process(
    when: str, qwen_target_path: Path, qwen_draft_path: Path
) -> None:
    """Kill one of two real workers during a running generation (in a child process, so that
    a regression aborts the child, not pytest), `between` two forwards (found by the check
    before the next one) or `during` a forward of seconds (libggml's failed call is parked and
    the guarded call returns): the generation ends with WorkerLostError naming the worker, the
    next request gets the same error, the engine closes, and once the worker is back on its
    port a new load in the same process generates the same text as before."""
    import json
    import os

    ports = (_free_port(), _free_port())
    procs = [_start_worker(p) for p in ports]
    endpoints = [f"127.0.0.1:{p}" for p in ports]
    killed = endpoints[1]
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("rpc_worker_death.py")), str(qwen_target_path),
         str(qwen_draft_path), ",".join(endpoints), killed, when],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "KILL"
        if when == "during":
            time.sleep(1.0)  # inside the long prefill forward (the child reports if it was not)
        procs[1].kill()
        procs[1].wait(10)
        child.stdin.write("killed\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "CLOSED"
        procs[1] = _start_worker(ports[1])
        child.stdin.write("restarted\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=600)
    finally:
        if child.poll() is None:
            child.kill()
        for p in procs:
            p.terminate()
            p.wait(10)
    assert child.returncode == 0, f"the child ended with {child.returncode}:\n{err[-3000:]}"
    result = json.loads(out.strip().splitlines()[-1].removeprefix("RESULT "))
    assert result["watched"] == {e: True for e in endpoints}
    first, second = result["first"], result["second"]
    assert first["error"] == "WorkerLostError" and first["endpoint"] == killed, first
    assert f"RPC worker at {killed} is gone" in first["message"] and "localspec worker --port" in first["message"]
    if when == "between":
        assert result["seen_gone"] == "it closed the connection"
        assert result["text_before_kill"] and result["reference"].startswith(result["text_before_kill"])
    else:
        assert "during a forward" in first["message"], first
    assert second["error"] == "WorkerLostError" and second["endpoint"] == killed, second
    assert result["tokenize_after"] > 0
    assert result["after_restart"] == result["reference"] and len(result["reference"]) > 20


# -- the recommender counts the workers' memory ------------------------------------------------
class _MemoryWorker:
    """Answers the probe (HELLO, DEVICE_COUNT, GET_DEVICE_MEMORY) like a worker with the
    given memory, for any number of connections."""

    def __init__(self, free: int, total: int) -> None:
        self.free, self.total = free, total
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                while header := conn.recv(9, socket.MSG_WAITALL):
                    cmd, size = struct.unpack("<BQ", header)
                    if size:
                        conn.recv(size, socket.MSG_WAITALL)
                    reply = {14: bytes(rpc.PROTO_VERSION) + bytes(25), 15: struct.pack("<I", 1),
                             11: struct.pack("<QQ", self.free, self.total)}[cmd]
                    conn.sendall(struct.pack("<Q", len(reply)) + reply)

    def close(self) -> None:
        self.sock.close()


def _recommend(*args: str) -> "object":
    from localspec.cli import _register_all

    return CliRunner().invoke(_register_all(), ["recommend", *args])


def test_recommend_adds_the_workers_free_memory() -> None:
    import json

    gib = 1 << 30
    a, b = _MemoryWorker(10 * gib, 16 * gib), _MemoryWorker(14 * gib, 16 * gib)
    try:
        endpoints = f"{a.endpoint},{b.endpoint}"
        result = _recommend("--rpc", endpoints, "--ram", "8", "--vram", "0", "--task", "code", "--limit", "3")
        assert result.exit_code == 0, result.output
        assert f"target: 2 RPC workers, 24.0 GiB free + local RAM 8.0 GiB (workers: {a.endpoint} 10.0 of 16.0, " \
               f"{b.endpoint} 14.0 of 16.0)" in result.output
        assert "counted again as local RAM" in result.output  # loopback workers share this machine's memory
        assert "[rpc, -ngl" in result.output and "RPC workers (" in result.output
        out = json.loads(_recommend("--rpc", endpoints, "--ram", "8", "--vram", "0", "--task", "code",
                                    "--json").output)
        assert out["hardware"]["rpc_workers"] == [
            {"endpoint": a.endpoint, "free_bytes": 10 * gib, "total_bytes": 16 * gib},
            {"endpoint": b.endpoint, "free_bytes": 14 * gib, "total_bytes": 16 * gib}]
        recs = out["recommendations"]
        assert recs and any(r["placement"] == "rpc" for r in recs)
        assert all(r["rpc_bytes"] <= 24 * gib for r in recs)
        # the same machine without the workers: the biggest targets do not fit
        alone = json.loads(_recommend("--ram", "8", "--vram", "0", "--task", "code", "--json").output)
        assert {r["target"] for r in recs} - {r["target"] for r in alone["recommendations"]}
    finally:
        a.close()
        b.close()


def test_recommend_names_a_worker_it_cannot_reach() -> None:
    port = _free_port()
    result = _recommend("--rpc", f"127.0.0.1:{port}")
    assert result.exit_code == 2
    assert f"cannot reach the RPC worker at 127.0.0.1:{port}" in result.output
    assert _recommend("--rpc", "10.0.0.2").exit_code == 2  # host:port, as for the other commands


def test_recommend_asks_real_workers(workers: tuple[str, str]) -> None:
    """Two `localspec worker` processes (no model needed): their memory, as they report it."""
    import json

    out = json.loads(_recommend("--rpc", ",".join(workers), "--task", "code", "--json").output)
    got = out["hardware"]["rpc_workers"]
    assert [w["endpoint"] for w in got] == list(workers)
    for w in got:
        info = rpc.probe(w["endpoint"])
        assert 0 < w["free_bytes"] <= w["total_bytes"] == info.total_bytes
