"""Load benchmark: the real server under concurrent clients (`localspec bench load`).

For each server configuration (`--parallel` P × drafting policy D) it starts `localspec
serve` as a child process on a free loopback port, waits for /health, and for each
concurrency C runs C clients of the official `openai` SDK, each sending its share of the
requests back to back (chat completions, T = 0 unless told, a fixed `max_tokens`, prompts from
the built-in set, each client its own). Measured per (P, D, C): aggregate completion tokens
per second over the level's wall time, per-request latency (median, p90) and mean time to
first token (streamed), and the server's own `speculative` summary (mean γ, mean batch).

Side by side: every configuration's server is started first (all held in memory at once),
then each concurrency level runs on every server in turn, the order rotating from level to
level and repeat to repeat, so the machine's drift (another process, thermal state) falls on
all of them alike; a server measured minutes after another on a shared 2-core machine can
differ by 10 % for nothing. `--repeat R` runs every level R times (each repeat its own
prompts, the same for every server) and pools them. `sequential=True` (when the servers do
not fit in memory together) runs one configuration after another instead. The report gives
every level's ratio to the one-at-a-time server without speculation (`P=1, none`), and with
R > 1, each speculating server's ratio to the same `--parallel` without speculation round by
round (the JSON keeps each level's `rounds_tok_s`): a gap that flips sign between rounds is
the machine's noise, not the policy's.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from localspec.prompts import load_builtin

STARTUP_TIMEOUT_S = 600.0


@dataclass
class LevelResult:
    """One (parallel, drafter, concurrency) measurement."""

    parallel: int
    drafter: str
    concurrency: int
    requests: int
    completion_tokens: int
    wall_s: float
    latencies_s: list[float] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list)
    mean_gamma: float = 0.0
    mean_batch: float = 0.0
    mean_al: float = 0.0
    rounds_tok_s: list[float] = field(default_factory=list)
    """Aggregate tok/s of each repeat, in order (pooling keeps them)."""

    def __post_init__(self) -> None:
        if not self.rounds_tok_s:
            self.rounds_tok_s = [round(self.tokens_per_s, 3)]

    def add(self, other: LevelResult) -> None:
        """Pool another repeat of the same level into this one."""
        n0, n1 = self.requests, other.requests
        w = n0 + n1 or 1
        self.mean_gamma = (self.mean_gamma * n0 + other.mean_gamma * n1) / w
        self.mean_batch = (self.mean_batch * n0 + other.mean_batch * n1) / w
        self.mean_al = (self.mean_al * n0 + other.mean_al * n1) / w
        self.requests += n1
        self.completion_tokens += other.completion_tokens
        self.wall_s += other.wall_s
        self.latencies_s += other.latencies_s
        self.ttft_s += other.ttft_s
        self.rounds_tok_s += other.rounds_tok_s

    @property
    def tokens_per_s(self) -> float:
        """Aggregate completion tokens per second of the level."""
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """JSON-ready record with the derived numbers."""
        d = asdict(self)
        lat = sorted(self.latencies_s)
        d.update(tokens_per_s=round(self.tokens_per_s, 3),
                 latency_p50_s=round(statistics.median(lat), 3) if lat else None,
                 latency_p90_s=round(lat[min(len(lat) - 1, int(0.9 * len(lat)))], 3) if lat else None,
                 ttft_mean_s=round(statistics.fmean(self.ttft_s), 3) if self.ttft_s else None)
        return d


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 (loopback URL we built)
            return bool(r.status == 200)
    except OSError:
        return False


class ServerProcess:
    """`localspec serve` in a child process on a free loopback port."""

    def __init__(self, serve_args: Sequence[str], parallel: int, drafter: str, log_path: str | None = None) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "localspec", "serve", *serve_args, "--port", str(self.port),
               "--parallel", str(parallel), "--drafter", drafter, "--max-queue", "64"]
        self._log = open(log_path or os.devnull, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=self._log)

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Until /health answers; raises RuntimeError if the server exits or times out."""
        t_end = time.monotonic() + timeout_s
        while time.monotonic() < t_end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with code {self.proc.returncode} before it was ready")
            if _healthy(f"{self.base_url}/health"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the server was not ready within {timeout_s:.0f} s")

    def stop(self) -> None:
        """Terminate (then kill) the child."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


async def _client(client: Any, model: str, prompts: list[str], max_tokens: int, temperature: float,
                  out: list[tuple[float, float | None, int, dict[str, Any]]]) -> None:
    for prompt in prompts:
        t0 = time.perf_counter()
        ttft: float | None = None
        tokens = 0
        spec: dict[str, Any] = {}
        stream = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
            temperature=temperature, stream=True, stream_options={"include_usage": True})
        async for chunk in stream:
            if ttft is None and chunk.choices and chunk.choices[0].delta.content:
                ttft = time.perf_counter() - t0
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
            extra = getattr(chunk, "speculative", None) or (chunk.model_extra or {}).get("speculative")
            if extra:
                spec = extra
        out.append((time.perf_counter() - t0, ttft, tokens, spec))


async def run_level(base_url: str, concurrency: int, prompts: list[str], per_client: int, max_tokens: int,
                    temperature: float, offset: int = 0) -> tuple[float, list[tuple[float, float | None, int, dict[str, Any]]]]:
    """C clients, each sending `per_client` requests back to back, from prompt `offset` on;
    (wall seconds, results)."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="none", max_retries=0, timeout=3600)
    out: list[tuple[float, float | None, int, dict[str, Any]]] = []
    shares = [[prompts[(offset + c * per_client + i) % len(prompts)] for i in range(per_client)]
              for c in range(concurrency)]
    t0 = time.perf_counter()
    try:
        await asyncio.gather(*(_client(client, "local", s, max_tokens, temperature, out) for s in shares))
    finally:
        await client.close()
    return time.perf_counter() - t0, out


def _level(server: ServerProcess, key: tuple[int, str], c: int, prompts: list[str], per_client: int,
           max_tokens: int, temperature: float, offset: int) -> LevelResult:
    wall, out = asyncio.run(run_level(server.base_url, c, prompts, per_client, max_tokens, temperature, offset))
    specs = [s for *_, s in out if s]

    def mean(name: str) -> float:
        return statistics.fmean(float(s.get(name, 0.0)) for s in specs) if specs else 0.0

    return LevelResult(key[0], key[1], c, len(out), sum(n for _, _, n, _ in out), wall,
                       [lat for lat, *_ in out], [t for _, t, _, _ in out if t is not None],
                       mean("mean_gamma"), mean("mean_batch_size"), mean("mean_acceptance_length"))


def schedule(keys: Sequence[tuple[int, str]], concurrencies: Sequence[int], repeats: int,
             sequential: bool = False) -> list[tuple[int, int, tuple[int, str]]]:
    """(repeat, concurrency, server) in the order they run. Side by side, each (repeat, C)
    runs every server, the first one rotating so that no server is always first (or last)."""
    if sequential:
        return [(r, c, k) for k in keys for r in range(repeats) for c in concurrencies]
    plan = []
    for r in range(repeats):
        for i, c in enumerate(concurrencies):
            shift = (r * len(concurrencies) + i) % len(keys)
            plan += [(r, c, k) for k in [*keys[shift:], *keys[:shift]]]
    return plan


def bench_load(serve_args: Sequence[str], parallels: Sequence[int], drafters: Sequence[str],
               concurrencies: Sequence[int], *, max_tokens: int = 64, per_client: int = 2, temperature: float = 0.0,
               warmup: int = 1, repeats: int = 1, sequential: bool = False, log_path: str | None = None,
               progress: Callable[[str], None] = lambda _: None) -> list[LevelResult]:
    """Every (parallel, drafter) server at every concurrency; see the module docstring."""
    prompts = [p.turns[0] for p in load_builtin().prompts]
    keys = [(p, d) for p in parallels for d in drafters]
    pooled: dict[tuple[int, str, int], LevelResult] = {}
    servers: dict[tuple[int, str], ServerProcess] = {}
    plan = schedule(keys, concurrencies, repeats, sequential)
    try:
        for step, (r, c, key) in enumerate(plan):
            if key not in servers:
                progress(f"starting the server: --parallel {key[0]} --drafter {key[1]}")
                server = servers[key] = ServerProcess(serve_args, key[0], key[1], log_path)
                server.wait_ready()
                if warmup:  # load-time effects (first decode, kernel choice) stay out of the numbers
                    asyncio.run(run_level(server.base_url, 1, prompts[-1:], warmup, 16, temperature))
            res = _level(servers[key], key, c, prompts, per_client, max_tokens, temperature,
                         offset=r * max(concurrencies) * per_client)
            progress(f"repeat {r + 1} P={key[0]} {key[1]:<8} C={c}: {res.tokens_per_s:7.2f} tok/s "
                     f"({res.completion_tokens} tokens in {res.wall_s:.1f} s), mean batch {res.mean_batch:.2f}, "
                     f"mean γ {res.mean_gamma:.2f}")
            if (*key, c) in pooled:
                pooled[(*key, c)].add(res)
            else:
                pooled[(*key, c)] = res
            if sequential and all(k != key for _, _, k in plan[step + 1 :]):
                servers.pop(key).stop()  # one configuration in memory at a time
    finally:
        for server in servers.values():
            server.stop()
    return [pooled[(*k, c)] for k in keys for c in concurrencies if (*k, c) in pooled]


def table(results: Sequence[LevelResult]) -> str:
    """Markdown: one row per (P, D), one column pair per concurrency (tok/s and × the
    P=1/none server at that concurrency)."""
    conc = sorted({r.concurrency for r in results})
    base = {r.concurrency: r.tokens_per_s for r in results if r.parallel == 1 and r.drafter == "none"}
    head = "| server | " + " | ".join(f"C={c} tok/s | × | p50 s" for c in conc) + " |"
    sep = "|---|" + "---:|---:|---:|" * len(conc)
    lines = [head, sep]
    for key in dict.fromkeys((r.parallel, r.drafter) for r in results):
        cells = []
        for c in conc:
            r = next((x for x in results if (x.parallel, x.drafter, x.concurrency) == (*key, c)), None)
            if r is None:
                cells += ["", "", ""]
                continue
            ratio = f"{r.tokens_per_s / base[c]:.2f}×" if base.get(c) else ""
            s = r.summary()
            cells += [f"{r.tokens_per_s:.2f}", ratio, f"{s['latency_p50_s']}"]
        lines.append(f"| --parallel {key[0]} {key[1]} | " + " | ".join(cells) + " |")
    rounds = per_round(results)
    if rounds:
        lines += ["", "Per round, each server ÷ the same `--parallel` with speculation off (round-to-round "
                  "spread shows how much of a gap is the machine's noise):", "",
                  "| server | " + " | ".join(f"C={c}" for c in conc) + " |", "|---|" + "---:|" * len(conc)]
        for key, by_c in rounds.items():
            cells = [" · ".join(f"{x:.2f}" for x in by_c.get(c, [])) for c in conc]
            lines.append(f"| --parallel {key[0]} {key[1]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_round(results: Sequence[LevelResult]) -> dict[tuple[int, str], dict[int, list[float]]]:
    """(parallel, drafter) -> concurrency -> its tok/s ÷ the (parallel, none) server's, round by
    round, for every speculating server measured over more than one round."""
    off = {(r.parallel, r.concurrency): r.rounds_tok_s for r in results if r.drafter == "none"}
    out: dict[tuple[int, str], dict[int, list[float]]] = {}
    for r in results:
        base = off.get((r.parallel, r.concurrency))
        if r.drafter == "none" or not base or len(r.rounds_tok_s) < 2 or len(base) != len(r.rounds_tok_s):
            continue
        out.setdefault((r.parallel, r.drafter), {})[r.concurrency] = [
            x / b if b > 0 else 0.0 for x, b in zip(r.rounds_tok_s, base, strict=True)]
    return out


def to_json(results: Sequence[LevelResult], meta: dict[str, Any]) -> str:
    """The run as JSON (meta: command, machine)."""
    return json.dumps({"meta": meta, "levels": [r.summary() for r in results]}, indent=1)
