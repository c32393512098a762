"""CLI: `localspec recommend` — ranked (target, drafter, quants) for this machine."""

from __future__ import annotations

import json

import typer

from localspec.catalog.drafters import NOT_RUNNABLE
from localspec.cli._options import parse_rpc

RECOMMEND_EXAMPLES = [
    "localspec recommend",
    'localspec recommend --gpu "RTX 4090" --task code',
    "localspec recommend --vram 12 --task code --ctx 16384",
    "localspec recommend --list-gpus",
    "localspec recommend --json",
    "localspec recommend --measure",
    "localspec recommend --rpc 192.168.1.20:50052,192.168.1.21:50052   # count two workers' memory",
]


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f}"


def register(app: typer.Typer) -> None:
    """Add `recommend` to `app`."""

    @app.command("recommend", epilog="Examples:\n\n" + "\n\n".join(RECOMMEND_EXAMPLES))
    def recommend_command(
        gpu: str | None = typer.Option(None, "--gpu", help='Plan for this card (e.g. "RTX 4090", "RTX 4060 Ti 16GB", '
                                       '"RTX 4080 Laptop") from the GPU table instead of the probed GPU.'),
        vram: float | None = typer.Option(None, "--vram", help="Plan for this much VRAM (GiB) instead of the probed GPU; "
                                          "without a GPU or --gpu, a typical card of that size is assumed."),
        ram: float | None = typer.Option(None, "--ram", help="Plan for this much RAM (GiB) instead of what is available."),
        task: str = typer.Option("chat", "--task", help="code, chat, summarize, rag, math, reasoning or translate."),
        ctx: int = typer.Option(4096, "-c", "--ctx", "--ctx-size", help="Context size in tokens (KV cache sizing)."),
        limit: int = typer.Option(10, "--limit", help="Show this many pairs."),
        min_tps: float = typer.Option(10.0, "--min-tps", help="Pairs predicted slower than this rank last."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
        measure: bool = typer.Option(False, "--measure", help="Measure α, c and b on the local offline pair first."),
        measure_tokens: int = typer.Option(128, "--measure-tokens", help="Tokens per calibration run."),
        gamma: int = typer.Option(4, "--spec-draft-n-max", help="γ used by the calibration run."),
        list_gpus: bool = typer.Option(False, "--list-gpus", help="List the cards --gpu knows and exit."),
        rpc: str | None = typer.Option(None, "--rpc", callback=_rpc_option,
                                       help="RPC workers host:port[,host:port…] (`localspec worker` there): each is "
                                       "asked for its free memory, and the target's layers are planned on them "
                                       "(the drafter stays here), as `--rpc` places them at load."),
    ) -> None:
        """Rank compatible target/drafter pairs that fit this machine, with predicted speedup."""
        from localspec.catalog import load_catalog
        from localspec.hardware import probe
        from localspec.recommend import TASK_PRIORS, budget_from, recommend, without_runnable_drafter

        if list_gpus:
            _print_gpus(as_json)
            return
        if task not in TASK_PRIORS:
            raise typer.BadParameter(f"unknown task {task!r}; one of: {', '.join(TASK_PRIORS)}", param_hint="--task")
        workers = _probe_workers(parse_rpc(rpc)) if rpc else ()
        report = probe()
        budget = budget_from(report, vram, ram, gpu, rpc_workers=workers)
        catalog = load_catalog()
        calibration = None
        measurement = None
        if measure:
            measurement, calibration = _measure(catalog, budget, task, gamma, measure_tokens, as_json)
        recs = recommend(catalog, budget, task=task, n_ctx=ctx, min_tokens_per_s=min_tps, limit=limit,
                         calibration=calibration)
        others = {(r.target, r.target_quant): _others(catalog, budget, r.target, r.target_quant, task, ctx) for r in recs}
        unrunnable = without_runnable_drafter(catalog, budget, task=task, n_ctx=ctx, limit=max(3, limit // 2),
                                              min_tokens_per_s=min_tps)
        if as_json:
            out = {
                "hardware": {"source": budget.source, "vram_bytes": budget.vram_bytes, "ram_bytes": budget.ram_bytes,
                             "gpu": budget.gpu_name, "gpu_bandwidth_bytes_s": budget.gpu_bandwidth,
                             "gpu_error": report.gpu_error,
                             "rpc_workers": [{"endpoint": w.endpoint, "free_bytes": w.free_bytes,
                                              "total_bytes": w.total_bytes} for w in budget.rpc_workers]},
                "task": task, "ctx": ctx, "catalog": catalog.origin,
                "measurement": measurement.to_dict() if measurement else None,
                "recommendations": [{**r.to_dict(), "not_yet_runnable": [o.to_dict() for o in others[(r.target, r.target_quant)]]}
                                    for r in recs],
                "without_runnable_drafter": [{"plain": p.to_dict(), "not_yet_runnable": [o.to_dict() for o in o_list]}
                                             for p, o_list in unrunnable],
            }
            typer.echo(json.dumps(out, indent=2))
            return
        if budget.has_gpu:
            where = f"GPU {budget.gpu_name or '(by size)'}: {_gib(budget.vram_bytes)} GiB, {budget.gpu_bandwidth / 1e9:.0f} GB/s"
            typer.echo(f"{where} [{budget.source}]; RAM {_gib(budget.ram_bytes)} GiB; task {task}; context {ctx}")
        else:
            typer.echo(f"{budget.source}; RAM {_gib(budget.ram_bytes)} GiB; task {task}; context {ctx}")
        if workers:
            for line in _workers_lines(budget):
                typer.echo(line)
        if not recs:
            typer.echo("no compatible pair fits; try a smaller --ctx, or --ram / --vram / --gpu if the probe is wrong")
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
            for o in others[(r.target, r.target_quant)][:3]:
                typer.echo(f"    {NOT_RUNNABLE}: {_other_line(o)}")
        if unrunnable:
            typer.echo(f"\nAlso fits, but no drafter localspec can run yet (plain decoding; {NOT_RUNNABLE}):")
            for plain, o_list in unrunnable:
                typer.echo(f"  {plain.target} {plain.target_quant}  [{plain.placement}]  {plain.plain_tokens_per_s:.0f} tok/s plain")
                for o in o_list[:3]:
                    typer.echo(f"    {_other_line(o)} — {o.why_not}")
        if any(catalog.model(r.target).is_moe for r in recs) or any(catalog.model(p.target).is_moe for p, _ in unrunnable):
            typer.echo("\nMoE targets: decode cost follows the active parameters, and speculation gains less on them: "
                       "a verify batch of γ+1 tokens touches more experts than one token does.")


def _rpc_option(value: str | None) -> str | None:
    parse_rpc(value)
    return value


def _probe_workers(endpoints: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """Each worker's free memory (as at load: HELLO, devices, memory); a clear error naming
    the worker that cannot answer."""
    from localspec.engine.llama import rpc as rpc_client
    from localspec.errors import ModelLoadError
    from localspec.recommend import RpcWorker

    out = []
    for endpoint in endpoints:
        try:
            info = rpc_client.probe(endpoint)
        except ModelLoadError as exc:
            raise typer.BadParameter(str(exc), param_hint="--rpc") from None
        out.append(RpcWorker(endpoint, info.free_bytes, info.total_bytes))
    return tuple(out)


def _workers_lines(budget) -> list[str]:  # type: ignore[no-untyped-def]
    """What the target can use with workers, and the assumptions behind the speeds."""
    from localspec.recommend.fit import RPC_ROUND_TRIP_S

    workers = budget.rpc_workers
    n = len(workers)
    each = ", ".join(f"{w.endpoint} {_gib(w.free_bytes)} of {_gib(w.total_bytes)}" for w in workers)
    lines = [
        f"target: {n} RPC worker{'s' if n > 1 else ''}, {_gib(budget.rpc_free_bytes)} GiB free "
        f"+ local RAM {_gib(budget.ram_bytes)} GiB (workers: {each}); the drafter stays here"
        + (f" (GPU {_gib(budget.vram_bytes)} GiB)" if budget.has_gpu else ""),
        f"  speeds assume each worker computes like this machine's {'GPU' if budget.has_gpu else 'CPU'} "
        f"(the protocol does not say), plus {RPC_ROUND_TRIP_S * 1e3:g} ms per worker and forward for the network",
    ]
    local = [w.endpoint for w in workers if w.endpoint.rsplit(":", 1)[0].strip("[]") in _LOOPBACK]
    if local:
        lines.append(f"  {', '.join(local)} {'is' if len(local) == 1 else 'are'} on this machine: "
                     "that memory is counted again as local RAM")
    return lines


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _others(catalog, budget, target: str, quant: str, task: str, ctx: int):  # type: ignore[no-untyped-def]
    """Not-yet-runnable drafters of one recommended target, predicted."""
    from localspec.recommend import other_drafters

    return other_drafters(catalog, budget, target, quant, task=task, n_ctx=ctx)


def _other_line(o) -> str:  # type: ignore[no-untyped-def]
    """One predicted drafter: "MTP (built in) [mtp]: γ=3 1.62x (40 -> 64 tok/s)"."""
    where = {"partial": ", target partly in RAM", "cpu": ", CPU only", "rpc": ", target on the RPC workers"}.get(
        o.placement, "")
    if not o.gamma:
        return f"{o.drafter_label} [{o.kind}]: no gain predicted{where}"
    return (f"{o.drafter_label} [{o.kind}]: γ={o.gamma} {o.speedup:.2f}x "
            f"({o.plain_tokens_per_s:.0f} -> {o.spec_tokens_per_s:.0f} tok/s{where})")


def _print_gpus(as_json: bool) -> None:
    """The GPU table: name, VRAM, bandwidth."""
    from localspec.gpus import load_gpus

    gpus = load_gpus()
    if as_json:
        typer.echo(json.dumps([{"name": g.name, "vram_gb": g.vram_gb, "bandwidth_gbs": g.bandwidth_gbs,
                                "laptop": g.laptop, "source": g.source} for g in gpus], indent=2))
        return
    for g in gpus:
        typer.echo(f"{g.name:<22} {g.vram_gb:>4g} GB  {g.bandwidth_gbs:>6g} GB/s{'  (laptop)' if g.laptop else ''}")


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
