"""Measure the EAGLE-3, DFlash and DSpark drafters against the SmolLM2 target, side by side in
one process: drafting steps per second, and the draft-cost ratio c (seconds one drafting
step costs per drafted token for chain drafting, per block for block drafting, over the
seconds of one target forward of one token, as the plain arm measures it). The drafters are
the synthetic, randomly weighted test fixtures: their acceptance means nothing, their cost
is the real cost of the graph on this CPU.

    flock /tmp/localspec-heavy.lock nice -n 5 .venv/bin/python tests/engine/measure_hidden.py [--gamma 4] [-n 64] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from hidden_fixtures import write_hidden_drafter  # noqa: E402

from localspec.engine import ChatMessage, Engine, GenerationRequest, ModelSpec  # noqa: E402
from localspec.store import installed_path  # noqa: E402

PROMPTS = ("Write a Python class for a stack.", "Tell me about the moon.", "List five fruits and their colours.")


def _steps(engine: Engine, drafter: str, gamma: int, n: int, prompt: str) -> tuple[float, float, int, int, int]:
    """(draft seconds per step, verify seconds per step, steps, drafted, accepted) of one generation."""
    req = GenerationRequest(messages=(ChatMessage("user", prompt),), max_tokens=n, drafter=drafter, gamma=gamma)
    with engine.generate(req) as gen:
        for _ in gen:
            pass
    s = gen.stats
    return s.t_draft_s / s.num_steps, s.t_verify_s / s.num_steps, s.num_steps, s.num_draft_tokens, s.num_accepted_tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("-n", type=int, default=64, help="tokens per prompt")
    ap.add_argument("--rounds", type=int, default=2, help="plain and drafter arms alternate this many times")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    target = installed_path("smollm2-135m-instruct-q4_1")
    spec = ModelSpec(str(target), n_ctx=1024, n_threads=args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("eagle3", "dflash", "dspark"):
            path = write_hidden_drafter(Path(tmp) / f"{kind}.gguf", kind, target, seed=7)
            engine = Engine(spec, ModelSpec(str(path), n_ctx=1024, n_threads=args.threads))
            t1s: list[float] = []
            steps: list[float] = []
            drafted = accepted = 0
            try:
                _steps(engine, "none", 0, 8, PROMPTS[0])  # warm-up: graphs reserved, threads started
                _steps(engine, kind, args.gamma, 8, PROMPTS[0])
                for _ in range(args.rounds):
                    for q in PROMPTS:  # plain and drafter side by side, prompt by prompt
                        t1s.append(_steps(engine, "none", 0, args.n, q)[1])
                        d, _, _, dr, ac = _steps(engine, kind, args.gamma, args.n, q)
                        steps.append(d)
                        drafted, accepted = drafted + dr, accepted + ac
                numerics = engine.info.numerics
            finally:
                engine.close()
            t1, step = statistics.median(t1s), statistics.median(steps)
            per = step / args.gamma if kind == "eagle3" else step
            rows.append((kind, 1.0 / step, step * 1e3, t1 * 1e3, per / t1, drafted, accepted, numerics))
    print(f"target SmolLM2-135M Q4_1, gamma={args.gamma}, {args.n} tokens x {len(PROMPTS)} prompts x {args.rounds} "
          "rounds; medians over generations")
    print("| drafter | drafting steps/s | ms per drafting step | target ms per token | c | drafted | accepted | numerics |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, sps, ms, t1ms, c, dr, ac, num in rows:
        print(f"| {kind} | {sps:.1f} | {ms:.2f} | {t1ms:.2f} | {c:.3f} | {dr} | {ac} | {num} |")
    print("c: eagle3 per drafted token (one chained call each), dflash/dspark per block (one call).")


if __name__ == "__main__":
    main()
