"""Sum up a step trace of `measure_batch_lockstep.py` (TRACE=FILE): per engine and client
count, the steps by their make-up — sequences verified, whether a prompt chunk rode along,
whether any sequence drafted — with the mean seconds of the target call and of the whole step,
and the tokens the step produced per second of step. It shows where one engine's time went
that the other's did not: draft-free steps costing more (the policy's own overhead), drafting
steps producing fewer tokens per second than draft-free ones of the same size (drafts at a
loss), or more steps with prompt chunks (a different batch make-up, not the policy).

    python tests/engine/trace_batch_steps.py FILE [C]
"""
import json
import statistics
import sys
from collections import defaultdict

path = sys.argv[1]
only_c = int(sys.argv[2]) if len(sys.argv) > 2 else None
groups: dict[tuple[int, str, int, bool, bool], list[dict]] = defaultdict(list)  # type: ignore[type-arg]
totals: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
with open(path) as f:
    for line in f:
        rec = json.loads(line)
        if only_c is not None and rec["C"] != only_c:
            continue
        verify = [n for n, logits in rec["parts"] if logits]
        chunk = sum(n for n, logits in rec["parts"] if not logits)
        drafted = sum(verify) > len(verify)
        groups[(rec["C"], rec["engine"], len(verify), chunk > 0, drafted)].append(rec)
        tot = totals[(rec["C"], rec["engine"])]
        tot[0] += rec["t_step"]
        tot[1] += rec["gen"]
        tot[2] += 1

print("| C | engine | sequences | prompt chunk | drafts | steps | verify rows | target call ms | step ms | tokens/step | tok/s of steps | share of time |")
print("|---:|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
for key in sorted(groups, key=lambda k: (k[0], k[2], k[3], k[1], k[4])):
    c, engine, seqs, chunk, drafted = key
    recs = groups[key]
    t_step = sum(r["t_step"] for r in recs)
    gen = sum(r["gen"] for r in recs)
    rows = statistics.fmean(sum(n for n, logits in r["parts"] if logits) for r in recs)
    print(f"| {c} | {engine} | {seqs} | {'yes' if chunk else 'no'} | {'yes' if drafted else 'no'} | {len(recs)} "
          f"| {rows:.2f} | {1e3 * statistics.fmean(r['t_decode'] for r in recs):.1f} "
          f"| {1e3 * t_step / len(recs):.1f} | {gen / len(recs):.2f} | {gen / t_step if t_step else 0:.2f} "
          f"| {t_step / totals[(c, engine)][0]:.1%} |")
print()
for (c, engine), (secs, gen, steps) in sorted(totals.items()):
    print(f"C={c} {engine}: {int(steps)} steps, {secs:.1f} s, {int(gen)} tokens, {gen / secs:.2f} tok/s")
