"""Replay the adaptive policy's prompt-lookup choices on recorded target token streams.

    # 1. record what the target alone writes (real weights, plain decoding), once:
    .venv/bin/python tests/engine/replay_policy.py record --prompts builtin \
        --prompts models/prompts/humaneval.jsonl --temp 0,0.8 -n 64 --out bench-out/streams.json
    # 2. replay the policy on them, at a measured verify-cost curve, in seconds:
    .venv/bin/python tests/engine/replay_policy.py replay bench-out/streams.json --b 2.03,2.51,3.10,3.74

Why this is exact. A prompt-lookup draft carries no q, so the verify accepts its i-th token
with the probability that the target emits it there, and on a rejection the target's token is
drawn from the rest of its distribution: accepting "while the draft equals the next token the
target wrote alone" has the same distribution, at T = 0 (where it is the same event) and
when sampling. The tokens each step commits are the recorded stream's, so a replayed
generation writes what the real one would have written; only the clock is simulated: a verify
of k+1 rows costs t1·b(k) (b measured on the machine, e.g. by `localspec bench`'s theory
column), times log-normal noise the policy sees as it would on a shared host.

The real `AdaptivePolicy` and `PromptLookupDrafter` choose, through the calls the step loop
makes; one policy state per sampling mode is kept across generations in the order of
`localspec bench` (round-robin over categories), as in one engine. A run is judged on real
text with no timing noise in the result: per category, plain decoding's time ÷ the policy's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.engine.adaptive import AdaptivePolicy, PolicyState
from localspec.engine.drafters.ngram import PromptLookupDrafter
from localspec.types import SamplingParams

MAX_GAMMA = 8


@dataclass(frozen=True)
class Stream:
    """One recorded generation: the prompt's tokens and what the target wrote alone."""

    category: str
    question_id: str
    turn: int
    temperature: float
    prompt: tuple[int, ...]
    output: tuple[int, ...]


@dataclass
class Replayed:
    tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    seconds: float = 0.0
    plain_seconds: float = 0.0
    expected: float = 0.0
    """Tokens the policy expected of the steps it drafted on ..."""
    got: int = 0
    """... and the tokens they committed."""


Policy = Callable[[PromptLookupDrafter, int, SamplingParams, PolicyState], AdaptivePolicy]


def replay_one(stream: Stream, state: PolicyState, b: Sequence[float], *, gamma: int = 4, t1: float = 0.04,
               overhead: float = 0.0004, noise: float = 0.05, rng: np.random.Generator | None = None,
               fixed: int | None = None) -> Replayed:
    """Play one generation; `fixed`: draft min(fixed, match) tokens whenever prompt lookup
    matches (the fixed `ngram@γ` arm) instead of asking the policy."""
    rng = rng if rng is not None else np.random.default_rng(0)
    params = SamplingParams(temperature=stream.temperature)
    lookup = PromptLookupDrafter()
    policy = AdaptivePolicy([lookup], gamma, params, state)
    context = list(stream.prompt)
    lookup.begin(context)
    policy.bind(context)
    out, pos, r = stream.output, 0, Replayed()

    def verify_s(k: int) -> float:
        return t1 * (1.0 if k == 0 else b[min(k, len(b)) - 1] + max(0, k - len(b)) * (b[-1] - b[-2]))

    while pos < len(out):
        k_cap = min(MAX_GAMMA, len(out) - pos - 1)
        if fixed is None:
            drafter, k = policy.choose(k_cap)
            drafts = drafter.propose(context, k, params, rng).tokens if k > 0 else ()
        else:
            drafts = lookup.propose(context, min(fixed, k_cap), params, rng).tokens if k_cap > 0 else ()
        acc = next((i for i, (d, t) in enumerate(zip(drafts, out[pos:])) if d != t), len(drafts))
        acc = min(acc, len(out) - pos - 1)
        context.extend(out[pos : pos + acc + 1])
        pos += acc + 1
        seconds = verify_s(len(drafts))
        seen = seconds * math.exp(noise * rng.standard_normal())
        lookup.observe(context)
        if fixed is None:
            policy.observe(lookup.name if drafts else "none", len(drafts), acc, 0.0, seen)
            policy.observe_overhead(overhead * math.exp(noise * rng.standard_normal()))
        if fixed is None and drafts:
            r.expected += policy.expected_tokens
            r.got += acc + 1
        r.steps += 1
        r.drafted += len(drafts)
        r.accepted += acc
        r.seconds += seconds + overhead
    r.tokens = len(out)
    r.plain_seconds = len(out) * (verify_s(0) + overhead)
    return r


def bench_order(streams: Sequence[Stream]) -> list[Stream]:
    """`localspec bench`'s order: prompts round-robin over categories, for each prompt every
    temperature, each prompt's turns in order."""
    by_prompt: dict[str, list[Stream]] = defaultdict(list)
    for s in streams:
        by_prompt[s.question_id].append(s)
    first = list(dict.fromkeys(s.question_id for s in streams))
    rank: dict[str, int] = {}
    keyed = []
    cats = list(dict.fromkeys(s.category for s in streams))
    for i, q in enumerate(first):
        c = by_prompt[q][0].category
        keyed.append((rank.get(c, 0), cats.index(c), i, q))
        rank[c] = rank.get(c, 0) + 1
    out: list[Stream] = []
    for *_, q in sorted(keyed):
        out += sorted(by_prompt[q], key=lambda s: (s.temperature, s.turn))
    return out


def replay(streams: Sequence[Stream], b: Sequence[float], *, seed: int = 0, fixed: int | None = None,
           **kw: float) -> dict[tuple[float, str], Replayed]:
    """Replay every stream in bench order (one policy state per sampling mode, kept across
    generations); totals per (temperature, category)."""
    rng = np.random.default_rng(seed)
    states = {True: PolicyState(), False: PolicyState()}
    totals: dict[tuple[float, str], Replayed] = defaultdict(Replayed)
    for s in bench_order(streams):
        r = replay_one(s, states[s.temperature == 0], b, rng=rng, fixed=fixed, **kw)  # type: ignore[arg-type]
        t = totals[(s.temperature, s.category)]
        for f in ("tokens", "steps", "drafted", "accepted", "expected", "got"):
            setattr(t, f, getattr(t, f) + getattr(r, f))
        t.seconds += r.seconds
        t.plain_seconds += r.plain_seconds
    return totals


def load_streams(path: Path) -> list[Stream]:
    return [Stream(d["category"], d["question_id"], d["turn"], d["temperature"], tuple(d["prompt"]),
                   tuple(d["output"])) for d in json.loads(path.read_text())["streams"]]


def record(args: argparse.Namespace) -> int:
    from localspec.bench.runner import turn_seed
    from localspec.engine import ChatMessage, Engine, GenerationRequest
    from localspec.prompts import load_prompt_sources, select
    from localspec.store import default_pair_paths
    from localspec.types import ModelSpec

    prompts = select(load_prompt_sources(args.prompts or ["builtin"]).prompts, per_category=args.per_category)
    target, _ = default_pair_paths()
    engine = Engine(ModelSpec(str(target)))
    streams = []
    try:
        for i, p in enumerate(prompts):
            for temp in (float(t) for t in args.temp.split(",")):
                history: list[ChatMessage] = []
                for turn, user in enumerate(p.turns):
                    history.append(ChatMessage("user", user))
                    prompt = engine.tokenize(engine.render_chat(tuple(history)))
                    seed = turn_seed(0, p.question_id, turn, temp)  # the bench's seed of this turn
                    req = GenerationRequest(messages=tuple(history), max_tokens=args.max_tokens, temperature=temp,
                                            seed=seed, drafter="none")
                    ids, parts = [], []
                    with engine.generate(req) as gen:
                        for ev in gen:
                            parts.append(ev.text)
                            if ev.token_id >= 0:
                                ids.append(ev.token_id)
                    if gen.stats.num_prompt_tokens != len(prompt):
                        raise SystemExit(f"{p.question_id}: prompt tokens {len(prompt)} != the engine's "
                                         f"{gen.stats.num_prompt_tokens}")
                    history.append(ChatMessage("assistant", "".join(parts)))
                    streams.append({"category": p.category, "question_id": p.question_id, "turn": turn,
                                    "temperature": temp, "prompt": prompt, "output": ids})
            print(f"{i + 1}/{len(prompts)} {p.question_id}", file=sys.stderr, flush=True)
    finally:
        engine.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"max_tokens": args.max_tokens, "streams": streams}))
    return 0


def report(args: argparse.Namespace) -> int:
    streams = load_streams(args.streams)
    if args.per_category is not None:
        keep: dict[str, list[str]] = defaultdict(list)
        for s in streams:
            if s.question_id not in keep[s.category]:
                keep[s.category].append(s.question_id)
        wanted = {q for c in keep.values() for q in c[: args.per_category]}
        streams = [s for s in streams if s.question_id in wanted]
    b = [float(x) for x in args.b.split(",")]
    arms: dict[str, list[dict[tuple[float, str], Replayed]]] = {}
    for g in (int(x) for x in args.fixed.split(",") if x):
        arms[f"ngram@{g}"] = [replay(streams, b, seed=0, fixed=g)]
    arms["adaptive"] = [replay(streams, b, seed=s) for s in range(args.seeds)]
    keys = sorted(arms["adaptive"][0])
    print(f"b = {b}; {len(streams)} streams; adaptive over {args.seeds} noise seeds (min / mean)")
    print("| T | category | " + " | ".join(arms) + " | adaptive AL | its drafting steps: expected / got tokens |")
    print("|---|---|" + "---:|" * (len(arms) + 2))
    worst = math.inf
    for temp in sorted({k[0] for k in keys}):
        for key in [k for k in keys if k[0] == temp] + [(temp, "ALL")]:
            cells = []
            for name, runs in arms.items():
                ratios = []
                for tot in runs:
                    sel = [v for k, v in tot.items() if k == key or (key[1] == "ALL" and k[0] == temp)]
                    ratios.append(sum(v.plain_seconds for v in sel) / sum(v.seconds for v in sel))
                cells.append(f"{min(ratios):.3f} / {np.mean(ratios):.3f}" if len(ratios) > 1 else f"{ratios[0]:.3f}")
                if name == "adaptive" and key[1] != "ALL":
                    worst = min(worst, min(ratios))
            sel = [v for k, v in arms["adaptive"][0].items() if k == key or (key[1] == "ALL" and k[0] == temp)]
            al = sum(v.tokens for v in sel) / sum(v.steps for v in sel)
            exp, got = sum(v.expected for v in sel), sum(v.got for v in sel)
            print(f"| {temp:g} | {key[1]} | " + " | ".join(cells) + f" | {al:.2f} | {exp:.1f} / {got} |")
    print(f"worst adaptive category: {worst:.3f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="record plain-decoding token streams on the offline target")
    rec.add_argument("--prompts", action="append", default=None)
    rec.add_argument("--per-category", type=int, default=None)
    rec.add_argument("--temp", default="0,0.8")
    rec.add_argument("-n", "--max-tokens", type=int, default=64)
    rec.add_argument("--out", type=Path, required=True)
    rep = sub.add_parser("replay", help="replay the policy on recorded streams")
    rep.add_argument("streams", type=Path)
    rep.add_argument("--b", default="2.03,2.51,3.10,3.74", help="verify cost of 2, 3, ... rows ÷ one row")
    rep.add_argument("--fixed", default="2,4", help="fixed ngram@γ arms to compare")
    rep.add_argument("--seeds", type=int, default=5)
    rep.add_argument("--per-category", type=int, default=None)
    args = ap.parse_args(argv)
    return record(args) if args.cmd == "record" else report(args)


if __name__ == "__main__":
    raise SystemExit(main())
