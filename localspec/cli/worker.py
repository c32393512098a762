"""`localspec worker`: serve this machine's CPU (or a GPU) to another localspec over ggml's RPC
protocol, so a target too large for one machine runs its layers here (`--rpc` there)."""

from __future__ import annotations

import os
import signal
import socket
import threading

import typer

EXAMPLES = [
    "localspec worker                                  # loopback only, port 50052",
    "localspec worker --host 0.0.0.0 --allow-network   # reachable from the LAN (trusted networks only)",
    "localspec generate --rpc 192.168.1.20:50052 -ngl -1 -p 'def fib(n):'   # on the main machine",
]

_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def register(app: typer.Typer) -> None:
    """Attach the command."""
    app.command(epilog="Examples:\n\n" + "\n\n".join(EXAMPLES))(worker)


def worker(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (default: loopback only)."),
    port: int = typer.Option(50052, "--port", "-p", min=1, max=65535, help="TCP port."),
    threads: int | None = typer.Option(None, "--threads", "-t", help="CPU threads (default: physical cores)."),
    device: str = typer.Option("cpu", "--device", help="What to serve: cpu or cuda:N."),
    allow_network: bool = typer.Option(False, "--allow-network",
                                       help="Allow a non-loopback --host (the protocol has no authentication)."),
    cache_dir: str | None = typer.Option(None, "--cache-dir", help="Keep received weights here (faster reloads)."),
) -> None:
    """Serve this machine to a localspec on another machine (llama.cpp's rpc-server)."""
    if host not in _LOOPBACK and not allow_network:
        raise typer.BadParameter(
            f"{host} is reachable from other machines and the RPC protocol has no authentication; "
            "add --allow-network to do it anyway (trusted networks only)", param_hint="--host")
    from localspec.engine.llama import rpc
    from localspec.engine.llama.backend import _physical_cores

    try:  # a clear error now instead of the server's own "Failed to create server socket"
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise typer.BadParameter(f"cannot listen on {host}:{port}: {exc.strerror or exc}", param_hint="--port") from None
    dev = rpc.describe_device(device)
    endpoint = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    n_threads = threads or _physical_cores()
    if host not in _LOOPBACK:
        typer.secho("warning: the RPC protocol is unauthenticated; anyone who reaches this port can run "
                    "computations here. Use it on trusted networks only.", fg="yellow", err=True)
    typer.echo(f"localspec worker on {endpoint}: {dev.name} ({dev.description}), "
               f"{dev.free_bytes / 2**30:.1f} of {dev.total_bytes / 2**30:.1f} GiB free, {n_threads} threads")
    typer.echo(f"use it from the main machine with --rpc {endpoint} -ngl -1; Ctrl-C stops it")
    server = threading.Thread(
        target=rpc.start_worker, args=(endpoint,), daemon=True,
        kwargs={"device": device, "n_threads": n_threads, "cache_dir": cache_dir},
    )
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while server.is_alive() and not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    if not server.is_alive() and not stop.is_set():
        typer.secho("the RPC server stopped (see its messages above)", fg="red", err=True)
        os._exit(1)
    typer.echo("worker stopped")
    # the server thread is blocked inside libggml's accept(): end the process, not the thread
    os._exit(0)
