"""Server overhead vs direct engine calls on long replies (run by hand; not collected by pytest).

    flock /tmp/localspec-heavy.lock .venv/bin/python tests/server/measure_overhead.py [--replies 3] [--tokens 256]

Loads the offline default pair (`default_pair_paths()`, Qwen2.5-Coder 1.5B ← 0.5B), serves it
on 127.0.0.1 with uvicorn in a thread, and for each prompt runs the same greedy request
directly (`engine.generate`) and through the server (streamed SSE via httpx, until
`data: [DONE]`), alternating which goes first. Prints wall time and tokens/s per run and the
overhead of the server path; both paths must produce the same text.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PROMPTS = [
    "Write a Python function that parses an ISO-8601 date string without using datetime, with tests.",
    "Implement a binary search tree in Python with insert, delete and in-order traversal.",
    "Write a small LRU cache class in Python with get and put, and explain the complexity.",
]


def direct(engine: object, prompt: str, tokens: int) -> tuple[float, int, str]:
    from localspec.engine import ChatMessage, GenerationRequest

    t0 = time.perf_counter()
    events = list(engine.generate(GenerationRequest(  # type: ignore[attr-defined]
        messages=(ChatMessage("user", prompt),), max_tokens=tokens, temperature=0.0)))
    wall = time.perf_counter() - t0
    return wall, sum(ev.token_id >= 0 for ev in events), "".join(ev.text for ev in events)


def served(base: str, prompt: str, tokens: int) -> tuple[float, int, str]:
    import httpx

    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    parts, n = [], 0
    t0 = time.perf_counter()
    with httpx.Client(timeout=600) as client, client.stream("POST", base + "/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"]:
                parts.append(chunk["choices"][0]["delta"].get("content") or "")
            elif chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
    wall = time.perf_counter() - t0
    return wall, n, "".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replies", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("-c", "--ctx-size", type=int, default=2048)
    args = ap.parse_args()

    from localspec.engine import Engine, ModelSpec
    from localspec.store import default_pair_paths
    from tests.server.conftest import live_server

    target, draft = default_pair_paths()
    engine = Engine(ModelSpec(str(target), n_ctx=args.ctx_size), ModelSpec(str(draft), n_ctx=args.ctx_size))
    print(f"pair: {engine.info.target} <- {engine.info.draft}, kernel {engine.info.kernel}")
    rows: list[tuple[str, int, float, int]] = []
    with live_server(engine) as srv:
        served(srv.base, "Say hi.", 4)  # warm-up (first-request costs on both paths)
        direct(engine, "Say hi.", 4)
        for i in range(args.replies):
            prompt = PROMPTS[i % len(PROMPTS)]
            order = ("direct", "server") if i % 2 == 0 else ("server", "direct")
            texts = {}
            for path in order:
                wall, n, text = direct(engine, prompt, args.tokens) if path == "direct" else served(
                    srv.base, prompt, args.tokens)
                texts[path] = text
                rows.append((path, i, wall, n))
                print(f"reply {i} {path:6s}: {n:4d} tokens in {wall:6.2f}s = {n / wall:6.2f} tok/s", flush=True)
            print(f"reply {i}: texts identical: {texts['direct'] == texts['server']}")
        srv.wait_idle()
    engine.close()
    per_tok = {p: [w / n for q, _, w, n in rows if q == p and n] for p in ("direct", "server")}
    d, s = statistics.mean(per_tok["direct"]), statistics.mean(per_tok["server"])
    print(f"direct: {1 / d:.2f} tok/s   server: {1 / s:.2f} tok/s   server overhead: {100 * (s - d) / d:+.2f} %")
    pairs = [(w / n) for q, _, w, n in rows if q == "server"], [(w / n) for q, _, w, n in rows if q == "direct"]
    print("per reply overhead %:", [round(100 * (a - b) / b, 2) for a, b in zip(*pairs)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
