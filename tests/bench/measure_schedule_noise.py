"""How much timing noise each bench schedule leaves: an A/A comparison (two arms doing plain
decoding's exact work) measured one after another (`run_bench`) and in lockstep
(`run_lockstep`), rounds alternating which schedule goes first, on the offline target.

    python tests/bench/measure_schedule_noise.py [PROMPTS_PER_CATEGORY] [ROUNDS] [TOKENS]

The second arm is prompt lookup with γ = 0 (it never drafts: plain decoding's work plus the
n-gram drafter's bookkeeping). For every pair of samples (same prompt, turn, round) it prints
the spread of log(tok/s ratio) per schedule — the noise a per-prompt comparison of two arms
carries — and the pooled ratio, which should be ~1.00 in both."""
import math
import statistics
import sys
import time

from localspec.bench.lockstep import run_lockstep
from localspec.bench.runner import BenchConfig, run_bench
from localspec.engine.engine import Engine
from localspec.prompts import load_builtin, select
from localspec.store import default_pair_paths
from localspec.types import ModelSpec

per_cat = int(sys.argv[1]) if len(sys.argv) > 1 else 1
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 64
target, _ = default_pair_paths()
spec = ModelSpec(str(target), n_ctx=4096)
engines = {"plain": Engine(spec, None), "ngram@0": Engine(spec, None)}
prompts = select(load_builtin().prompts, None, per_cat)
config = BenchConfig(gammas=(0,), drafters=("ngram",), max_tokens=tokens, warmup_tokens=8)
ratios: dict[str, list[float]] = {"sequential": [], "lockstep": []}
pooled = {sch: {arm: [0.0, 0] for arm in engines} for sch in ratios}  # seconds, tokens
for r in range(rounds):
    order = ["sequential", "lockstep"] if r % 2 == 0 else ["lockstep", "sequential"]
    for schedule in order:
        t0 = time.perf_counter()
        if schedule == "lockstep":
            run = run_lockstep(engines, prompts, config)
        else:
            run = run_bench(engines["plain"], prompts, config)
        by: dict[tuple[str, int], dict[str, float]] = {}
        for s in run.samples:
            st = s.stats
            by.setdefault((s.question_id, s.turn), {})[s.arm] = st["num_generated_tokens"] / st["t_generate_s"]
            pooled[schedule][s.arm][0] += st["t_generate_s"]
            pooled[schedule][s.arm][1] += st["num_generated_tokens"]
        for pair in by.values():
            ratios[schedule].append(math.log(pair["ngram@0"] / pair["plain"]))
        print(f"round {r + 1} {schedule}: {len(by)} pairs in {time.perf_counter() - t0:.0f} s", flush=True)
for schedule, xs in ratios.items():
    sd = statistics.stdev(xs)
    (ta, na), (tb, nb) = pooled[schedule]["ngram@0"], pooled[schedule]["plain"]
    print(f"{schedule:>10}: {len(xs)} pairs, sd of log ratio {sd:.3f} (≈ ±{100 * sd:.1f} % per pair), "
          f"median ratio {math.exp(statistics.median(xs)):.3f}, extremes {math.exp(min(xs)):.2f}/{math.exp(max(xs)):.2f}, "
          f"pooled tok/s ngram@0 ÷ plain {(na / ta) / (nb / tb):.3f}")
