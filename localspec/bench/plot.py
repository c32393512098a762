"""A PNG people can look at: per temperature, AL by category (bars per γ) and measured
speedup vs γ per category (γ = 0 is plain decoding, 1.0), with the theory for "all"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localspec.bench.summary import ALL


def write_plot(report: dict[str, Any], path: str | Path, drafter: str | None = None) -> Path:
    """Draw the report's summary into `path` (PNG, matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = report["config"]
    drafters = [d for d in cfg["drafters"] if d not in ("none", "adaptive")]
    drafter = drafter or (drafters[0] if drafters else "model")
    gammas: list[int] = cfg["gammas"]
    temps = list(report["summary"])
    n = max(1, len(temps))
    fig, axes = plt.subplots(n, 2, figsize=(15, 4.8 * n), squeeze=False)
    cmap = plt.get_cmap("tab20")
    for row, temp in enumerate(temps):
        cats = report["summary"][temp]["categories"]
        names = [c for c in cats if c != ALL]
        ax = axes[row][0]
        width = 0.8 / max(1, len(gammas))
        for gi, g in enumerate(gammas):
            vals = [cats[c]["arms"].get(f"{drafter}@{g}", {}).get("al", 0.0) for c in names]
            xs = [i + (gi - (len(gammas) - 1) / 2) * width for i in range(len(names))]
            ax.bar(xs, vals, width=width, label=f"γ={g}", color=cmap(gi * 2))
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=35, ha="right")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_ylabel("acceptance length (tokens / target forward)")
        ax.set_title(f"AL by category — {drafter} drafter, T={temp}")
        ax.legend(ncol=min(6, len(gammas)), fontsize=8)
        ax.grid(axis="y", alpha=0.3)

        ax = axes[row][1]
        xs_g = [0, *gammas]
        for ci, c in enumerate(names):
            e = cats[c]["estimates"].get(drafter)
            if not e:
                continue
            ys = [e["measured_speedup"].get(str(g)) for g in xs_g]
            ax.plot(xs_g, [y if y is not None else float("nan") for y in ys], marker="o", markersize=3,
                    linewidth=1.2, color=cmap(ci % 20), label=c)
        e_all = cats.get(ALL, {}).get("estimates", {}).get(drafter)
        if e_all:
            ys = [e_all["measured_speedup"].get(str(g), float("nan")) for g in xs_g]
            ax.plot(xs_g, ys, color="black", linewidth=2.5, marker="s", label="all (measured)")
            th = e_all.get("theory")
            if th:
                ys_t = [1.0] + [th["predicted"][str(g)]["speedup"] for g in gammas]
                ax.plot(xs_g, ys_t, color="black", linestyle="--", linewidth=1.8,
                        label=f"all (theory, α={e_all['alpha']:.2f}, c={e_all['c']:.2f})")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xticks(xs_g)
        ax.set_xlabel("draft length γ (0 = plain decoding)")
        ax.set_ylabel("speedup vs plain (tok/s ratio)")
        ax.set_title(f"speedup vs γ — {drafter} drafter, T={temp}")
        ax.legend(fontsize=7, ncol=2)
        ax.grid(alpha=0.3)
    title = "localspec bench"
    models = report.get("environment", {}).get("models", {})
    if models.get("target"):
        title += f": {models['target']['name']}"
        if models.get("draft"):
            title += f" + {models['draft']['name']}"
    if report.get("interrupted"):
        title += " (interrupted: partial)"
    fig.suptitle(title)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
