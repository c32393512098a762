"""Measure what each numerics mode keeps and costs, in one run on the offline Qwen pair.

    .venv/bin/python tests/engine/measure_numerics.py --prompts 12 --max-tokens 96 --out bench-out/numerics

For `exact` and `fast` in turn: load the target (and drafter) in that mode, then for every
prompt (first turn of the built-in set, one per category, T=0) compare against an
independent plain greedy loop (tests/engine/lossless_tools.plain_greedy): the model drafter
(γ=4, drafter always in fast numerics), prompt lookup (γ=4) and adaptive through the engine; count identical outputs; explain
every divergence by replaying its verify batch both ways (batch shape vs one row); time plain
decoding (through the engine, drafter none) and the model drafter. Writes JSON and a
markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lossless_tools import RecordingBackend, explain, first_divergence, plain_greedy  # noqa: E402

from localspec.engine import ChatMessage, Engine, GenerationRequest  # noqa: E402
from localspec.engine.llama.backend import LlamaCppBackend  # noqa: E402
from localspec.prompts import load_builtin  # noqa: E402
from localspec.store import installed_path  # noqa: E402
from localspec.types import ModelSpec  # noqa: E402

ARMS = (("model", 4), ("ngram", 4), ("adaptive", 4))


def _prompts(n: int) -> list[str]:
    rows = load_builtin().prompts
    by_cat: dict[str, list[str]] = {}
    for r in rows:
        by_cat.setdefault(r.category, []).append(r.turns[0])
    out: list[str] = []
    depth = 0
    while len(out) < n:
        added = False
        for cat in sorted(by_cat):
            if depth < len(by_cat[cat]) and len(out) < n:
                out.append(by_cat[cat][depth])
                added = True
        if not added:
            break
        depth += 1
    return out


def _generate(engine: Engine, request: GenerationRequest) -> tuple[list[int], Any]:
    with engine.generate(request) as gen:
        tokens = [e.token_id for e in gen if e.token_id >= 0]
    return tokens, gen.stats


def run_mode(mode: str, prompts: list[str], max_tokens: int, n_ctx: int,
             arms: tuple[tuple[str, int], ...] = ARMS) -> dict[str, Any]:
    """All prompts and arms in one numerics mode."""
    t_spec = ModelSpec(str(installed_path("qwen2.5-coder-1.5b-instruct-q4_k_m")), n_ctx=n_ctx, numerics=mode)
    # the drafter's numerics never change the output, only its speed: always fast
    d_spec = ModelSpec(str(installed_path("qwen2.5-coder-0.5b-instruct-q4_k_m")), n_ctx=n_ctx, numerics="fast")
    target = LlamaCppBackend(t_spec)
    recorder = RecordingBackend(target)
    engine = Engine(recorder, LlamaCppBackend(d_spec))  # type: ignore[arg-type]
    result: dict[str, Any] = {"mode": mode, "prompts": [], "arms": {}}
    arm_stats: dict[str, dict[str, float]] = {a: {"identical": 0, "tokens": 0, "seconds": 0.0, "steps": 0}
                                              for a, _ in (("plain", 0), *arms)}
    for pi, question in enumerate(prompts):
        messages = (ChatMessage("user", question),)
        prompt = engine.tokenize(engine.render_chat(messages))
        t0 = time.perf_counter()
        ref = plain_greedy(target, prompt, max_tokens)
        t_ref = time.perf_counter() - t0
        row: dict[str, Any] = {"prompt": pi, "plain_loop_tokens": len(ref), "plain_loop_s": t_ref, "arms": {}}
        for arm, gamma in (("plain", 0), *arms):
            recorder.start()
            drafter = "none" if arm == "plain" else arm
            tokens, stats = _generate(engine, GenerationRequest(messages=messages, max_tokens=max_tokens,
                                                                drafter=drafter, gamma=gamma))
            same = tokens == ref
            entry: dict[str, Any] = {
                "identical": same, "tokens": len(tokens), "tok_s": stats.tokens_per_s,
                "al": stats.mean_acceptance_length, "numerics": stats.numerics,
            }
            a = arm_stats[arm]
            a["identical"] += int(same)
            a["tokens"] += stats.num_generated_tokens
            a["seconds"] += stats.t_generate_s
            a["steps"] += stats.num_steps
            if not same:
                i = first_divergence(ref, tokens)
                entry["diverges_at"] = i
                if i is not None and i < min(len(ref), len(tokens)):
                    d = explain(recorder, prompt, ref, tokens)
                    entry["divergence"] = {
                        "batch_rows": d.batch_rows, "row": d.row, "argmax_in_batch": d.argmax_in_batch,
                        "argmax_one_row": d.argmax_one_row, "spec_token": d.spec_token,
                        "argmax_all_rows_alone": d.argmax_all_rows_alone, "flips_locally": d.flips_locally,
                        "argmax_plain_shapes": d.argmax_plain_shapes, "level": d.level,
                        "plain_token": d.plain_token, "margin": d.margin, "explained": d.explained,
                    }
            row["arms"][arm] = entry
            print(f"[{mode}] p{pi} {arm:<8} identical={same} tok/s={stats.tokens_per_s:.1f}"
                  + (f" diverges at {entry.get('diverges_at')} {entry.get('divergence', '')}" if not same else ""),
                  flush=True)
        result["prompts"].append(row)
    for arm, a in arm_stats.items():
        result["arms"][arm] = {**a, "tok_s": a["tokens"] / a["seconds"] if a["seconds"] else 0.0,
                               "al": a["tokens"] / a["steps"] if a["steps"] else 0.0}
    engine.close()
    return result


def run_timing(prompts: list[str], max_tokens: int, n_ctx: int, rounds: int) -> dict[str, Any]:
    """Both modes loaded at once and run alternately (same prompt, arm and round back to
    back), so the machine's noise falls on both alike: tok/s per (mode, arm)."""
    draft = str(installed_path("qwen2.5-coder-0.5b-instruct-q4_k_m"))
    target = str(installed_path("qwen2.5-coder-1.5b-instruct-q4_k_m"))
    engines = {m: Engine(ModelSpec(target, n_ctx=n_ctx, numerics=m), ModelSpec(draft, n_ctx=n_ctx))
               for m in ("exact", "fast")}
    sums: dict[str, dict[str, list[float]]] = {m: {} for m in engines}
    for _ in range(rounds):
        for question in prompts:
            messages = (ChatMessage("user", question),)
            for arm, gamma in (("none", 0), ("model", 4), ("ngram", 4)):
                for mode, engine in engines.items():
                    _, st = _generate(engine, GenerationRequest(messages=messages, max_tokens=max_tokens,
                                                                drafter=arm, gamma=gamma))
                    acc = sums[mode].setdefault(arm, [0.0, 0.0])
                    acc[0] += st.num_generated_tokens
                    acc[1] += st.t_generate_s
    for e in engines.values():
        e.close()
    out = {m: {arm: a[0] / a[1] for arm, a in arms.items()} for m, arms in sums.items()}
    print(json.dumps(out, indent=1))
    return out


def _markdown(results: list[dict[str, Any]], n_prompts: int) -> str:
    lines = ["| mode | arm | identical to plain loop | explained divergences | tok/s | AL |", "|---|---|---:|---:|---:|---:|"]
    for r in results:
        for arm, a in r["arms"].items():
            divs = [p["arms"][arm].get("divergence") for p in r["prompts"] if not p["arms"][arm]["identical"]]
            expl = sum(1 for d in divs if d and d["explained"])
            lines.append(f"| {r['mode']} | {arm} | {int(a['identical'])}/{n_prompts} | {expl}/{len(divs)} | "
                         f"{a['tok_s']:.2f} | {a['al']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--modes", default="exact,fast")
    ap.add_argument("--arms", default="model,ngram,adaptive", help="drafters to compare (γ=4 each)")
    ap.add_argument("--out", type=Path, default=Path("bench-out/numerics"))
    ap.add_argument("--timing", type=int, default=0, metavar="ROUNDS",
                    help="only time plain / model / n-gram in both modes, alternating, ROUNDS times")
    args = ap.parse_args()
    prompts = _prompts(args.prompts)
    if args.timing:
        args.out.mkdir(parents=True, exist_ok=True)
        timing = run_timing(prompts, args.max_tokens, args.ctx, args.timing)
        (args.out / "timing.json").write_text(json.dumps(timing, indent=1))
        return
    arms = tuple((a, 4) for a in args.arms.split(","))
    results = [run_mode(m, prompts, args.max_tokens, args.ctx, arms) for m in args.modes.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "numerics.json").write_text(json.dumps(results, indent=1))
    md = _markdown(results, len(prompts))
    (args.out / "numerics.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
