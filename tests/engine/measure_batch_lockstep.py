"""Speculation on and off under concurrency, in lockstep: two `--parallel P` engines of the
offline pair in one process (requests with drafter "none" on one, "adaptive" on the other),
each fed by C client threads with the same built-in prompts, their batch drivers taking turns
step by step (a FIFO turnstile around `BatchRunner._step`), so the host's speed drifts fall
on both alike. Each engine's throughput is its completion tokens over the seconds of its own
steps (prefill chunks, drafting, verify, acceptance: everything a step does).

    python tests/engine/measure_batch_lockstep.py [exact|fast] [ROUNDS] [P] [C,C,...] [TOKENS]

With TRACE=FILE in the environment every step is also written to FILE as a JSON line: the
engine, round, C, the rows of each part of its target call (prompt chunk or verify rows), the
target call's seconds and the whole step's (`tests/engine/trace_batch_steps.py` sums them up).

Admission is settled too: before a step an engine admits nothing until every client of the
level that has not finished has its request queued (a client whose request ended in the last
step queues its next one first), and the queue is taken in prompt order. Without that, which
sequences share a step depended on how the client threads raced into each engine's queue, and
the two engines' batch make-up differed by chance (run 13: prompt-chunk steps 10.4 s against
8.9 s at the same level). The waits fall outside the engines' steps and are not counted.

The turnstile waits before a step, never inside one, so the engine's own timings (and the
adaptive policy's cost estimates) hold no other engine's time. A measurement harness, not the
server: HTTP and the clients' own work are left out (they are the same for both engines); the
real server under the `openai` client is `localspec bench load`."""
import json
import os
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from localspec.engine import batch as batch_mod
from localspec.engine.engine import Engine
from localspec.prompts import load_builtin
from localspec.store import default_pair_paths
from localspec.types import ChatMessage, GenerationRequest, ModelSpec

numerics = sys.argv[1] if len(sys.argv) > 1 else "exact"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
parallel = int(sys.argv[3]) if len(sys.argv) > 3 else 4
levels = [int(c) for c in (sys.argv[4] if len(sys.argv) > 4 else "1,2,4,8").split(",")]
tokens = int(sys.argv[5]) if len(sys.argv) > 5 else 64
PER_CLIENT = 2


class Turnstile:
    """One holder at a time, FIFO among those waiting: engines with work alternate step by step."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.queue: deque[object] = deque()
        self.holder: object | None = None

    @contextmanager
    def turn(self, who: object) -> Iterator[None]:
        with self.cond:
            self.queue.append(who)
            while self.holder is not None or self.queue[0] is not who:
                self.cond.wait()
            self.queue.popleft()
            self.holder = who
        try:
            yield
        finally:
            with self.cond:
                self.holder = None
                self.cond.notify_all()


turnstile = Turnstile()
own_s: dict[int, float] = {}
_step = batch_mod.BatchRunner._step
trace = open(os.environ["TRACE"], "w") if os.environ.get("TRACE") else None
where = {"round": 0, "C": 0}
names_of: dict[int, str] = {}


def gated_step(self: batch_mod.BatchRunner, jobs: list) -> None:  # type: ignore[type-arg]
    with turnstile.turn(self):
        calls: list[tuple[list[tuple[int, bool]], float]] = []
        decode_many = self.target.decode_many
        if trace is not None:
            def timed(parts):  # type: ignore[no-untyped-def]
                t = time.perf_counter()
                try:
                    return decode_many(parts)
                finally:
                    calls.append(([(len(p[1]), p[2]) for p in parts], time.perf_counter() - t))
            self.target.decode_many = timed  # type: ignore[method-assign]
        gen0 = sum(j.stats.num_generated_tokens for j in jobs)
        acc0 = sum(j.stats.num_accepted_tokens for j in jobs)
        t0 = time.perf_counter()
        try:
            _step(self, jobs)
        finally:
            dt = time.perf_counter() - t0
            own_s[id(self)] = own_s.get(id(self), 0.0) + dt
            if trace is not None:
                del self.target.decode_many
                gen = sum(j.stats.num_generated_tokens for j in jobs) - gen0
                acc = sum(j.stats.num_accepted_tokens for j in jobs) - acc0
                for parts, t_call in calls:
                    trace.write(json.dumps({"engine": names_of.get(id(self), "?"), **where, "parts": parts,
                                            "t_decode": t_call, "t_step": dt, "gen": gen, "acc": acc}) + "\n")


clients_left: dict[int, int] = {}
"""Per runner (id): the clients of the level that have not finished all their requests."""
_admit = batch_mod.BatchRunner._admit


def settled_admit(self: batch_mod.BatchRunner) -> None:
    """Wait (the runner's condition held, so clients can queue) until every unfinished client
    has a request in, then admit in prompt order."""
    deadline = time.monotonic() + 30.0  # a safety net: a client that died must not hang the run
    while len(self._active) + len(self._waiting) < clients_left.get(id(self), 0) and time.monotonic() < deadline:
        self._cond.wait(0.5)
    self._waiting = deque(sorted(self._waiting, key=lambda j: j.request.prompt_tokens))
    _admit(self)


batch_mod.BatchRunner._step = gated_step  # type: ignore[method-assign]
batch_mod.BatchRunner._admit = settled_admit  # type: ignore[method-assign]

t, d = default_pair_paths()
engines = {name: Engine(ModelSpec(str(t), n_ctx=4096, numerics=numerics), ModelSpec(str(d), n_ctx=4096),
                        parallel=parallel) for name in ("none", "adaptive")}
for e in engines.values():
    e.warm_up()
names_of.update({id(e._runner): name for name, e in engines.items()})
prompts = [p.turns[0] for p in load_builtin().prompts]


def client(engine: Engine, drafter: str, items: list[str], out: list[tuple[int, float]]) -> None:
    try:
        for p in items:
            req = GenerationRequest(messages=(ChatMessage(role="user", content=p),), max_tokens=tokens,
                                    drafter=drafter)
            with engine.generate(req) as g:
                n = sum(1 for ev in g if ev.token_id >= 0)
            st = g.stats
            out.append((n, st.mean_gamma))
    finally:
        runner = engine._runner
        with runner._cond:
            clients_left[id(runner)] -= 1
            runner._cond.notify_all()


results: dict[tuple[str, int], list[float]] = {}
gammas: dict[tuple[str, int], list[float]] = {}
offset = 0
for r in range(rounds):
    for c in levels:
        shares = [[prompts[(offset + k * PER_CLIENT + i) % len(prompts)] for i in range(PER_CLIENT)] for k in range(c)]
        offset += c * PER_CLIENT
        where.update({"round": r + 1, "C": c})
        outs: dict[str, list[tuple[int, float]]] = {name: [] for name in engines}
        before = {name: own_s.get(id(e._runner), 0.0) for name, e in engines.items()}
        names = list(engines) if r % 2 == 0 else list(engines)[::-1]  # who queues first alternates
        for e in engines.values():
            with e._runner._cond:
                clients_left[id(e._runner)] = c
        threads = [threading.Thread(target=client, args=(engines[name], name, s, outs[name]))
                   for s in shares for name in names]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
        line = []
        for name, e in engines.items():
            secs = own_s.get(id(e._runner), 0.0) - before[name]
            n = sum(x for x, _ in outs[name])
            results.setdefault((name, c), []).append(n / secs)
            gammas.setdefault((name, c), []).extend(g for _, g in outs[name])
            line.append(f"{name} {n / secs:6.2f} tok/s ({n} tokens, {secs:5.1f} s of steps)")
        ratio = results[("adaptive", c)][-1] / results[("none", c)][-1]
        print(f"round {r + 1} C={c}: " + ", ".join(line) + f"; adaptive ÷ none {ratio:.3f} ({wall:.0f} s)", flush=True)

print(f"\n{numerics} numerics, --parallel {parallel}, {tokens} tokens, {PER_CLIENT} requests per client, {rounds} rounds")
print("| C | none tok/s | adaptive tok/s | adaptive ÷ none, per round | pooled (mean of rounds) | adaptive mean γ |")
print("|---:|---:|---:|---|---:|---:|")
for c in levels:
    a, n = results[("adaptive", c)], results[("none", c)]
    per = [x / y for x, y in zip(a, n, strict=True)]
    print(f"| {c} | {statistics.fmean(n):.2f} | {statistics.fmean(a):.2f} | {' · '.join(f'{x:.3f}' for x in per)} "
          f"| {statistics.fmean(per):.3f} | {statistics.fmean(gammas[('adaptive', c)]):.2f} |")
for e in engines.values():
    e.close()
