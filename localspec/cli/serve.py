"""CLI: `localspec serve` — the local OpenAI-compatible server (FastAPI on uvicorn)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Annotated, Any

import typer

from localspec.cli import _options as opt

log = logging.getLogger(__name__)

SERVE_EXAMPLES = [
    "localspec serve                                  # offline default pair on http://127.0.0.1:8000/v1",
    "localspec serve -m target.gguf -md draft.gguf -ngl 99 -ngld 99 -c 8192 --alias coder",
    "localspec serve --numerics fast                  # llama.cpp's fastest kernels",
    "localspec serve --parallel 8                     # 8 requests generated together (continuous batching)",
    "LOCALSPEC_API_KEY=secret localspec serve --host 0.0.0.0 --port 8080",
]


def serve_command(
    model: str | None = opt.MODEL,
    model_draft: str | None = opt.MODEL_DRAFT,
    n_gpu_layers: int = opt.NGL,
    n_gpu_layers_draft: int = opt.NGLD,
    ctx_size: int = opt.CTX,
    threads: int | None = opt.THREADS,
    flash_attn: bool | None = opt.FLASH_ATTN,
    numerics: str = opt.NUMERICS,
    rpc: str | None = opt.RPC,
    kernel: str | None = opt.KERNEL,
    draft_n_max: int | None = opt.GAMMA,
    parallel: int | None = opt.PARALLEL,
    alias: Annotated[str | None, typer.Option("--alias", help="Model id clients use (default: the target's name).")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Address to bind (default 127.0.0.1, loopback only).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="TCP port (default 8000).")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", help="Require 'Authorization: Bearer KEY' on /v1/* (or LOCALSPEC_API_KEY).")] = None,
    max_queue: Annotated[int | None, typer.Option("--max-queue", help="Requests that may wait while one generates (default 16); more get 429.")] = None,
    temp: Annotated[float | None, typer.Option("--temp", help="temperature when a request gives none (default 1.0, OpenAI's).")] = None,
    n_predict: Annotated[int | None, typer.Option("-n", "--n-predict", help="max_tokens when a request gives none (default: until EOS / context full).")] = None,
    drafter: Annotated[str | None, typer.Option("--drafter", help="Default drafting policy: adaptive, model, ngram, mtp, none.")] = None,
    strict_model: Annotated[bool, typer.Option("--strict-model", help="404 for a request `model` other than the alias/target.")] = False,
) -> None:
    """Serve a speculative pair over an OpenAI-compatible HTTP API (with /metrics)."""
    import uvicorn

    from localspec.server.app import create_app
    from localspec.server.settings import ServerSettings

    flags = opt.ModelFlags(
        model=model, model_draft=model_draft, n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft,
        ctx_size=ctx_size, threads=threads, flash_attn=flash_attn, numerics=numerics, rpc=rpc, kernel=kernel,
        gamma=draft_n_max, parallel=parallel,
    )
    flags.pair_paths()  # usage errors before any settings or weights
    flags = dataclasses.replace(flags, parallel=flags.auto_parallel())
    overrides: dict[str, Any] = {
        "host": host, "port": port, "api_key": api_key, "alias": alias, "max_queue": max_queue,
        "default_temperature": temp, "default_max_tokens": n_predict, "default_drafter": drafter,
    }
    settings = ServerSettings(**{k: v for k, v in overrides.items() if v is not None})
    if strict_model:
        settings = settings.model_copy(update={"strict_model": True})
    engine = flags.build_engine()
    try:
        engine.warm_up()
        app = create_app(engine, settings)
        if settings.host not in ("127.0.0.1", "localhost", "::1") and settings.api_key_value is None:
            log.warning("binding %s without an API key: anyone who can reach it can use the model", settings.host)
        info = engine.info
        typer.echo(f"localspec: {info.target} ← {info.draft or 'no drafter'} (kernel {info.kernel}, "
                   f"{info.numerics} numerics, {getattr(engine, 'parallel', 1)} at a time) on "
                   f"http://{settings.host}:{settings.port}/v1  "
                   f"(model id {app.state.serving.model_id!r})", err=True)
        uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")
    finally:
        engine.close()


def register(app: typer.Typer) -> None:
    """Add the `serve` command to `app`."""
    app.command(name="serve", epilog="Examples:\n\n" + "\n\n".join(SERVE_EXAMPLES))(serve_command)
