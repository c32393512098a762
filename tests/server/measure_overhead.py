"""Server overhead vs direct engine calls on long replies (run by hand; not collected by pytest).

    flock /tmp/localspec-heavy.lock .venv/bin/python tests/server/measure_overhead.py [--replies 6] [--tokens 256]

Starts the real `localspec serve` on the offline default pair (a subprocess on a free loopback
port, exactly as a user runs it) and loads the same pair in this process for the direct path
(`engine.generate`). For each prompt it runs the same greedy request both ways, alternating
which goes first: directly, and through the server with the official `openai` client
streaming. Before every timed run a short unrelated request evicts the prompt from that
engine's KV cache, so both paths pay the same prefill. Per run it records the wall time (request
to last token), time to first token and the decode rate after it; it checks that both paths
produce the same text, and prints the overhead of the server path with a bootstrap 95 % CI
over the prompt pairs.

Texts: with a fixed policy (`--drafter none`, or `model` with `--gamma`) both paths are the same
computation and give the same text. The default `adaptive` policy picks draft lengths from
measured timings, so the two paths may verify different batch shapes; llama.cpp's batched and
one-token logits differ in the last bits, so a long greedy reply may then part at a near-tie
(the top-2 logits within 1e-3; tests/engine/test_lossless.py checks every such part is a near-tie).
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PROMPTS = [
    "Write a Python function that parses an ISO-8601 date string without using datetime, with tests.",
    "Implement a binary search tree in Python with insert, delete and in-order traversal.",
    "Write a small LRU cache class in Python with get and put, and explain the complexity.",
    "Explain how a hash map handles collisions, with a short C example of open addressing.",
    "Write a Bash script that backs up a directory to a dated tar.gz and keeps the last 7 copies.",
    "Describe the TCP three-way handshake and what happens when a SYN is lost.",
    "Write a JavaScript debounce function and show how to use it on a search box.",
    "Implement Dijkstra's shortest path algorithm in Python using heapq, with an example graph.",
]
EVICT = "Say hi."


@dataclass
class Run:
    path: str
    reply: int
    wall: float
    ttft: float
    t_last: float
    tokens: int
    text: str

    @property
    def decode_rate(self) -> float:
        """Tokens/s after the first token."""
        return (self.tokens - 1) / (self.t_last - self.ttft) if self.tokens > 1 else 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, ctx: int, log: Path) -> subprocess.Popen[bytes]:
    import httpx

    exe = Path(sys.executable).with_name("localspec")
    cmd = [str(exe), "serve", "--port", str(port), "-c", str(ctx)]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"`{' '.join(cmd)}` exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"the server did not come up in 300 s; see {log}")


POLICY: dict[str, object] = {}
"""Request fields that pick the drafting policy (empty = the defaults of both paths)."""


def direct(engine: object, prompt: str, tokens: int) -> tuple[float, float, float, int, str]:
    from localspec.engine import ChatMessage, GenerationRequest

    req = GenerationRequest(messages=(ChatMessage("user", prompt),), max_tokens=tokens, temperature=0.0,
                            **POLICY)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    first = last = 0.0
    n, parts = 0, []
    with engine.generate(req) as generation:  # type: ignore[attr-defined]
        for ev in generation:
            parts.append(ev.text)
            if ev.token_id >= 0:
                n += 1
                last = time.perf_counter() - t0
                first = first or last
    return time.perf_counter() - t0, first, last, n, "".join(parts)


def served(client: object, prompt: str, tokens: int) -> tuple[float, float, float, int, str]:
    t0 = time.perf_counter()
    stream = client.chat.completions.create(  # type: ignore[attr-defined]
        model="default", messages=[{"role": "user", "content": prompt}], max_tokens=tokens, temperature=0,
        stream=True, stream_options={"include_usage": True}, extra_body=POLICY or None)
    first = last = 0.0
    n, parts = 0, []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
            last = time.perf_counter() - t0
            first = first or last
        if chunk.usage is not None:
            n = chunk.usage.completion_tokens
    return time.perf_counter() - t0, first, last, n, "".join(parts)


def compare(a: str, b: str) -> str:
    """'texts identical', or where two texts part."""
    if a == b:
        return "texts identical"
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"texts part at character {n} of {len(a)}: {a[n:n + 24]!r} vs {b[n:n + 24]!r}"


def bootstrap_ci(xs: list[float], reps: int = 4000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    means = sorted(statistics.mean(rng.choices(xs, k=len(xs))) for _ in range(reps))
    return means[int(0.025 * reps)], means[int(0.975 * reps) - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replies", type=int, default=6, help="prompt pairs (each run both ways)")
    ap.add_argument("--tokens", type=int, default=256, help="max_tokens per reply")
    ap.add_argument("-c", "--ctx-size", type=int, default=2048)
    ap.add_argument("--drafter", help="drafting policy on both paths (default: the server's, adaptive)")
    ap.add_argument("--gamma", type=int, help="draft length on both paths")
    args = ap.parse_args()
    POLICY.update({k: v for k, v in (("drafter", args.drafter), ("gamma", args.gamma)) if v is not None})

    import openai

    from localspec.engine import DEFAULT_GAMMA, Engine, ModelSpec
    from localspec.store import default_pair_paths

    port = free_port()
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"localspec-overhead-server-{port}.log"
    server = start_server(port, args.ctx_size, log)
    try:
        target, draft = default_pair_paths()
        engine = Engine(ModelSpec(str(target), n_ctx=args.ctx_size), ModelSpec(str(draft), n_ctx=args.ctx_size),
                        gamma=DEFAULT_GAMMA)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=600)
        print(f"pair: {engine.info.target} <- {engine.info.draft}, kernel {engine.info.kernel}; server log {log}")
        paths = {"direct": lambda p, n: direct(engine, p, n), "server": lambda p, n: served(client, p, n)}
        for fn in paths.values():
            fn(EVICT, 4)  # warm-up: first-request costs on both paths
        runs: list[Run] = []
        for i in range(args.replies):
            prompt = PROMPTS[i % len(PROMPTS)]
            for name in (("direct", "server") if i % 2 == 0 else ("server", "direct")):
                paths[name](EVICT, 1)  # evict the prompt's KV prefix: both paths pay the prefill
                run = Run(name, i, *paths[name](prompt, args.tokens))
                runs.append(run)
                print(f"reply {i} {name:6s}: {run.tokens:4d} tokens in {run.wall:6.2f}s = "
                      f"{run.tokens / run.wall:6.2f} tok/s  (TTFT {1000 * run.ttft:6.0f} ms, "
                      f"decode {run.decode_rate:6.2f} tok/s)", flush=True)
            print(f"reply {i}: {compare(*(r.text for r in sorted(runs[-2:], key=lambda r: r.path)))}", flush=True)
        engine.close()
    finally:
        server.terminate()
        server.wait(30)
    report(runs)
    return 0


def report(runs: list[Run]) -> None:
    by = {p: sorted((r for r in runs if r.path == p), key=lambda r: r.reply) for p in ("direct", "server")}
    same = sum(d.text == s.text for d, s in zip(by["direct"], by["server"]))
    per_tok = [100 * (s.wall / s.tokens - d.wall / d.tokens) / (d.wall / d.tokens)
               for d, s in zip(by["direct"], by["server"])]
    decode = [100 * (d.decode_rate / s.decode_rate - 1) for d, s in zip(by["direct"], by["server"])]
    ttft = [1000 * (s.ttft - d.ttft) for d, s in zip(by["direct"], by["server"])]

    def rate(p: str) -> float:
        return sum(r.tokens for r in by[p]) / sum(r.wall for r in by[p])

    print(f"\n{len(per_tok)} prompt pairs ({POLICY or 'default policy'}); texts identical in {same} of {len(per_tok)}")
    print(f"direct: {rate('direct'):.2f} tok/s   server: {rate('server'):.2f} tok/s (wall, incl. prefill)")
    for name, xs, unit in (("time per token", per_tok, "%"), ("decode time per token", decode, "%"),
                           ("TTFT", ttft, "ms")):
        lo, hi = bootstrap_ci(xs)
        print(f"server overhead, {name}: mean {statistics.mean(xs):+.2f} {unit} (95 % CI {lo:+.2f} … {hi:+.2f}); "
              f"per pair {[round(x, 2) for x in xs]}")


if __name__ == "__main__":
    sys.exit(main())
