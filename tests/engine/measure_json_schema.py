"""JSON-schema generation on the offline Qwen pair, side by side in one run: plain vs prompt
lookup vs the model drafter vs adaptive, on the schema prompts of models/prompts/json_schema.jsonl.

    flock /tmp/localspec-heavy.lock nice -n 5 .venv/bin/python tests/engine/measure_json_schema.py \
        --max-tokens 160 --out docs/bench/json_schema

Loads the target (exact numerics) and the drafter once; for every prompt (chat template, T=0,
`response_format` = the row's schema) runs the four arms in turn and records tok/s of the
generation loop, mean acceptance length (AL, tokens per target forward), whether each output
equals plain decoding token for token and validates against its schema, and the grammar's
mask cost (computing + applying masks, per mask and per generated token). A warm-up request
first, so the first arm does not pay for building the grammar tokenizer. Writes JSON and a
markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from schema_check import errors  # noqa: E402

from localspec.engine import ChatMessage, Constraint, Engine, GenerationRequest  # noqa: E402
from localspec.store import installed_path  # noqa: E402
from localspec.types import ModelSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ARMS = (("none", 0), ("ngram", 4), ("model", 4), ("adaptive", None))


def _run(engine: Engine, row: dict[str, Any], drafter: str, gamma: int | None, max_tokens: int) -> dict[str, Any]:
    msgs = (ChatMessage("system", "Answer with JSON only."), ChatMessage("user", row["turns"][0]))
    req = GenerationRequest(messages=msgs, max_tokens=max_tokens, drafter=drafter, gamma=gamma,
                            constraint=Constraint("json_schema", json.dumps(row["schema"])))
    with engine.generate(req) as gen:
        events = list(gen)
    s = gen.stats
    text = "".join(e.text for e in events)
    valid = None
    if s.finish_reason == "stop":
        valid = errors(json.loads(text), row["schema"]) == []
    return {"tokens": [e.token_id for e in events if e.token_id >= 0], "text": text, "finish": s.finish_reason,
            "n": s.num_generated_tokens, "steps": s.num_steps, "t": s.t_generate_s, "tok_s": s.tokens_per_s,
            "al": s.mean_acceptance_length, "t_mask_s": s.t_mask_s, "num_masks": s.num_masks, "valid": valid}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--prompts", type=int, default=0, help="first N prompts (0 = all)")
    ap.add_argument("--out", default="bench-out/json_schema")
    a = ap.parse_args()
    rows = [json.loads(x) for x in (ROOT / "models/prompts/json_schema.jsonl").read_text().splitlines()]
    rows = rows[: a.prompts] if a.prompts else rows
    engine = Engine(ModelSpec(str(installed_path("qwen2.5-coder-1.5b-instruct-q4_k_m")), n_ctx=2048),
                    ModelSpec(str(installed_path("qwen2.5-coder-0.5b-instruct-q4_k_m")), n_ctx=2048))
    _run(engine, rows[0], "none", 0, 8)  # warm-up: grammar tokenizer, caches
    results: dict[str, list[dict[str, Any]]] = {d: [] for d, _ in ARMS}
    for row in rows:
        plain: list[int] | None = None
        for drafter, gamma in ARMS:
            r = _run(engine, row, drafter, gamma, a.max_tokens)
            r["id"] = row["question_id"]
            if drafter == "none":
                plain = r["tokens"]
            r["equals_plain"] = r["tokens"] == plain
            del r["tokens"]
            results[drafter].append(r)
            print(f"{row['question_id']:16s} {drafter:8s} {r['n']:4d} tok {r['tok_s']:6.2f} tok/s AL {r['al']:.2f} "
                  f"mask {1e6 * r['t_mask_s'] / max(r['num_masks'], 1):.0f} us x{r['num_masks']} "
                  f"valid={r['valid']} same={r['equals_plain']}", flush=True)
    engine.close()
    summary = {}
    for drafter, rs in results.items():
        n = sum(r["n"] for r in rs)
        t = sum(r["t"] for r in rs)
        steps = sum(r["steps"] for r in rs)
        summary[drafter] = {
            "tokens": n, "seconds": t, "tok_s": n / t, "al": n / steps,
            "mask_us_per_mask": 1e6 * sum(r["t_mask_s"] for r in rs) / max(sum(r["num_masks"] for r in rs), 1),
            "mask_ms_per_token": 1e3 * sum(r["t_mask_s"] for r in rs) / n,
            "mask_share": sum(r["t_mask_s"] for r in rs) / t,
            "valid": sum(bool(r["valid"]) for r in rs), "finished": sum(r["finish"] == "stop" for r in rs),
            "equals_plain": sum(r["equals_plain"] for r in rs), "prompts": len(rs),
            "median_tok_s": statistics.median(r["tok_s"] for r in rs),
        }
    base = summary["none"]["tok_s"]
    lines = ["| drafter | tokens | tok/s | speedup | AL | mask µs/mask | mask ms/token | mask share | valid/finished | = plain |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for d, s in summary.items():
        lines.append(f"| {d} | {s['tokens']} | {s['tok_s']:.2f} | {s['tok_s'] / base:.2f}x | {s['al']:.2f} | "
                     f"{s['mask_us_per_mask']:.0f} | {s['mask_ms_per_token']:.2f} | {100 * s['mask_share']:.1f}% | "
                     f"{s['valid']}/{s['finished']} | {s['equals_plain']}/{s['prompts']} |")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"summary": summary, "runs": results}, indent=1))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
