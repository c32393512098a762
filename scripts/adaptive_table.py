"""Print, from a `localspec bench --json` report, the table that judges the `adaptive` arm:
per temperature and category, plain tok/s, every fixed arm's speedup, adaptive's speedup,
and adaptive ÷ the best fixed arm (plain included).

    python scripts/adaptive_table.py docs/bench/adaptive_policy.json
"""

from __future__ import annotations

import json
import sys
from typing import Any


def table(report: dict[str, Any]) -> str:
    """Markdown: one table per temperature."""
    out: list[str] = []
    for temp, block in report["summary"].items():
        cats = block["categories"]
        arms = [a for a in next(iter(cats.values()))["arms"] if a != "plain"]
        fixed = [a for a in arms if not a.startswith("adaptive")]
        adaptive = next(a for a in arms if a.startswith("adaptive"))
        head = ["T = " + temp, "n", "plain tok/s", *(a.replace("@", " γ=") for a in fixed),
                "adaptive", "adaptive ÷ best fixed"]
        out += ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
        for cat, c in cats.items():
            a = c["arms"]
            best = max([1.0] + [a[f]["speedup"] for f in fixed if f in a])
            row = [f"**{cat}**" if cat == "all" else cat, str(a["plain"]["num_prompts"]),
                   f"{a['plain']['tokens_per_s']:.1f}",
                   *(f"{a[f]['speedup']:.2f}×" if f in a else "–" for f in fixed),
                   f"**{a[adaptive]['speedup']:.2f}×**", f"{a[adaptive]['speedup'] / best:.2f}"]
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(table(json.load(f)))
