"""CLI: `localspec serve` — the local OpenAI-compatible server (FastAPI on uvicorn)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

log = logging.getLogger(__name__)

SERVE_EXAMPLES = [
    "localspec serve                                  # offline default pair on http://127.0.0.1:8000/v1",
    "localspec serve -m target.gguf -md draft.gguf -ngl 99 -ngld 99 -c 8192 --alias coder",
    "LOCALSPEC_API_KEY=secret localspec serve --host 0.0.0.0 --port 8080",
]


def serve_command(
    model: Annotated[str | None, typer.Option("-m", "--model", help="Target GGUF path (default: the offline default pair).")] = None,
    model_draft: Annotated[str | None, typer.Option("-md", "--model-draft", help="Drafter GGUF path (same tokenizer as the target).")] = None,
    n_gpu_layers: Annotated[int, typer.Option("-ngl", "--n-gpu-layers", help="Target layers on the GPU (-1 = all).")] = 0,
    n_gpu_layers_draft: Annotated[int, typer.Option("-ngld", "--n-gpu-layers-draft", help="Drafter layers on the GPU.")] = 0,
    ctx_size: Annotated[int, typer.Option("-c", "--ctx-size", help="Context window in tokens.")] = 4096,
    threads: Annotated[int | None, typer.Option("-t", "--threads", help="CPU threads (default: physical cores).")] = None,
    draft_n_max: Annotated[int | None, typer.Option("--spec-draft-n-max", help="Draft length γ (maximum for adaptive).")] = None,
    kernel: Annotated[str | None, typer.Option("--kernel", help="Acceptance backend (default: LOCALSPEC_KERNEL or auto).")] = None,
    alias: Annotated[str | None, typer.Option("--alias", help="Model id clients use (default: the target's name).")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Address to bind (default 127.0.0.1, loopback only).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="TCP port (default 8000).")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", help="Require 'Authorization: Bearer KEY' on /v1/* (or LOCALSPEC_API_KEY).")] = None,
    max_queue: Annotated[int | None, typer.Option("--max-queue", help="Requests that may wait while one generates (default 16); more get 429.")] = None,
    temp: Annotated[float | None, typer.Option("--temp", help="temperature when a request gives none (default 1.0, OpenAI's).")] = None,
    n_predict: Annotated[int | None, typer.Option("-n", "--n-predict", help="max_tokens when a request gives none (default: until EOS / context full).")] = None,
    drafter: Annotated[str | None, typer.Option("--drafter", help="Default drafting policy: adaptive, model, ngram, none.")] = None,
    strict_model: Annotated[bool, typer.Option("--strict-model", help="404 for a request `model` other than the alias/target.")] = False,
) -> None:
    """Serve a speculative pair over an OpenAI-compatible HTTP API (with /metrics)."""
    import uvicorn

    from localspec.engine import DEFAULT_GAMMA, Engine, ModelSpec
    from localspec.server.app import create_app
    from localspec.server.settings import ServerSettings

    if model_draft and not model:
        raise typer.BadParameter("-md needs -m (the target it drafts for)", param_hint="-md")
    overrides = {
        "host": host, "port": port, "api_key": api_key, "alias": alias, "max_queue": max_queue,
        "default_temperature": temp, "default_max_tokens": n_predict, "default_drafter": drafter,
    }
    settings = ServerSettings(**{k: v for k, v in overrides.items() if v is not None})
    if strict_model:
        settings = settings.model_copy(update={"strict_model": True})
    if model is None:
        from localspec.store import default_pair_paths

        target_path, draft_path = (str(p) for p in default_pair_paths())
    else:
        target_path, draft_path = model, model_draft
    target = ModelSpec(target_path, n_gpu_layers=n_gpu_layers, n_ctx=ctx_size, n_threads=threads)
    draft = (ModelSpec(draft_path, n_gpu_layers=n_gpu_layers_draft, n_ctx=ctx_size, n_threads=threads)
             if draft_path else None)
    engine = Engine(target, draft, kernel=kernel, gamma=draft_n_max if draft_n_max is not None else DEFAULT_GAMMA)
    try:
        app = create_app(engine, settings)
        if settings.host not in ("127.0.0.1", "localhost", "::1") and settings.api_key_value is None:
            log.warning("binding %s without an API key: anyone who can reach it can use the model", settings.host)
        info = engine.info
        typer.echo(f"localspec: {info.target} ← {info.draft or 'no drafter'} (kernel {info.kernel}) on "
                   f"http://{settings.host}:{settings.port}/v1  (model id {app.state.serving.model_id!r})", err=True)
        uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")
    finally:
        engine.close()


def register(app: typer.Typer) -> None:
    """Add the `serve` command to `app`."""
    app.command(name="serve", epilog="Examples:\n\n" + "\n\n".join(SERVE_EXAMPLES))(serve_command)
