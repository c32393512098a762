"""The `localspec` command. Each command group lives in its own module with a
`register(app)` function; heavy imports (llama_cpp, textual, fastapi) happen inside the
command functions so `localspec --help` stays fast."""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Callable

import typer

from localspec.errors import LocalSpecError

app = typer.Typer(
    name="localspec",
    help="Speculative decoding for local GGUF models. With no command, opens the TUI.",
    no_args_is_help=False,
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
models_app = typer.Typer(help="Find, download and list models (HF cache + local store).", no_args_is_help=True)
bench_app = typer.Typer(
    help="Measure acceptance length and speed per domain (`bench kernels`: acceptance backends).",
    invoke_without_command=True,
)
app.add_typer(models_app, name="models")
app.add_typer(bench_app, name="bench")


_registered = False


def _register_all() -> typer.Typer:
    """Attach every command module (once); returns the root app (tests drive it with CliRunner)."""
    global _registered
    if _registered:
        return app
    _registered = True
    from localspec.cli import bench, bench_kernels, bench_load, doctor, generate, models, recommend, serve, tui, worker

    generate.register(app)
    tui.register(app)
    serve.register(app)
    recommend.register(app)
    doctor.register(app)
    worker.register(app)
    models.register(models_app)
    bench.register(bench_app)
    bench_kernels.register(bench_app)
    bench_load.register(bench_app)
    return app


@app.callback()
def _root(ctx: typer.Context, verbose: bool = typer.Option(False, "-v", "--verbose", help="Log more.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose or os.environ.get("LOCALSPEC_DEBUG") else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if ctx.invoked_subcommand is None:
        from localspec.cli.tui import tui_command

        ctx.invoke(tui_command, **_defaults(tui_command))  # as `localspec tui`


def _defaults(command: Callable[..., object]) -> dict[str, object]:
    """Every parameter of `command` at its default (the shared flags are declared as
    `typer.Option(default, ...)` objects, whose `.default` is the value)."""
    return {name: getattr(p.default, "default", p.default)
            for name, p in inspect.signature(command).parameters.items()}


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turn LocalSpecError into one clear line and exit code 1."""
    _register_all()
    try:
        # standalone mode: typer/click print usage errors themselves and exit 2
        app(args=argv, standalone_mode=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except LocalSpecError as exc:
        if os.environ.get("LOCALSPEC_DEBUG"):
            raise
        typer.secho(f"error: {exc}", fg="red", err=True)
        typer.echo("(set LOCALSPEC_DEBUG=1 for the full traceback)", err=True)
        return 1
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
