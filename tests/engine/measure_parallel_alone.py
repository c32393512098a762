"""What `--parallel 4` (the server's default) costs a client that is alone: an engine of the
offline pair built with parallel=1 and one built with parallel=4, in one process, taking the
same built-in prompts in turn (which goes first flips every prompt, so the host's drifts fall
on both alike), one request at a time. Prints each pair's tokens per second and the pooled
ratio, and how many pairs produced the same tokens (every one in exact numerics; fast
numerics' shared KV cache may part in the last bits), and each engine's steps, drafted and
accepted tokens and seconds of drafting and verifying.

    python tests/engine/measure_parallel_alone.py [exact|fast] [DRAFTER] [ROUNDS] [TOKENS] [STRIDE]

STRIDE takes every STRIDE-th built-in prompt (4: 15 prompts a round)."""
import statistics
import sys
import time

from localspec.engine.engine import Engine
from localspec.engine.metrics import SpecStats
from localspec.prompts import load_builtin
from localspec.store import default_pair_paths
from localspec.types import ChatMessage, GenerationRequest, ModelSpec

numerics = sys.argv[1] if len(sys.argv) > 1 else "exact"
drafter = sys.argv[2] if len(sys.argv) > 2 else "none"
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 64
stride = int(sys.argv[5]) if len(sys.argv) > 5 else 4

t, d = default_pair_paths()
engines = {p: Engine(ModelSpec(str(t), n_ctx=4096, numerics=numerics), ModelSpec(str(d), n_ctx=4096), parallel=p)
           for p in (1, 4)}
for e in engines.values():
    e.warm_up()
prompts = [p.turns[0] for p in load_builtin().prompts][::stride]
seconds = {1: 0.0, 4: 0.0}
"""Wall seconds of each engine's generations, as its client saw them."""
totals = {1: SpecStats(), 4: SpecStats()}
ratios: list[float] = []
same = 0
for r in range(rounds):
    for i, prompt in enumerate(prompts):
        got: dict[int, tuple[list[int], float]] = {}
        for p in ((1, 4) if (i + r) % 2 == 0 else (4, 1)):
            req = GenerationRequest(messages=(ChatMessage(role="user", content=prompt),), max_tokens=tokens,
                                    drafter=drafter)
            t0 = time.perf_counter()
            with engines[p].generate(req) as g:
                ids = [ev.token_id for ev in g if ev.token_id >= 0]
            got[p] = (ids, time.perf_counter() - t0)
            seconds[p] += got[p][1]
            totals[p].merge(g.stats)
        same += got[1][0] == got[4][0]
        rate = {p: len(ids) / s for p, (ids, s) in got.items()}
        ratios.append(rate[4] / rate[1])
        print(f"round {r + 1} prompt {i}: parallel 1 {rate[1]:.2f} tok/s, parallel 4 {rate[4]:.2f}, "
              f"4 ÷ 1 {ratios[-1]:.3f}", flush=True)
one, four = (totals[p].num_generated_tokens / seconds[p] for p in (1, 4))
print(f"{numerics} numerics, drafter {drafter}, {tokens} tokens, {len(ratios)} prompt pairs: parallel 1 "
      f"{one:.2f} tok/s, parallel 4 {four:.2f} tok/s; pooled 4 ÷ 1 {four / one:.3f}, median per prompt "
      f"{statistics.median(ratios):.3f}; same tokens {same}/{len(ratios)}")
for p, st in totals.items():
    print(f"parallel {p}: {st.num_steps} steps, {st.num_draft_tokens} tokens drafted, {st.num_accepted_tokens} "
          f"accepted; {st.t_draft_s:.1f} s drafting, {st.t_verify_s:.1f} s verifying, {seconds[p]:.1f} s in all")
