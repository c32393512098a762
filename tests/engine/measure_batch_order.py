"""Batch parts in sequence order (what BatchRunner sends) against the order slots were taken (what
it sent before b8e5831), side by side in one process: the offline pair at parallel 4, eight
clients of two requests each, drafter none, rounds alternating which goes first.

    python tests/engine/measure_batch_order.py [exact|fast]

The old order is restored by hiding `sorted` in engine/batch.py for the unsorted rounds
(a measurement hack, not an option of the runner)."""
import sys, time, threading
from localspec.engine import batch as batch_mod
from localspec.engine.engine import Engine
from localspec.types import ModelSpec, GenerationRequest, ChatMessage
from localspec.store import default_pair_paths
numerics = sys.argv[1] if len(sys.argv) > 1 else "exact"
t, d = default_pair_paths()
eng = Engine(ModelSpec(str(t), n_ctx=4096, numerics=numerics), ModelSpec(str(d), n_ctx=4096), parallel=4)
eng.warm_up()
prompts = ["Write a Python function that checks whether a string is a palindrome.",
           "Explain the difference between a list and a tuple in Python.",
           "Write a SQL query that returns the ten most recent orders per customer.",
           "Summarize the plot of Hamlet in three sentences.",
           "Write a bash one-liner that counts lines in all .py files.",
           "What is the capital of Australia, and why is it not Sydney?",
           "Write a haiku about compilers.",
           "Explain what a mutex is to a beginner."]
lens = [64, 40, 56, 24, 64, 32, 48, 16]
def client(items, drafter, out):
    for p, n in items:
        req = GenerationRequest(messages=(ChatMessage(role="user", content=p),), max_tokens=n, drafter=drafter)
        with eng.generate(req) as g:
            out.append(sum(1 for _ in g))
def run(drafter):
    out = []
    items = list(zip(prompts, lens)) * 2
    ths = [threading.Thread(target=client, args=(items[i::8], drafter, out)) for i in range(8)]
    t0 = time.perf_counter()
    for th in ths: th.start()
    for th in ths: th.join()
    return time.perf_counter() - t0, sum(out)
res = {"sorted": [], "unsorted": []}
for rep in range(3):
    for mode in (["sorted", "unsorted"] if rep % 2 == 0 else ["unsorted", "sorted"]):
        if mode == "sorted":
            batch_mod.__dict__.pop("sorted", None)
        else:
            batch_mod.sorted = lambda it, key=None: list(it)
        w, n = run("none")
        res[mode].append(n / w)
        print(f"{rep} {mode:8s} {w:6.2f}s {n} tokens {n/w:.2f} tok/s", flush=True)
import statistics
print("ratio sorted/unsorted (median tok/s):", statistics.median(res["sorted"]) / statistics.median(res["unsorted"]))
eng.close()
