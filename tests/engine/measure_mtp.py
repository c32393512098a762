"""Measure, on the synthetic hybrid MTP fixture, what MTP drafting costs per step and what a
partial rollback of the hybrid target costs per step, by strategy.

    flock /tmp/localspec-heavy.lock nice -n 5 python tests/engine/measure_mtp.py [--tokenizer GGUF]

Rollback strategies of engine/llama/backend.py, each timed around a verify batch of 5 rows
of which 2 are kept:
- `native`: llama.cpp's per-token recurrent-state snapshots (`n_rs_seq`): `llama_memory_seq_rm`;
- `snapshot`: save the recurrent part of the state before the verify
  (`llama_state_seq_get_data_ext(..., PARTIAL_ONLY)`), and on a rejection restore it, drop the
  attention rows and decode the kept rows again (archs without `n_rs_seq`);
- `reevaluate`: clear the memory and decode the kept prefix again.
The numbers depend on the machine's load; run the arms side by side, under the lock.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from synthetic_mtp import read_tokenizer, write_mtp_gguf  # noqa: E402

from localspec.engine import Engine, GenerationRequest, ModelSpec  # noqa: E402
from localspec.engine.llama.backend import LlamaCppBackend  # noqa: E402
from localspec.store import installed_path  # noqa: E402

PROMPTS = ["def fibonacci(n):", "The capital of France is", "SELECT name FROM users WHERE"]


def rollback_costs(path: Path, strategy: str, n_prompt: int, steps: int = 20) -> tuple[float, float]:
    """(median verify ms, median rollback ms) over `steps` rounds of a 5-row verify batch of
    which 2 rows are kept. The verify time of `snapshot` includes saving the state."""
    kw = {"native": {}, "snapshot": {"rs_snapshots": 0}, "reevaluate": {"rs_snapshots": 0, "checkpoint": False}}
    b = LlamaCppBackend(ModelSpec(str(path), n_ctx=2048, numerics="exact"), **kw[strategy])  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    b.decode([int(t) for t in rng.integers(1000, 100000, n_prompt)])
    verify, rollback = [], []
    for _ in range(steps):
        rows = [int(t) for t in rng.integers(1000, 100000, 5)]
        n_past = b.n_past
        t0 = time.perf_counter()
        b.decode(rows, all_logits=True)
        t1 = time.perf_counter()
        b.truncate(n_past + 2)
        t2 = time.perf_counter()
        assert b.n_past == n_past + 2
        verify.append(t1 - t0)
        rollback.append(t2 - t1)
    b.close()
    return statistics.median(verify) * 1e3, statistics.median(rollback) * 1e3


def drafting_costs(path: Path, gamma: int) -> dict[str, float]:
    """Per-step costs of greedy generations with the MTP drafter, and plain decoding's."""
    engine = Engine(ModelSpec(str(path), n_ctx=2048, numerics="exact"))
    out: dict[str, float] = {}
    try:
        for drafter, g in (("none", 0), ("mtp", gamma)):
            steps = draft = ver = toks = drafted = acc = 0.0
            for text in PROMPTS:
                with engine.generate(GenerationRequest(prompt=text, max_tokens=64, drafter=drafter, gamma=g)) as gen:
                    for _ in gen:
                        pass
                s = gen.stats
                steps += s.num_steps
                draft += s.t_draft_s
                ver += s.t_verify_s
                toks += s.num_generated_tokens
                drafted += s.num_draft_tokens
                acc += s.num_accepted_tokens
            out[f"{drafter}: draft ms/step"] = draft / steps * 1e3
            out[f"{drafter}: verify ms/step"] = ver / steps * 1e3
            out[f"{drafter}: tokens/step"] = toks / steps
            if drafted:
                out[f"{drafter}: acceptance rate"] = acc / drafted
    finally:
        engine.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", type=Path, help="GGUF to copy the tokenizer from (default: the offline Qwen drafter)")
    ap.add_argument("--gamma", type=int, default=4)
    args = ap.parse_args()
    tok = read_tokenizer(args.tokenizer or installed_path("qwen2.5-coder-0.5b-instruct-q4_k_m"))
    with tempfile.TemporaryDirectory() as d:
        path = write_mtp_gguf(Path(d) / "mtp.gguf", tok, seed=18)
        for k, v in drafting_costs(path, args.gamma).items():
            print(f"{k:32s} {v:8.3f}")
        for n_prompt in (64, 512, 1536):
            for strategy in ("native", "snapshot", "reevaluate"):
                v, r = rollback_costs(path, strategy, n_prompt)
                print(f"context {n_prompt:5d} {strategy:10s} verify(5) {v:7.2f} ms  rollback {r:7.2f} ms/step")


if __name__ == "__main__":
    main()
