"""CLI: `localspec bench` — acceptance length per domain, draft-length sweep, optimal γ."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from localspec.cli import _options as opt

if TYPE_CHECKING:
    from localspec.engine import Engine

BENCH_EXAMPLES = [
    "localspec bench --categories coding,rag --gamma 1,2,4 --max-tokens 64",
    "localspec bench --sweep --temp 0,0.8 --drafters model,ngram,adaptive --json out.json --plot out.png",
    "localspec bench --prompts SPEED-Bench/qualitative.jsonl --prompts-per-category 10",
    "localspec bench --prompts builtin --prompts models/prompts/humaneval.jsonl --drafters model,ngram,adaptive",
    "localspec bench --prompts-per-category 0 --drafters ngram,adaptive --gamma 2,4 --temp 0,0.8 --repeat 2",
]


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"give comma-separated integers, e.g. 1,2,4 (got {text!r})", param_hint=name) from None
    if not vals or any(v < 1 or v > 16 for v in vals):
        raise typer.BadParameter("each γ must be in 1..16 (plain decoding is always measured)", param_hint=name)
    return tuple(sorted(set(vals)))


def _floats(text: str, name: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"give comma-separated numbers, e.g. 0,0.8 (got {text!r})", param_hint=name) from None
    if not vals or any(v < 0 for v in vals):
        raise typer.BadParameter("temperatures must be >= 0", param_hint=name)
    return tuple(dict.fromkeys(vals))


def _names(text: str, allowed: tuple[str, ...], name: str) -> tuple[str, ...]:
    vals = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    bad = [v for v in vals if v not in allowed]
    if not vals or bad:
        raise typer.BadParameter(f"choose from {', '.join(allowed)} (got {text!r})", param_hint=name)
    return vals


def register(app: typer.Typer) -> None:
    """Attach the benchmark to the `bench` group as its callback (runs with no subcommand)."""

    @app.callback(invoke_without_command=True)
    def bench_run(
        ctx: typer.Context,
        model: str | None = opt.MODEL,
        model_draft: str | None = opt.MODEL_DRAFT,
        categories: Annotated[str | None, typer.Option("--categories", help="Comma-separated categories (default: all in the prompt set).")] = None,
        prompts: Annotated[list[str] | None, typer.Option("--prompts", help="Prompt set: a SPEED-Bench or Spec-Bench JSONL file, or 'builtin' (the default); repeat to run several as one.")] = None,
        gamma: Annotated[str, typer.Option("--gamma", help="Draft lengths to measure, comma-separated.")] = "1,2,4,8",
        sweep: Annotated[bool, typer.Option("--sweep", help="Measure γ = 1,2,3,4,6,8 (overrides --gamma).")] = False,
        temp: Annotated[str, typer.Option("--temp", help="Temperatures, comma-separated (0 = greedy).")] = "0",
        max_tokens: Annotated[int, typer.Option("-n", "--max-tokens", "--n-predict", min=1, help="Tokens per turn.")] = 128,
        prompts_per_category: Annotated[int, typer.Option("--prompts-per-category", min=0, help="Prompts per category (0 = all).")] = 2,
        drafters: Annotated[str, typer.Option("--drafters", help="Arms besides plain: model, ngram, mtp, eagle3, dflash, dspark, adaptive "
                                                        "(comma-separated; mtp needs a target with nextn layers, "
                                                        "eagle3/dflash/dspark such a drafter GGUF as -md).")] = "model",
        json_out: Annotated[Path | None, typer.Option("--json", help="Write the full report (every raw count and timing) here.")] = None,
        plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG: AL by category, speedup vs γ.")] = None,
        from_json: Annotated[Path | None, typer.Option("--from-json", help="Don't measure: re-summarise a written report and print/write its tables and plot.")] = None,
        markdown: Annotated[Path | None, typer.Option("--markdown", help="Write the tables as markdown here.")] = None,
        seed: Annotated[int, typer.Option("--seed", min=0, help="Base seed (per-turn seeds derive from it).")] = 0,
        warmup_tokens: Annotated[int, typer.Option("--warmup-tokens", min=0, help="Warm-up tokens per drafter (not recorded).")] = 8,
        repeat: Annotated[int, typer.Option("--repeat", min=1, help="Run every prompt this many times (each round in the reverse arm order "
                                            "of the one before) and pool: less timing noise per category; each round's speedup is shown too.")] = 1,
        lockstep: Annotated[bool, typer.Option("--lockstep", help="Run a prompt's arms at once, one step each in turn, each arm on its own "
                                               "copy of the models (memory for one pair per arm): the host's speed drifts hit "
                                               "every arm alike (far less noise on a shared machine).")] = False,
        n_gpu_layers: int = opt.NGL,
        n_gpu_layers_draft: int = opt.NGLD,
        ctx_size: int = opt.CTX,
        threads: int | None = opt.THREADS,
        flash_attn: bool | None = opt.FLASH_ATTN,
        numerics: str = opt.NUMERICS,
        rpc: str | None = opt.RPC,
        kernel: str | None = opt.KERNEL,
    ) -> None:
        """Measure acceptance length, tok/s and speedup per category and γ; estimate α, c, b(γ) and the best γ."""
        if ctx.invoked_subcommand is not None:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn,
        )

        from localspec.bench.environment import environment_record
        from localspec.bench.lockstep import run_lockstep
        from localspec.bench.plot import write_plot
        from localspec.bench.report import build_report, markdown_tables, rebuild_report, render_tables, write_json
        from localspec.bench.runner import SWEEP_GAMMAS, Arm, BenchConfig, BenchRun, ProgressFn, planned_units, run_bench
        from localspec.cli._progress import LineProgress
        from localspec.prompts import load_builtin, load_prompt_sources, select

        def arm_engines(flags: opt.ModelFlags, engine: Engine, arms: Sequence[Arm], into: dict[str, Engine]) -> None:
            """`--lockstep`: an engine per arm in `into` (filled as they load, so a failure leaves
            the loaded ones to close). `engine` (the pair as given) serves the first arm that drafts
            with the drafter file; arms that do not (plain, n-gram, MTP) load the target alone."""
            alone = dataclasses.replace(flags, model_draft="none")
            for arm in arms:
                if arm.drafter in ("none", "ngram", "mtp") or flags.no_drafter:
                    into[arm.key] = alone.build_engine()
                elif engine not in into.values():
                    into[arm.key] = engine
                else:
                    into[arm.key] = flags.build_engine()

        console = Console(width=None if sys.stdout.isatty() else 160)

        def emit(report: dict[str, object]) -> None:
            render_tables(report, console)
            if json_out:
                console.print(f"JSON: {write_json(report, json_out)}")
            if plot:
                console.print(f"plot: {write_plot(report, plot)}")
            if markdown:
                markdown.parent.mkdir(parents=True, exist_ok=True)
                markdown.write_text(markdown_tables(report), encoding="utf-8")
                console.print(f"markdown: {markdown}")

        if from_json is not None:
            import json

            try:
                old = json.loads(from_json.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise typer.BadParameter(f"cannot read a bench report from {from_json}: {exc}", param_hint="--from-json") from exc
            emit(rebuild_report(old))
            return

        gammas = SWEEP_GAMMAS if sweep else _ints(gamma, "--gamma")
        temps = _floats(temp, "--temp")
        kinds = _names(drafters, ("model", "ngram", "mtp", "eagle3", "dflash", "dspark", "adaptive"), "--drafters")

        pset = load_prompt_sources(prompts) if prompts else load_builtin()
        if pset.num_skipped_placeholder or pset.num_skipped_invalid:
            console.print(
                f"[yellow]{pset.path}: skipped {pset.num_skipped_placeholder} rows with placeholder turns "
                f"and {pset.num_skipped_invalid} rows without usable turns[/yellow]"
            )
        cats = tuple(c.strip() for c in categories.split(",") if c.strip()) if categories else None
        chosen = select(pset.prompts, cats, prompts_per_category or None)
        config = BenchConfig(
            gammas=gammas, temperatures=temps, drafters=kinds, max_tokens=max_tokens,
            prompts_per_category=prompts_per_category or None, categories=cats, seed=seed,
            warmup_tokens=warmup_tokens, repeat=repeat, lockstep=lockstep,
        )

        flags = opt.ModelFlags(
            model=model, model_draft=model_draft, n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft,
            ctx_size=ctx_size, threads=threads, flash_attn=flash_attn, numerics=numerics, rpc=rpc, kernel=kernel,
            gamma=max(gammas),
        )
        target_path, draft_path = flags.pair_paths()
        if "model" in kinds and draft_path is None:
            raise typer.BadParameter("the model drafter needs -md/--model-draft (or drop 'model' from --drafters)", param_hint="-md")
        console.print(
            f"bench: {len(chosen)} prompts in {len(dict.fromkeys(p.category for p in chosen))} categories, "
            f"arms {', '.join(a.key for a in config.arms)}, T={','.join(f'{t:g}' for t in temps)}, "
            f"{max_tokens} tokens per turn" + (f", {repeat} rounds" if repeat > 1 else "")
            + (", lockstep (an engine per arm)" if lockstep else "")
        )
        engine = flags.build_engine()
        engines: dict[str, Engine] = {}
        missing = [k for k in kinds if k not in ("adaptive", "none") and k not in engine.drafters]
        if missing:
            engine.close()
            raise typer.BadParameter(
                f"drafter {', '.join(missing)} is not available for these models (available: "
                f"{', '.join(engine.drafters)}); the -md file decides: a small model gives 'model', "
                "an EAGLE-3/DFlash/DSpark GGUF gives its kind", param_hint="--drafters")
        try:
            if lockstep:
                arm_engines(flags, engine, config.arms, engines)

            def measure(progress: ProgressFn) -> BenchRun:
                if lockstep:
                    return run_lockstep(engines, chosen, config, progress)
                return run_bench(engine, chosen, config, progress)

            env = environment_record(
                target_path, draft_path, kernel=engine.info.kernel, threads=threads, n_ctx=ctx_size,
                n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft, numerics=engine.info.numerics,
                flash_attn=flash_attn,
            )
            total = planned_units(chosen, config)
            if not console.is_terminal:  # a log file: lines, not a bar that draws only at the end
                run = measure(LineProgress(total, lambda line: typer.echo(f"bench: {line}", err=True)))
            else:
                with Progress(
                    TextColumn("[progress.description]{task.description}", table_column=None),
                    BarColumn(), MofNCompleteColumn(), TextColumn("tokens"),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=console, transient=False,
                ) as bar:
                    task = bar.add_task("warm-up", total=total)

                    def progress(n: int, label: str) -> None:
                        bar.update(task, advance=n, description=label[:48])

                    run = measure(progress)
        finally:
            for e in {id(e): e for e in [engine, *engines.values()]}.values():
                e.close()
        params = {k: (str(v) if isinstance(v, Path) else v) for k, v in ctx.params.items()}
        report = build_report(run, env, command={"argv": shlex.join(sys.argv), "params": params})
        emit(report)
        if run.interrupted:
            raise typer.Exit(130)
