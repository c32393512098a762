"""Measure what watching the RPC workers costs, and how wide the window it cannot cover is.

    python tests/engine/measure_rpc_watch.py [--tokens 64] [--kill-runs 4]

1. The check before every forward (`LlamaCppBackend.check_workers`: one poll(2) of libggml's
   sockets) and the guarded call's thread handoff (`LlamaCppBackend.native`): median
   microseconds on a target loaded over two loopback workers, next to the median one-row
   target forward.
2. Where a death lands: the share of a running generation's wall time (prefill included)
   spent inside the target's `decode` calls, per arm (a death there is a failed call, parked;
   elsewhere the check finds it). Not `t_decode_target_s`, which times llama_decode alone.
3. With --kill-runs N: N child processes each start a greedy generation and have a worker
   killed at a random moment while it runs; reports how each ended (WorkerLostError with the
   process alive, or an abort with localspec's message).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from localspec.engine import Engine, GenerationRequest, ModelSpec
from localspec.engine.llama import rpc
from localspec.errors import ModelLoadError, WorkerLostError
from localspec.store import default_pair_paths

PROMPT = "def merge_sort(xs):\n    \"\"\"Sort a list with merge sort.\"\"\"\n"
ARMS = [("none", 0), ("model", 3)]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_worker() -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "localspec", "worker", "--port", str(port), "--threads", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    endpoint = f"127.0.0.1:{port}"
    for _ in range(150):
        try:
            rpc.probe(endpoint, timeout_s=2)
            return proc, endpoint
        except ModelLoadError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("worker did not start")


def _engine(endpoints: tuple[str, ...]) -> Engine:
    target, draft = default_pair_paths()
    return Engine(ModelSpec(str(target), n_ctx=1024, n_gpu_layers=-1, rpc=endpoints), ModelSpec(str(draft), n_ctx=1024))


def check_cost(engine: Engine) -> tuple[float, float, float]:
    """(median µs of one check, of one guarded call's thread handoff, median ms of a one-row
    forward)."""
    t = engine.target
    runs = []
    for _ in range(7):
        n = 100_000
        t0 = time.perf_counter()
        for _ in range(n):
            t.check_workers()  # type: ignore[attr-defined]
        runs.append((time.perf_counter() - t0) / n * 1e6)
    handoff = []
    for _ in range(7):
        n = 2_000
        t0 = time.perf_counter()
        for _ in range(n):
            t.native(int, 0)  # type: ignore[attr-defined]
        handoff.append((time.perf_counter() - t0) / n * 1e6)
    t.truncate(0)
    t.decode(list(range(1000, 1064)))
    fwd = []
    for _ in range(16):
        n_past = t.n_past
        t0 = time.perf_counter()
        t.decode([2000])
        fwd.append((time.perf_counter() - t0) * 1e3)
        t.truncate(n_past)
    t.truncate(0)
    return statistics.median(runs), statistics.median(handoff), statistics.median(fwd)


def window(engine: Engine, tokens: int) -> dict[str, float]:
    """Share of each arm's generation wall time inside the target's forwards: the whole
    `decode` call (llama_decode returns before an RPC graph is done; reading the logits waits)."""
    target = engine.target
    inner = target.decode
    spent = [0.0]

    def timed(*a, **k):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            spent[0] += time.perf_counter() - t0

    target.decode = timed  # type: ignore[method-assign]
    out = {}
    try:
        for drafter, gamma in ARMS:
            spent[0] = 0.0
            t0 = time.perf_counter()
            with engine.generate(GenerationRequest(prompt=PROMPT, max_tokens=tokens, drafter=drafter, gamma=gamma)) as gen:
                for _ in gen:
                    pass
            out[f"{drafter}@{gamma}" if gamma else "plain"] = spent[0] / (time.perf_counter() - t0)
    finally:
        del target.decode  # type: ignore[method-assign]
    return out


def child(endpoints: str) -> None:
    """Generate until killed from outside; print how it ended."""
    engine = _engine(tuple(endpoints.split(",")))
    print("READY", flush=True)
    try:
        while True:
            for _ in engine.generate(GenerationRequest(prompt=PROMPT, max_tokens=64, drafter="model", gamma=3)):
                pass
    except WorkerLostError as exc:
        where = "during a forward" if "during a forward" in str(exc) else "between forwards"
        engine.close()
        print(f"ENDED WorkerLostError {where}", flush=True)


def kill_runs(n: int) -> list[str]:
    outcomes = []
    for _ in range(n):
        procs, endpoints = zip(*(start_worker() for _ in range(2)))
        proc = subprocess.Popen([sys.executable, __file__, "--child", ",".join(endpoints)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        time.sleep(random.uniform(1.0, 3.0))  # inside a running generation
        procs[1].kill()
        try:
            out, err = proc.communicate(timeout=120)
            outcomes.append(_outcome(proc.returncode, out, err))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            outcomes.append("hung (killed after 120 s)")
        for p in procs:
            p.kill()
            p.wait()
    return outcomes


def _outcome(rc: int, out: str, err: str) -> str:
    if "ENDED WorkerLostError" in out and rc == 0:
        where = out.split("ENDED WorkerLostError", 1)[1].strip().splitlines()[0]
        return f"WorkerLostError {where}; the engine closed, the process lived and exited 0"
    if rc < 0 and "stopped answering during a call" in err:
        return f"aborted (signal {-rc}) with localspec's message"
    return f"other: rc {rc}, {err[-300:]!r}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--kill-runs", type=int, default=0)
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    procs, endpoints = zip(*(start_worker() for _ in range(2)))
    try:
        engine = _engine(tuple(endpoints))
        try:
            us, hand_us, ms = check_cost(engine)
            print(f"check before a forward: {us:.2f} µs (median of 7×100k, 2 workers); one-row target forward "
                  f"{ms:.1f} ms: {us / (ms * 1e3):.4%} of it")
            print(f"guarded call (thread handoff, one per llama_decode on an RPC model): {hand_us:.1f} µs "
                  f"(median of 7×2k): {hand_us / (ms * 1e3):.3%} of a one-row forward")
            for arm, share in window(engine, args.tokens).items():
                print(f"{arm}: {share:.0%} of the generation's wall time inside target forwards")
        finally:
            engine.close()
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    if args.kill_runs:
        outcomes = kill_runs(args.kill_runs)
        for i, o in enumerate(outcomes, 1):
            print(f"kill run {i}: {o}")


if __name__ == "__main__":
    main()
