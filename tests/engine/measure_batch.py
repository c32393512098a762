"""What a multi-sequence verify call costs: `decode_many` over 1-4 sequences of the offline target,
equal and unequal rows per sequence, consecutive and non-consecutive ids, the same four
sequences in and out of order (median of 8 calls).

    python tests/engine/measure_batch.py [exact|fast]
"""
import time, sys
import numpy as np
from localspec.engine.llama.backend import LlamaCppBackend
from localspec.types import ModelSpec
from localspec.store import default_pair_paths
t, d = default_pair_paths()
numerics = sys.argv[1] if len(sys.argv) > 1 else "exact"
m = LlamaCppBackend(ModelSpec(str(t), n_ctx=1024, numerics=numerics), n_seq=4)
views = [m.sequence(i) for i in range(4)]
prompt = list(range(1000, 1100))
for v in views:
    v.decode(prompt)
def timeit(fn, n=8):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return sorted(ts)[n // 2]
def one(rows, seqs):
    def f():
        parts = [(views[s], [5] * rows, True) for s in seqs]
        m.decode_many(parts)
        for s in seqs:
            views[s].truncate(100)
    return f
base = timeit(one(1, [0]))
print(f"{numerics}: 1 seq x 1 row: {base*1e3:.1f} ms")
for rows, seqs in [(1, [0, 1]), (1, [0, 1, 2, 3]), (1, [1, 0, 2, 3]), (1, [3, 2, 1, 0]), (1, [2, 0, 3, 1]),
                   (1, [0, 2]), (2, [0]), (4, [0]), (5, [0]), (5, [0, 1, 2, 3]), (3, [0, 1])]:
    t_ = timeit(one(rows, seqs))
    print(f"{len(seqs)} seqs {seqs} x {rows} rows: {t_*1e3:.1f} ms = {t_/base:.2f}x one row")
# uneven: [5,1,1,1]
def uneven():
    m.decode_many([(views[0], [5]*5, True), (views[1], [5], True), (views[2], [5], True), (views[3], [5], True)])
    for s in range(4): views[s].truncate(100)
t_ = timeit(uneven); print(f"uneven 5,1,1,1: {t_*1e3:.1f} ms = {t_/base:.2f}x")
m.close()
