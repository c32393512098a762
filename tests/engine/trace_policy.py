"""Trace the adaptive policy's per-step choices on real weights (the offline Qwen pair).

    .venv/bin/python tests/engine/trace_policy.py --prompts models/prompts/humaneval.jsonl \
        --n 3 --max-tokens 64 --out bench-out/trace.log

Runs `adaptive` on the first N prompts (first turn, chat template) at each temperature, with
the policy's DEBUG log on (one line per step: trial/best, drafter, k, expected tokens,
predicted seconds, the best choice's rate, the n-gram match length, the exploration credit),
then prints per generation the drafters used, AL and tok/s, and at the end the verify cost
ratios b(n) and drafter costs the policy measured.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from localspec.engine import ChatMessage, Engine, GenerationRequest
from localspec.prompts import load_prompt_sources
from localspec.store import default_pair_paths
from localspec.types import ModelSpec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", action="append", default=None, help="prompt set (repeatable; default builtin)")
    ap.add_argument("--n", type=int, default=3, help="prompts to run")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temp", default="0", help="temperatures, comma-separated")
    ap.add_argument("--gamma", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None, help="also write the step log here")
    args = ap.parse_args()

    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(args.out, mode="w"))
    logging.basicConfig(level=logging.WARNING, format="%(message)s", handlers=handlers)
    logging.getLogger("localspec.engine.adaptive").setLevel(logging.DEBUG)
    log = logging.getLogger("trace")
    log.setLevel(logging.INFO)

    prompts = load_prompt_sources(args.prompts or ["builtin"]).prompts[: args.n]
    target, draft = default_pair_paths()
    engine = Engine(ModelSpec(str(target)), ModelSpec(str(draft)))
    try:
        for temp in (float(t) for t in args.temp.split(",")):
            for p in prompts:
                log.info("== %s T=%g", p.question_id, temp)
                req = GenerationRequest(messages=(ChatMessage("user", p.turns[0]),), max_tokens=args.max_tokens,
                                        temperature=temp, seed=0, drafter="adaptive", gamma=args.gamma)
                with engine.generate(req) as gen:
                    for _ in gen:
                        pass
                s = gen.stats
                log.info("   %s: drafters %s, gammas %s, AL %.2f, %.1f tok/s", p.question_id, s.drafter_counts,
                         dict(sorted(s.gamma_counts.items())), s.mean_acceptance_length, s.tokens_per_s)
        for greedy, state in engine._policy_states.items():
            v = state.verify
            log.info("costs (%s): t1 %.1f ms, b(n rows) %s, drafter 1 token %.1f ms, 8 tokens %.1f ms, credit %.1f ms",
                     "greedy" if greedy else "sampled", v.t1 * 1e3,
                     {n: round(v.ratio(n), 2) for n in range(2, args.gamma + 2)},
                     state.draft_cost("model").predict(1) * 1e3, state.draft_cost("model").predict(8) * 1e3, state.credit * 1e3)
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
