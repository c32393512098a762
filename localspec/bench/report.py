"""Turn a BenchRun into the JSON report, terminal tables (rich) and markdown."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from localspec.bench.runner import BenchRun
from localspec.bench.summary import ALL, summarize

SCHEMA = "localspec.bench/1"


def build_report(run: BenchRun, environment: dict[str, Any], command: object = None) -> dict[str, Any]:
    """The JSON document: config, environment, every raw sample, the summary."""
    complete = run.complete_samples()
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "interrupted": run.interrupted,
        "t_wall_s": run.t_wall_s,
        "config": run.config.to_dict(),
        "environment": environment,
        "prompts": [
            {"question_id": p.question_id, "category": p.category, "num_turns": len(p.turns), "source": p.source}
            for p in run.prompts
        ],
        "num_samples": len(run.samples),
        "num_complete_samples": len(complete),
        "samples": [s.to_dict() for s in run.samples],
        "summary": summarize(complete, run.config),
    }


def samples_from_json(report: dict[str, Any]) -> BenchRun:
    """Rebuild a BenchRun from a written report (to re-summarise or re-plot it)."""
    from localspec.bench.runner import BenchConfig, Sample
    from localspec.prompts import BenchPrompt

    c = report["config"]
    config = BenchConfig(
        gammas=tuple(c["gammas"]), temperatures=tuple(c["temperatures"]), drafters=tuple(c["drafters"]),
        max_tokens=c["max_tokens"], prompts_per_category=c["prompts_per_category"],
        categories=tuple(c["categories"]) if c["categories"] else None, seed=c["seed"],
        top_p=c["top_p"], top_k=c["top_k"], warmup_tokens=c["warmup_tokens"], repeat=c.get("repeat", 1),
        lockstep=c.get("lockstep", False),
    )
    prompts = [BenchPrompt(p["question_id"], p["category"], ("",) * p["num_turns"], source=p.get("source"))
               for p in report["prompts"]]
    keys = ("temperature", "category", "question_id", "arm", "drafter", "gamma", "turn", "seed",
            "position", "stats", "text_chars", "t_wall_s")
    run = BenchRun(config=config, prompts=prompts,
                   samples=[Sample(**{k: s[k] for k in keys}, round=s.get("round", 0)) for s in report["samples"]],
                   interrupted=report["interrupted"], t_wall_s=report["t_wall_s"])
    return run


def rebuild_report(report: dict[str, Any]) -> dict[str, Any]:
    """The same report with its summary recomputed from the raw samples."""
    new = build_report(samples_from_json(report), report["environment"], report.get("command"))
    new["created"] = report.get("created", new["created"])
    return new


def write_json(report: dict[str, Any], path: str | Path) -> Path:
    """Write the report (NaN as null; atomically: a temp file, then rename)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(_clean(report), indent=1, allow_nan=False, ensure_ascii=False))
    tmp.replace(p)
    return p


def _clean(o: Any) -> Any:
    """JSON-safe copy: NaN/inf -> None, sets -> sorted lists, other objects -> str."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, (set, frozenset)):
        return sorted(_clean(v) for v in o)
    if o is None or isinstance(o, (str, int, float, bool)):
        return o
    return str(o)


# -- tables -------------------------------------------------------------------------
def _f(v: float | None, fmt: str = ".2f") -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def table_rows(report: dict[str, Any], temp: str, drafter: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one terminal table: for `drafter` at `temp`, per category the
    prompts, plain tok/s, "AL ×speedup" per γ (with each round's speedup after a --repeat run), then α, c and the best γ* (theory vs
    measured). `drafter="adaptive"` gives its single arm (no estimates)."""
    cfg = report["config"]
    arms = [a for a in cfg["arms"] if a.startswith(drafter + "@")]
    header = ["category", "n", "plain t/s"] + [a.split("@", 1)[1] if drafter != "adaptive" else a for a in arms]
    if drafter != "adaptive":
        header = header[:3] + [f"γ={h}" for h in header[3:]] + ["α", "c", "γ* theory", "γ* measured"]
    rows: list[list[str]] = []
    cats = report["summary"].get(temp, {}).get("categories", {})
    for cat, block in cats.items():
        a = block["arms"]
        plain = a.get("plain")
        row = [cat if cat != ALL else "ALL", str(plain["num_prompts"]) if plain else "0",
               _f(plain["tokens_per_s"], ".1f") if plain else "–"]
        for k in arms:
            s = a.get(k)
            per = s.get("speedup_per_round") if s else None
            rounds = f" ({'/'.join(_f(v) for v in per)})" if per else ""
            row.append(f"{_f(s['al'])} ×{_f(s['speedup'])}{rounds}" if s else "–")
        if drafter != "adaptive":
            e = block["estimates"].get(drafter)
            if e is None:
                row += ["–"] * 4
            else:
                th = e["theory"]
                row += [
                    _f(e["alpha"]), _f(e["c"]),
                    f"{th['best_gamma']} ×{_f(th['best_speedup'])}" if th else "–",
                    f"{e['measured_best_gamma']} ×{_f(e['measured_best_speedup'])}",
                ]
        rows.append(row)
    return header, rows


def render_tables(report: dict[str, Any], console: Any) -> None:
    """Print one rich table per temperature and drafter (plus a note when interrupted)."""
    from rich.table import Table

    drafters = list(dict.fromkeys(d for d in report["config"]["drafters"] if d != "none"))
    for temp in report["summary"]:
        for d in drafters:
            header, rows = table_rows(report, temp, d)
            table = Table(
                title=f"T={temp}, {d} drafter: AL ×speedup vs plain"
                + ("; α, c and best γ* (theory / measured)" if d != "adaptive" else ""),
                title_justify="left",
            )
            for i, h in enumerate(header):
                table.add_column(h, justify="left" if i == 0 else "right", no_wrap=True, min_width=len(h))
            for r in rows:
                table.add_row(*r, style="bold" if r[0] == "ALL" else None)
            console.print(table)
    console.print("AL = tokens per target forward; speedup = tok/s ÷ plain tok/s on the same prompts"
                  + ("; (a/b/…) = the speedup in each round of --repeat" if report["config"].get("repeat", 1) > 1 else ""))
    if report.get("interrupted"):
        console.print(
            f"[yellow]interrupted: {report['num_complete_samples']} of {report['num_samples']} generations "
            "belong to fully measured prompts; the tables use only those[/yellow]"
        )


def markdown_tables(report: dict[str, Any]) -> str:
    """Markdown: per temperature, AL / acceptance / tok/s / speedup per category and arm,
    then the model estimates and the best γ (theory vs measured)."""
    lines: list[str] = []
    cfg = report["config"]
    arms = cfg["arms"]
    drafters = [d for d in cfg["drafters"] if d not in ("none", "adaptive")]
    for temp, tblock in report["summary"].items():
        cats = tblock["categories"]
        lines += [f"### T = {temp}", "", "AL (acceptance length) per category and arm, 95 % bootstrap CI over prompts:", ""]
        shown = [a for a in arms if a != "plain"]
        lines.append("| category | " + " | ".join(shown) + " |")
        lines.append("|---|" + "---:|" * len(shown))
        for cat, b in cats.items():
            cells = []
            for k in shown:
                s = b["arms"].get(k)
                if not s:
                    cells.append("–")
                    continue
                ci = s.get("al_ci95")
                cells.append(f"{_f(s['al'])}" + (f" [{_f(ci[0])}, {_f(ci[1])}]" if ci else ""))
            lines.append(f"| {'**all**' if cat == ALL else cat} | " + " | ".join(cells) + " |")
        lines += ["", "tok/s (speedup vs plain, 95 % paired bootstrap CI over prompts):", ""]
        lines.append("| category | plain | " + " | ".join(shown) + " |")
        lines.append("|---|---:|" + "---:|" * len(shown))
        for cat, b in cats.items():
            p = b["arms"].get("plain")
            cells = [_f(p["tokens_per_s"], ".1f") if p else "–"]
            for k in shown:
                s = b["arms"].get(k)
                if not s:
                    cells.append("–")
                    continue
                ci = s.get("speedup_ci95")
                interval = f" [{_f(ci[0])}, {_f(ci[1])}]" if ci else ""
                cells.append(f"{_f(s['tokens_per_s'], '.1f')} ({_f(s['speedup'])}×{interval})")
            lines.append(f"| {'**all**' if cat == ALL else cat} | " + " | ".join(cells) + " |")
        if any(s.get("speedup_per_round") for b in cats.values() for s in b["arms"].values()):
            lines += ["", "Speedup vs plain in each round (the pooled value above is over all rounds):", ""]
            lines.append("| category | " + " | ".join(shown) + " |")
            lines.append("|---|" + "---:|" * len(shown))
            for cat, b in cats.items():
                cells = []
                for k in shown:
                    per = (b["arms"].get(k) or {}).get("speedup_per_round")
                    cells.append(" / ".join(_f(v) for v in per) if per else "–")
                lines.append(f"| {'**all**' if cat == ALL else cat} | " + " | ".join(cells) + " |")
        for d in drafters:
            gam = cfg["gammas"]
            lines += ["", f"Speed model for the `{d}` drafter (α from per-position rates, c, b(γ) measured; "
                      "theory best γ over 0..max γ, measured best among plain and the measured γ):", ""]
            lines.append("| category | α | acc. rate @γ=" + str(gam[0]) + " | c | " + " | ".join(f"b({g})" for g in gam)
                         + " | theory best γ (S) | measured best γ (S) |")
            lines.append("|---|---:|---:|---:|" + "---:|" * len(gam) + "---:|---:|")
            for cat, b in cats.items():
                e = b["estimates"].get(d)
                if not e:
                    continue
                first = b["arms"].get(f"{d}@{gam[0]}")
                th = e["theory"]
                ci = e.get("alpha_ci95")
                cells = [_f(e["alpha"]) + (f" [{_f(ci[0])}, {_f(ci[1])}]" if ci else ""),
                         _f(first["acceptance_rate"]) if first else "–", _f(e["c"])]
                cells += [_f(e["b"].get(str(g))) for g in gam]
                cells.append(f"{th['best_gamma']} ({_f(th['best_speedup'])}×)" if th else "–")
                cells.append(f"{e['measured_best_gamma']} ({_f(e['measured_best_speedup'])}×)")
                lines.append(f"| {'**all**' if cat == ALL else cat} | " + " | ".join(cells) + " |")
            all_arms = cats.get(ALL, {}).get("arms", {})
            rows = [(g, all_arms[f"{d}@{g}"]) for g in gam if f"{d}@{g}" in all_arms]
            if rows:
                width = max(len(a["per_position_acceptance"]) for _, a in rows)
                lines += ["", f"Per-position acceptance (`{d}`, all categories): accepted at position i / "
                          "steps that drafted ≥ i tokens:", ""]
                lines.append("| γ | " + " | ".join(f"i={i + 1}" for i in range(width)) + " |")
                lines.append("|---|" + "---:|" * width)
                for g, a in rows:
                    pp = a["per_position_acceptance"]
                    lines.append(f"| {g} | " + " | ".join(_f(pp[i]) if i < len(pp) else "" for i in range(width)) + " |")
        lines.append("")
    return "\n".join(lines)
