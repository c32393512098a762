"""CLI: `localspec recommend` — ranked (target, drafter, quants) for this machine."""

from __future__ import annotations

import json

import typer

RECOMMEND_EXAMPLES = [
    "localspec recommend",
    "localspec recommend --vram 12 --task code --ctx 16384",
    "localspec recommend --json",
    "localspec recommend --measure",
]


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f}"


def register(app: typer.Typer) -> None:
    """Add `recommend` to `app`."""

    @app.command("recommend", epilog="Examples:\n\n" + "\n\n".join(RECOMMEND_EXAMPLES))
    def recommend_command(
        vram: float | None = typer.Option(None, "--vram", help="Plan for this much VRAM (GiB) instead of the probed GPU."),
        ram: float | None = typer.Option(None, "--ram", help="Plan for this much RAM (GiB) instead of what is available."),
        task: str = typer.Option("chat", "--task", help="code, chat, summarize, rag, math, reasoning or translate."),
        ctx: int = typer.Option(4096, "-c", "--ctx", "--ctx-size", help="Context size in tokens (KV cache sizing)."),
        limit: int = typer.Option(10, "--limit", help="Show this many pairs."),
        min_tps: float = typer.Option(10.0, "--min-tps", help="Pairs predicted slower than this rank last."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
        measure: bool = typer.Option(False, "--measure", help="Measure α, c and b on the local offline pair first."),
        measure_tokens: int = typer.Option(128, "--measure-tokens", help="Tokens per calibration run."),
        gamma: int = typer.Option(4, "--spec-draft-n-max", help="γ used by the calibration run."),
    ) -> None:
        """Rank compatible target/drafter pairs that fit this machine, with predicted speedup."""
        from localspec.catalog import load_catalog
        from localspec.hardware import probe
        from localspec.recommend import TASK_PRIORS, budget_from, recommend

        if task not in TASK_PRIORS:
            raise typer.BadParameter(f"unknown task {task!r}; one of: {', '.join(TASK_PRIORS)}", param_hint="--task")
        report = probe()
        budget = budget_from(report, vram, ram)
        catalog = load_catalog()
        calibration = None
        measurement = None
        if measure:
            measurement, calibration = _measure(catalog, budget, task, gamma, measure_tokens, as_json)
        recs = recommend(catalog, budget, task=task, n_ctx=ctx, min_tokens_per_s=min_tps, limit=limit,
                         calibration=calibration)
        if as_json:
            out = {
                "hardware": {"source": budget.source, "vram_bytes": budget.vram_bytes, "ram_bytes": budget.ram_bytes,
                             "gpu": budget.gpu_name, "gpu_error": report.gpu_error},
                "task": task, "ctx": ctx, "catalog": catalog.origin,
                "measurement": measurement.to_dict() if measurement else None,
                "recommendations": [r.to_dict() for r in recs],
            }
            typer.echo(json.dumps(out, indent=2))
            return
        gpu = f"GPU {budget.gpu_name or budget.source}: {_gib(budget.vram_bytes)} GiB" if budget.has_gpu else budget.source
        typer.echo(f"{gpu}; RAM {_gib(budget.ram_bytes)} GiB; task {task}; context {ctx}")
        if not recs:
            typer.echo("no compatible pair fits; try a smaller --ctx, or --ram / --vram if the probe is wrong")
            return
        for r in recs:
            ngl = f"-ngl {r.target_gpu_layers}" if r.placement != "cpu" else "CPU"
            slow = "" if r.meets_min_speed else f"  (below --min-tps {min_tps:g})"
            typer.echo(
                f"{r.rank:>2}. {r.target} {r.target_quant}  <-  {r.draft} {r.draft_quant}   [{r.placement}, {ngl}]  "
                f"γ={r.gamma}  {r.speedup:.2f}x  {r.plain_tokens_per_s:.0f} -> {r.spec_tokens_per_s:.0f} tok/s{slow}"
            )
            typer.echo(f"    {r.why}")
            typer.echo(f"    α source: {r.alpha_source}")
            typer.echo(f"    files: {r.target_repo}/{r.target_file}  +  {r.draft_repo or '(offline store)'}/{r.draft_file}")


def _measure(catalog, budget, task: str, gamma: int, tokens: int, quiet: bool):  # type: ignore[no-untyped-def]
    """Calibrate on the offline default pair; print and return (Measurement, Calibration)."""
    from localspec.recommend import Calibration, place
    from localspec.recommend.calibrate import calibrate
    from localspec.store import default_pair_ids, default_pair_paths, offline_model

    target_path, draft_path = default_pair_paths()
    if not quiet:
        typer.echo(f"measuring on {target_path.name} + {draft_path.name} ({task}, γ={gamma}, {tokens} tokens)…", err=True)
    ngl = -1 if budget.has_gpu else 0
    m = calibrate(str(target_path), str(draft_path), task=task, gamma=gamma, max_tokens=tokens, n_gpu_layers=ngl)
    t_id, d_id = default_pair_ids()
    tm, tf = catalog.match_file(offline_model(t_id).file) or (None, None)
    dm, df = catalog.match_file(offline_model(d_id).file) or (None, None)
    c_model = 0.0
    if tm and dm and tf and df:
        p = place(tm, tf, dm, df, 2048, budget)
        c_model = p.draft_token_s / p.target_token_s if p else 0.0
    cal = Calibration(alpha=m.alpha, c=m.c, b_slope=m.b_slope, placement="gpu" if budget.has_gpu else "cpu", c_model=c_model)
    if not quiet:
        typer.echo(
            f"measured: α={m.alpha:.3f} (acceptance rate {m.acceptance_rate:.3f}, AL {m.mean_acceptance_length:.2f}), "
            f"c={m.c:.3f}, b({gamma})={m.b_gamma:.2f} (slope {m.b_slope:.3f})"
        )
        typer.echo(
            f"plain {m.plain_tokens_per_s:.1f} tok/s, speculative γ={gamma} {m.spec_tokens_per_s:.1f} tok/s: "
            f"measured speedup {m.measured_speedup:.3f}, predicted {m.predicted_speedup:.3f} "
            f"({m.prediction_error:+.1%}); best γ here {m.best_gamma} → {m.best_gamma_speedup:.2f}x predicted"
        )
    return m, cal
