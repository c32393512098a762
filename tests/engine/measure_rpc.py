"""Measure what RPC workers cost: the offline Qwen target local vs its layers on loopback
`localspec worker` processes (the drafter local), side by side in one run.

    python tests/engine/measure_rpc.py [--workers 2] [--worker-threads 1] [--tokens 64] [--out FILE]

Reports the latency of one target forward (1 row and γ+1 rows) local and over RPC, and
tok/s and AL of plain decoding, the model drafter and prompt lookup at γ = 2, 4 on two
prompts, each arm local and over RPC. On one machine the workers share its cores with the
client, so the RPC numbers include that contention besides the protocol's round trips.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

from localspec.engine import Engine, GenerationRequest, ModelSpec
from localspec.engine.llama import rpc
from localspec.errors import ModelLoadError
from localspec.store import default_pair_paths

PROMPTS = [
    "def merge_sort(xs):\n    \"\"\"Sort a list with merge sort.\"\"\"\n",
    "Summarize: The quick brown fox jumps over the lazy dog. The dog sleeps. The fox runs away quickly.\nSummary:",
]
ARMS = [("none", 0), ("ngram", 2), ("ngram", 4), ("model", 2), ("model", 4)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_worker(threads: int) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "localspec", "worker", "--port", str(port), "--threads", str(threads)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    endpoint = f"127.0.0.1:{port}"
    for _ in range(150):
        try:
            rpc.probe(endpoint, timeout_s=2)
            return proc, endpoint
        except ModelLoadError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("worker did not start")


def forward_ms(engine: Engine, rows: int, reps: int = 16) -> float:
    """Median milliseconds of a target forward of `rows` rows after a 64-token context."""
    t = engine.target
    t.truncate(0)
    t.decode(list(range(1000, 1064)))
    times = []
    for _ in range(reps):
        n = t.n_past
        t0 = time.perf_counter()
        t.decode(list(range(2000, 2000 + rows)), all_logits=True)
        times.append((time.perf_counter() - t0) * 1e3)
        t.truncate(n)
    t.truncate(0)
    return sorted(times)[len(times) // 2]


def run_arms(engine: Engine, tokens: int) -> dict[str, tuple[float, float]]:
    out = {}
    for drafter, gamma in ARMS:
        n_tok, secs, steps = 0, 0.0, 0
        for p in PROMPTS:
            with engine.generate(GenerationRequest(prompt=p, max_tokens=tokens, drafter=drafter, gamma=gamma)) as gen:
                for _ in gen:
                    pass
            s = gen.stats
            n_tok += s.num_generated_tokens
            secs += s.t_generate_s
            steps += s.num_steps
        out[f"{drafter}@{gamma}" if gamma else "plain"] = (n_tok / secs, n_tok / max(1, steps))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--worker-threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    target, draft = default_pair_paths()
    results: dict[str, dict[str, tuple[float, float]]] = {}
    latency: dict[str, dict[int, float]] = {}
    local = Engine(ModelSpec(str(target), n_ctx=1024), ModelSpec(str(draft), n_ctx=1024))
    try:
        latency["local"] = {r: forward_ms(local, r) for r in (1, 3, 5)}
        results["local"] = run_arms(local, args.tokens)
    finally:
        local.close()
    workers = [start_worker(threads=args.worker_threads) for _ in range(args.workers)]
    try:
        remote = Engine(ModelSpec(str(target), n_ctx=1024, n_gpu_layers=-1, rpc=tuple(e for _, e in workers)),
                        ModelSpec(str(draft), n_ctx=1024))
        try:
            latency["rpc"] = {r: forward_ms(remote, r) for r in (1, 3, 5)}
            results["rpc"] = run_arms(remote, args.tokens)
        finally:
            remote.close()
    finally:
        for proc, _ in workers:
            proc.terminate()
    lines = [
        f"Qwen2.5-Coder 1.5B target (0.5B drafter local), {args.tokens} tokens × {len(PROMPTS)} prompts, "
        f"{args.workers} loopback worker(s) with {args.worker_threads} thread(s) each; local target with "
        "all physical cores.",
        "",
        "| target forward (median ms) | 1 row | 3 rows | 5 rows |",
        "|---|---:|---:|---:|",
    ]
    for where in ("local", "rpc"):
        lines.append(f"| {where} | " + " | ".join(f"{latency[where][r]:.1f}" for r in (1, 3, 5)) + " |")
    lines += ["", "| arm | local tok/s | local AL | RPC tok/s | RPC AL | RPC ÷ local |", "|---|---:|---:|---:|---:|---:|"]
    for arm in results["local"]:
        (lt, la), (rt, ra) = results["local"][arm], results["rpc"][arm]
        lines.append(f"| {arm} | {lt:.2f} | {la:.2f} | {rt:.2f} | {ra:.2f} | {rt / lt:.2f}× |")
    for where in ("local", "rpc"):
        best = max(results[where], key=lambda a: results[where][a][0])
        lines.append(f"\nbest arm {where}: {best} ({results[where][best][0] / results[where]['plain'][0]:.2f}× plain)")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
