"""CLI: `localspec generate` — stream one completion, then its speculative stats."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from localspec.cli import _options as opt
from localspec.cli._schema import JSON_SCHEMA_HELP, schema_constraint

if TYPE_CHECKING:
    from localspec.engine import SpecStats

GENERATE_EXAMPLES = [
    "localspec generate -p 'def quicksort(xs):'",
    "localspec generate --chat -p 'Explain speculative decoding' --temp 0.8 --seed 1",
    "localspec generate -m big.gguf -md small.gguf -p 'Hello' --compare-plain",
    "localspec generate --chat -p 'A user record for Ada' --json-schema user.schema.json",
]


def register(app: typer.Typer) -> None:
    """Add `generate`."""
    app.command("generate", help="Generate text with speculative decoding and print the stats.\n\n"
                + "\n".join(f"  {e}" for e in GENERATE_EXAMPLES))(generate)


def generate(
    prompt: str = typer.Option(..., "-p", "--prompt", help="Prompt text."),
    chat: bool = typer.Option(False, "--chat", help="Send the prompt as a user message through the chat template."),
    system: str | None = typer.Option(None, "--system", help="System message (with --chat)."),
    n_predict: int = typer.Option(128, "-n", "--n-predict", help="Maximum tokens to generate."),
    temp: float = typer.Option(0.0, "--temp", help="Temperature (0 = greedy, bit-exact with the target)."),
    top_p: float = typer.Option(1.0, "--top-p"),
    top_k: int = typer.Option(0, "--top-k"),
    seed: int | None = typer.Option(None, "-s", "--seed"),
    stop: list[str] = typer.Option([], "--stop", help="Stop string (repeatable)."),
    drafter: str = typer.Option("adaptive", "--drafter", help="adaptive, model, ngram, mtp (the target's own nextn layers) or none."),
    p_min: float = typer.Option(0.0, "--spec-draft-p-min", help="Stop drafting below this drafter probability."),
    compare_plain: bool = typer.Option(False, "--compare-plain", help="Also run plain decoding on the same prompt and print both speeds."),
    json_schema: Path | None = typer.Option(
        None, "--json-schema", help=JSON_SCHEMA_HELP, dir_okay=False),
    model: str | None = opt.MODEL,
    model_draft: str | None = opt.MODEL_DRAFT,
    ngl: int = opt.NGL,
    ngld: int = opt.NGLD,
    ctx: int = opt.CTX,
    threads: int | None = opt.THREADS,
    flash_attn: bool | None = opt.FLASH_ATTN,
    numerics: str = opt.NUMERICS,
    rpc: str | None = opt.RPC,
    kernel: str | None = opt.KERNEL,
    gamma: int | None = opt.GAMMA,
) -> None:
    """Stream one generation; `--compare-plain` adds plain decoding in the same process."""
    from localspec.engine import ChatMessage, GenerationRequest

    constraint = schema_constraint(json_schema) if json_schema is not None else None
    engine = opt.ModelFlags(
        model=model, model_draft=model_draft, n_gpu_layers=ngl, n_gpu_layers_draft=ngld, ctx_size=ctx,
        threads=threads, flash_attn=flash_attn, numerics=numerics, rpc=rpc, kernel=kernel, gamma=gamma,
    ).build_engine()
    try:
        if chat:
            msgs = ([ChatMessage("system", system)] if system else []) + [ChatMessage("user", prompt)]
            base = GenerationRequest(messages=tuple(msgs), max_tokens=n_predict)
        else:
            base = GenerationRequest(prompt=prompt, max_tokens=n_predict)
        request = replace(base, temperature=temp, top_p=top_p, top_k=top_k, seed=seed, stop=tuple(stop),
                          drafter=drafter, gamma=gamma, p_min=p_min, constraint=constraint)
        with engine.generate(request) as generation:
            for event in generation:
                sys.stdout.write(event.text)
                sys.stdout.flush()
        sys.stdout.write("\n")
        spec = generation.stats
        typer.secho(_stats_line(spec), fg="cyan", err=True)
        if compare_plain:
            with engine.generate(replace(request, drafter="none")) as generation:
                for _ in generation:
                    pass
            plain = generation.stats
            typer.secho(_stats_line(plain), fg="cyan", err=True)
            ratio = spec.tokens_per_s / plain.tokens_per_s if plain.tokens_per_s else float("nan")
            typer.secho(
                f"speculative {spec.tokens_per_s:.2f} tok/s vs plain {plain.tokens_per_s:.2f} tok/s: {ratio:.2f}x",
                bold=True, err=True,
            )
    finally:
        engine.close()


def _stats_line(s: SpecStats) -> str:
    gammas = ",".join(f"{g}:{n}" for g, n in sorted(s.gamma_counts.items()))
    return (
        f"[{s.drafter}] {s.num_generated_tokens} tokens in {s.t_generate_s:.2f}s = {s.tokens_per_s:.2f} tok/s | "
        f"steps {s.num_steps} drafted {s.num_draft_tokens} accepted {s.num_accepted_tokens} | "
        f"AL {s.mean_acceptance_length:.2f} acceptance {s.acceptance_rate:.1%} | γ used {{{gammas}}} | "
        f"draft {s.t_draft_s:.2f}s verify {s.t_verify_s:.2f}s accept {s.t_accept_s * 1e3:.1f}ms | "
        f"prefill {s.num_prompt_tokens} tok ({s.num_cached_prompt_tokens} cached) {s.t_prefill_s:.2f}s | "
        f"outside llama_decode {s.overhead_share:.1%} | kernel {s.kernel} | numerics {s.numerics}"
    )
