"""ggml's RPC backend: a target's layers on other machines.

`localspec worker` on each machine serves its CPU (or GPU) to one client over TCP
(`start_worker`); the main process registers the workers (`connect`), after which they are
devices like a GPU: `-ngl` layers of the target go to them, the drafter stays local.

Why the probe: libggml aborts the whole process when a worker cannot be reached, speaks
another protocol version, or dies during a call (every failed send or receive of its RPC
client is a GGML_ABORT; no call hands a failure back). `probe` asks each worker over a socket
of its own before every load (HELLO, device count, memory), so the first two are clear errors
before llama.cpp connects.

A worker that dies while a model is loaded, between two forwards: `attach` finds libggml's own
socket to each worker of the model (by its peer address among this process's file descriptors),
and `Watch.check`, run before every forward, polls those sockets without blocking (one poll(2),
about a microsecond): a hung-up connection while no call is in flight means the worker is gone,
and the forward ends with `WorkerLostError` before llama.cpp is called. The dead socket is then
replaced (dup2) by one end of a local socket pair whose other end swallows what libggml still
writes, so the model can be freed (its buffers send FREE_BUFFER, which expects no reply) and
loaded again once the worker is back. TCP keepalive on those sockets makes a worker machine
that vanished (power, network) show up the same way after ~30 s of silence.

A worker that dies *during* a call (a forward, a free): libggml's thread for that worker calls
the abort callback instead of returning a failure. The calls that may talk to workers run
`guarded`, on a thread of their own: while one runs, the callback parks the failed libggml
thread forever (so abort() is never reached) and wakes the caller, which raises `Stuck`; the
backend turns that into `WorkerLostError`. The call never returns, so the model it ran on is
*stuck*: never used or freed again, only abandoned (`Watch.abandon`: its memory in this process
stays allocated; the surviving workers' connections get their stand-ins, so those workers see
the client go; the next load names the workers anew, `ggml_endpoint`, since libggml would hand
it the old connections). Still an abort, explained by `install_abort_message`: a failure
outside a guarded call, or on the calling thread itself (libggml opening a connection: the
registration right after the probe, the first call of a load), where parking could leave
libggml's locks held.

The protocol has no authentication: workers belong on trusted networks (loopback by default).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import socket
import stat
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import llama_cpp
from llama_cpp import _ggml

from localspec.engine.numerics import TILED_MM_ENV
from localspec.errors import ModelLoadError, WorkerLostError

log = logging.getLogger(__name__)

PROTO_VERSION = (7, 0, 0)
"""RPC_PROTO_{MAJOR,MINOR,PATCH}_VERSION of ggml-rpc.h in the llama.cpp this binding vendors."""
_CMD_HELLO, _CMD_DEVICE_COUNT, _CMD_GET_DEVICE_MEMORY = 14, 15, 11
_CONN_CAPS = 24
"""RPC_CONN_CAPS_SIZE (transport.h): the HELLO request's payload."""
DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "IGPU", 3: "ACCEL", 4: "META"}

_lib = _ggml.libggml
_lib.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
_lib.ggml_backend_reg_by_name.restype = ctypes.c_void_p
_lib.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_lib.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
_lib.ggml_backend_register.argtypes = [ctypes.c_void_p]
_lib.ggml_backend_register.restype = None
_lib.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
_lib.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
_lib.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_lib.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
_lib.ggml_backend_dev_count.argtypes = []
_lib.ggml_backend_dev_count.restype = ctypes.c_size_t
_lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
_lib.ggml_backend_dev_get.restype = ctypes.c_void_p
_lib.ggml_backend_dev_by_name.argtypes = [ctypes.c_char_p]
_lib.ggml_backend_dev_by_name.restype = ctypes.c_void_p
_lib.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
_lib.ggml_backend_dev_name.restype = ctypes.c_char_p
_lib.ggml_backend_dev_description.argtypes = [ctypes.c_void_p]
_lib.ggml_backend_dev_description.restype = ctypes.c_char_p
_lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
_lib.ggml_backend_dev_type.restype = ctypes.c_int
_lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
_lib.ggml_backend_dev_memory.restype = None

_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_START_SERVER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_void_p))
_ABORT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)

_lock = threading.Lock()


@dataclass(frozen=True)
class Device:
    """One ggml device of this process."""

    name: str
    description: str
    kind: str
    """CPU, GPU, IGPU, ACCEL or META."""
    free_bytes: int
    total_bytes: int

    @property
    def is_rpc(self) -> bool:
        """A device served by a worker (its name is RPC<n>)."""
        return self.name.startswith("RPC")


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker said in answer to `probe`."""

    endpoint: str
    version: tuple[int, int, int]
    devices: int
    free_bytes: int
    total_bytes: int


_connected: dict[str, list[int]] = {}
"""endpoint -> its registered device handles (registration lasts for the process)."""
_infos: dict[tuple[str, int], WorkerInfo] = {}
"""(host, port) -> what its last probe said (memory for `devices()` without asking libggml,
whose query opens a connection of its own and aborts when the worker is gone)."""
_generation: dict[tuple[str, int], int] = {}
"""(host, port) -> how many times a model on it was abandoned (see `Watch.abandon`): libggml
keeps one connection per endpoint *string* for as long as anything uses it, and an abandoned
model uses its old one forever, so a new load names the worker anew ("host:0port": libggml
reads the port with stoi)."""


def ggml_endpoint(endpoint: str) -> str:
    """The name libggml knows the worker at `endpoint` by (the endpoint itself until a model
    on it was abandoned)."""
    host, port = parse_endpoint(endpoint)
    gen = _generation.get((host, port), 0)
    return endpoint if gen == 0 else f"{host}:{'0' * gen}{port}"


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """(host, port) of "host:port" (IPv6 as "[::1]:port"); ValueError when malformed."""
    host, sep, port = endpoint.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"an RPC endpoint is host:port (e.g. 127.0.0.1:50052), got {endpoint!r}")
    return host, int(port)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the worker closed the connection")
        data += chunk
    return data


def _call(sock: socket.socket, cmd: int, payload: bytes, reply_size: int) -> bytes:
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    (size,) = struct.unpack("<Q", _recv_exact(sock, 8))
    if size != reply_size:
        raise ConnectionError(f"unexpected reply of {size} bytes (expected {reply_size})")
    return _recv_exact(sock, size)


def probe(endpoint: str, timeout_s: float = 5.0) -> WorkerInfo:
    """Ask the worker at `endpoint` for its protocol version, devices and memory, on a
    connection of its own; ModelLoadError with a next step when it cannot answer or speaks
    another protocol version (another llama.cpp build)."""
    host, port = parse_endpoint(endpoint)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            hello = _call(sock, _CMD_HELLO, bytes(_CONN_CAPS), 4 + _CONN_CAPS)
            version = (hello[0], hello[1], hello[2])
            if version[0] != PROTO_VERSION[0] or version[1] > PROTO_VERSION[1]:
                raise ModelLoadError(
                    f"the RPC worker at {endpoint} speaks protocol {'.'.join(map(str, version))}, this "
                    f"localspec {'.'.join(map(str, PROTO_VERSION))}: client and workers must come from the "
                    "same llama.cpp build; run `localspec worker` from this installation on that machine"
                )
            (count,) = struct.unpack("<I", _call(sock, _CMD_DEVICE_COUNT, b"", 4))
            free, total = struct.unpack("<QQ", _call(sock, _CMD_GET_DEVICE_MEMORY, struct.pack("<I", 0), 16))
    except TimeoutError:
        raise ModelLoadError(
            f"the RPC worker at {endpoint} did not answer within {timeout_s:g} s; it may be serving another "
            "client (a worker serves one at a time) or be blocked by a firewall"
        ) from None
    except OSError as exc:
        raise ModelLoadError(
            f"cannot reach the RPC worker at {endpoint} ({exc.strerror or exc}); start it there with "
            f"`localspec worker --host <address> --port {port}` and check the address"
        ) from None
    return WorkerInfo(endpoint, version, count, free, total)


def _rpc_reg() -> int:
    reg = _lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise ModelLoadError(
            "this llama.cpp build has no RPC backend; rebuild it with RPC: "
            "`make setup` (its default flags include -DGGML_RPC=ON; add it to a custom LLAMA_CMAKE_ARGS)"
        )
    return int(reg)


def rpc_supported() -> bool:
    """True when this llama.cpp build has the RPC backend."""
    return bool(_lib.ggml_backend_reg_by_name(b"RPC"))


def connect(endpoints: tuple[str, ...]) -> list[int]:
    """Register the workers at `endpoints` and return their device handles, in order, for
    `llama_model_params.devices`. Each worker is probed first, on every load (one that died
    since the last load is a clear error here, not an abort inside llama.cpp), except one a
    loaded model of this process is connected to (a worker serves one client at a time),
    whose connection is checked instead."""
    devices: list[int] = []
    with _lock:
        for endpoint in endpoints:
            link = _links.get(endpoint)
            if link is not None:
                if link.lost is None and (reason := _gone(link.fd)) is not None:
                    _lose(link, reason)
                if link.lost is not None:
                    raise ModelLoadError(
                        f"{_lost_message(endpoint, link.lost)}; close the models that use it first"
                    )
            else:
                _infos[parse_endpoint(endpoint)] = probe(endpoint)
            name = ggml_endpoint(endpoint)
            if name not in _connected:
                info = _infos[parse_endpoint(endpoint)]
                if info.devices == 0:
                    raise ModelLoadError(f"the RPC worker at {endpoint} offers no device")
                add = _ADD_SERVER(_lib.ggml_backend_reg_get_proc_address(_rpc_reg(), b"ggml_backend_rpc_add_server"))
                reg = add(name.encode())
                if not reg:
                    raise ModelLoadError(f"the RPC worker at {endpoint} could not be registered")
                _lib.ggml_backend_register(reg)
                n = int(_lib.ggml_backend_reg_dev_count(reg))
                _connected[name] = [int(_lib.ggml_backend_reg_dev_get(reg, i)) for i in range(n)]
                log.info("RPC worker %s: %d device(s), %.1f GiB free", endpoint, n, info.free_bytes / 2**30)
            devices += _connected[name]
    install_abort_message()
    return devices


def any_connected() -> bool:
    """True once this process registered an RPC worker."""
    return bool(_connected)


def local_gpu_handles() -> list[int]:
    """Device handles of this machine's GPUs (no RPC workers)."""
    out = []
    for i in range(int(_lib.ggml_backend_dev_count())):
        dev = _lib.ggml_backend_dev_get(i)
        name = (_lib.ggml_backend_dev_name(dev) or b"").decode()
        if DEVICE_TYPES.get(int(_lib.ggml_backend_dev_type(dev))) in ("GPU", "IGPU") and not name.startswith("RPC"):
            out.append(int(dev))
    return out


def devices() -> list[Device]:
    """Every ggml device this process has (CPU, GPUs, registered RPC workers). A worker's
    memory is what its last probe said: asking libggml would open a connection of its own
    (aborting the process when the worker is gone, blocking while another client has it)."""
    out = []
    for i in range(int(_lib.ggml_backend_dev_count())):
        dev = _lib.ggml_backend_dev_get(i)
        name = (_lib.ggml_backend_dev_name(dev) or b"").decode()
        description = (_lib.ggml_backend_dev_description(dev) or b"").decode()
        if name.startswith("RPC"):
            try:  # an RPC device's description is its endpoint (as libggml names it)
                info = _infos.get(parse_endpoint(description))
            except ValueError:
                info = None
            free_b, total_b = (info.free_bytes, info.total_bytes) if info else (0, 0)
        else:
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            _lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
            free_b, total_b = free.value, total.value
        out.append(Device(
            name=name, description=description, kind=DEVICE_TYPES.get(int(_lib.ggml_backend_dev_type(dev)), "?"),
            free_bytes=free_b, total_bytes=total_b,
        ))
    return out


def has_local_gpu() -> bool:
    """True when a GPU of this machine is a ggml device. Not llama_supports_gpu_offload(),
    which an RPC-enabled build answers with true on any machine."""
    return any(d.kind in ("GPU", "IGPU") and not d.is_rpc for d in devices())


_abort_callback = None


def install_abort_message() -> None:
    """Make a libggml abort (a worker that died or answered garbage mid-call) explain itself
    before the process ends: libggml cannot hand such an error back to the caller."""
    global _abort_callback
    if _abort_callback is not None:
        return

    @_ABORT_CALLBACK  # type: ignore[untyped-decorator]
    def _on_abort(message: bytes | None) -> None:
        text = (message or b"").decode("utf-8", "replace")
        _park_if_guarded(text)  # returns only when the process must end
        hint = ""
        if "RPC" in text or "rpc" in text:
            workers = f" (one of {', '.join(sorted(_links))})" if _links else ""
            hint = (f"\nlocalspec: an RPC worker{workers} stopped answering during a call llama.cpp cannot "
                    "recover from here (while connecting to it, or outside a generation); this process now ends. "
                    "Restart the worker (`localspec worker` there) and then localspec.")

        import sys

        sys.stderr.write(f"{text}{hint}\n")
        sys.stderr.flush()

    _lib.ggml_set_abort_callback.argtypes = [_ABORT_CALLBACK]
    _lib.ggml_set_abort_callback.restype = ctypes.c_void_p
    _lib.ggml_set_abort_callback(_on_abort)
    _abort_callback = _on_abort


def start_worker(endpoint: str, *, device: str = "cpu", n_threads: int = 1, cache_dir: str | None = None) -> None:
    """Serve `device` ("cpu" or "cuda:N") to RPC clients at `endpoint`; blocks for the
    life of the server (run it in a thread and end the process to stop it)."""
    parse_endpoint(endpoint)
    # the same batch-invariant CPU kernels as a local target in exact numerics
    os.environ.setdefault(TILED_MM_ENV, "0")
    llama_cpp.llama_backend_init()
    start = _START_SERVER(_lib.ggml_backend_reg_get_proc_address(_rpc_reg(), b"ggml_backend_rpc_start_server"))
    dev = _worker_device(device)
    arr = (ctypes.c_void_p * 1)(dev)
    start(endpoint.encode(), cache_dir.encode() if cache_dir else None, n_threads, 1, arr)


def _worker_device(device: str) -> int:
    if device == "cpu":
        name = b"CPU"
    elif device.startswith("cuda:") and device[5:].isdigit():
        name = f"CUDA{device[5:]}".encode()
    else:
        raise ValueError(f"--device is cpu or cuda:N, got {device!r}")
    dev = _lib.ggml_backend_dev_by_name(name)
    if not dev:
        have = ", ".join(d.name for d in devices() if not d.is_rpc)
        raise ModelLoadError(f"this machine has no device {name.decode()} (it has: {have})")
    return int(dev)


def describe_device(device: str) -> Device:
    """The local device a worker would serve."""
    dev = _worker_device(device)
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    _lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    return Device(
        name=(_lib.ggml_backend_dev_name(dev) or b"").decode(),
        description=(_lib.ggml_backend_dev_description(dev) or b"").decode(),
        kind=DEVICE_TYPES.get(int(_lib.ggml_backend_dev_type(dev)), "?"),
        free_bytes=free.value, total_bytes=total.value,
    )


# -- the workers of a loaded model: checked before every forward ---------------------------
_POLL_RDHUP = getattr(select, "POLLRDHUP", 0)
_POLL_GONE = select.POLLHUP | select.POLLERR | _POLL_RDHUP
_POLL_MASK = select.POLLIN | _POLL_GONE
KEEPALIVE = (15, 5, 3)
"""TCP keepalive on libggml's worker sockets: first probe after 15 s of silence, then every
5 s, 3 unanswered mean the connection is dead. A worker machine that vanished without closing
its connections (power, network) is then noticed after ~30 s instead of never; probes are
answered by the worker's kernel, so a busy worker is never taken for a dead one."""


class _Link:
    """libggml's connection to one worker while loaded models use it: the descriptor of its
    socket (libggml's own; never closed here) and, once found gone, why."""

    def __init__(self, endpoint: str, fd: int | None) -> None:
        self.endpoint = endpoint
        self.fd = fd
        """None: not found (the connection is counted, not watched)."""
        self.users = 0
        self.lost: str | None = None
        self.sink: socket.socket | None = None


_links: dict[str, _Link] = {}
"""endpoint -> libggml's connection to it, while a loaded model uses it."""


@contextlib.contextmanager
def _borrowed(fd: int) -> Iterator[socket.socket]:
    """A socket object on libggml's descriptor `fd` that neither closes it nor changes its
    blocking mode (a default socket timeout would make libggml's blocking calls fail)."""
    blocking = os.get_blocking(fd)
    sock = socket.socket(fileno=fd)
    try:
        yield sock
    finally:
        sock.detach()
        if os.get_blocking(fd) != blocking:
            os.set_blocking(fd, blocking)


def _sockets_to(endpoint: str) -> list[int]:
    """This process's TCP sockets connected to `endpoint` (libggml resolves the host like
    gethostbyname: IPv4)."""
    host, port = parse_endpoint(endpoint)
    try:
        addr = socket.gethostbyname(host)
    except OSError:
        return []
    fd_dir = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    out = []
    for name in os.listdir(fd_dir):
        fd = int(name)
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            with _borrowed(fd) as sock:
                if sock.family == socket.AF_INET and sock.type == socket.SOCK_STREAM and sock.getpeername() == (addr, port):
                    out.append(fd)
        except OSError:  # closed meanwhile (the listing's own descriptor), or not connected
            continue
    return out


def _keepalive(fd: int) -> None:
    with _borrowed(fd) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for opt, value in zip(("TCP_KEEPIDLE", "TCP_KEEPINTVL", "TCP_KEEPCNT"), KEEPALIVE):
            if hasattr(socket, opt):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)


def _gone(fd: int | None) -> str | None:
    """Why the connection on `fd` is dead (the worker closed it, reset it, or stopped
    answering keepalive), or None while it is fine (or not watched). Only meaningful while no
    call is in flight: then the worker has nothing to send, and anything readable is the end."""
    if fd is None:
        return None
    poller = select.poll()
    poller.register(fd, _POLL_MASK)
    events = poller.poll(0)
    if not events:
        return None
    revents = events[0][1]
    with _borrowed(fd) as sock:
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            return os.strerror(err).lower()
        if revents & _POLL_GONE:
            return "it closed the connection"
        try:  # readable: the end of the stream, or (not expected between calls) data
            data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        except OSError as exc:
            return (exc.strerror or str(exc)).lower()
    return None if data else "it closed the connection"


def _drain(sock: socket.socket) -> None:
    with sock:
        try:
            while sock.recv(1 << 16):
                pass
        except OSError:
            pass


def _lose(link: _Link, reason: str, *, quiet: bool = False) -> None:
    """Mark `link`'s worker gone and put a harmless stand-in under libggml's descriptor: one
    end of a local socket pair whose other end swallows what libggml still writes (freeing the
    model's buffers sends FREE_BUFFER, which needs no reply; on the dead socket the send would
    fail and abort). libggml closes the stand-in with the connection once the model is freed."""
    with _fence_lock:
        if link.lost is not None or link.fd is None:
            return
        link.lost = reason
        ours, swallow = socket.socketpair()
        os.dup2(ours.fileno(), link.fd, inheritable=False)
        ours.close()
        link.sink = swallow
        threading.Thread(target=_drain, args=(swallow,), name=f"rpc-sink {link.endpoint}", daemon=True).start()
    if not quiet:
        log.error("%s", _lost_message(link.endpoint, reason))


_fence_lock = threading.Lock()


def _lost_message(endpoint: str, reason: str) -> str:
    host, port = parse_endpoint(endpoint)
    return (f"the RPC worker at {endpoint} is gone ({reason}), and with it the model layers it held; "
            f"restart it on {host} (`localspec worker --port {port}`, with the --host it had), then load "
            "the model again (restart localspec, or reload the pair)")


class Watch:
    """The workers of one loaded model: `check()` before each of its forwards."""

    def __init__(self, links: list[_Link]) -> None:
        self._links = links
        self.stuck: WorkerLostError | None = None
        """Set when a call on the model never came back (`lost_mid_call`): it can only be abandoned."""
        self._poll = select.poll()
        for link in links:
            if link.fd is not None:
                self._poll.register(link.fd, _POLL_MASK)

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The watched workers."""
        return tuple(link.endpoint for link in self._links)

    def check(self) -> None:
        """WorkerLostError naming the first worker found gone (now, or earlier). One poll(2)
        of every worker's socket while they are fine; call it only between forwards."""
        if self.stuck is not None:
            raise WorkerLostError(str(self.stuck), self.stuck.endpoint)
        for link in self._links:
            if link.lost is not None:
                raise WorkerLostError(_lost_message(link.endpoint, link.lost), link.endpoint)
        if not self._poll.poll(0):
            return
        for link in self._links:
            reason = _gone(link.fd)
            if reason is not None:
                _lose(link, reason)
                raise WorkerLostError(_lost_message(link.endpoint, reason), link.endpoint)

    def lost_mid_call(self) -> WorkerLostError:
        """A guarded call on this model failed mid-way (`Stuck`): the worker(s) found gone are
        marked so, and the model is stuck for good (its call never returns, so nothing of it
        may be used or freed again: `abandon` it). Returns the error to raise."""
        if self.stuck is None:
            dead = [(link, reason) for link in self._links if (reason := _gone(link.fd)) is not None]
            if not dead:  # an answer libggml could not read, not a closed connection
                dead = [(link, "it answered a call with something llama.cpp could not read")
                        for link in self._links]
            for link, reason in dead:
                _lose(link, reason)
            link, reason = dead[0]
            self.stuck = WorkerLostError(
                _lost_message(link.endpoint, f"{reason}, during a forward"), link.endpoint)
        return self.stuck

    def abandon(self) -> None:
        """Give up a stuck model without freeing it (its memory here stays allocated): every
        worker connection of it gets its stand-in, so the workers still alive see the client go
        and serve the next one, and the next load names the workers anew (`ggml_endpoint`)."""
        for link in self._links:
            _lose(link, "its model was abandoned after a failed call", quiet=True)
        abandon_endpoints(tuple(link.endpoint for link in self._links))
        self.release()

    def before_free(self) -> None:
        """Make freeing the model safe: a worker found gone now gets its stand-in first."""
        for link in self._links:
            if link.lost is None and (reason := _gone(link.fd)) is not None:
                _lose(link, reason)

    def release(self) -> None:
        """The model was freed: forget the links no other model uses (idempotent)."""
        with _lock:
            for link in self._links:
                link.users -= 1
                if link.users <= 0 and _links.get(link.endpoint) is link:
                    del _links[link.endpoint]
            self._links = []


def attach(endpoints: tuple[str, ...]) -> Watch:
    """After a model loaded onto `endpoints`: find libggml's connection to each worker (its
    socket, by peer address) and watch it. A connection that cannot be told apart is counted
    but not watched, with a warning (a worker that stops there ends the process)."""
    links = []
    with _lock:
        for endpoint in dict.fromkeys(endpoints):
            link = _links.get(endpoint)
            if link is None:
                fds = _sockets_to(endpoint)
                if len(fds) != 1:
                    log.warning("cannot tell which of %d connections is llama.cpp's to the RPC worker at %s: "
                                "if it stops during a generation, the process ends", len(fds), endpoint)
                link = _Link(endpoint, fds[0] if len(fds) == 1 else None)
                if link.fd is not None:
                    try:
                        _keepalive(link.fd)
                    except OSError as exc:
                        log.debug("no TCP keepalive on the connection to %s: %s", endpoint, exc)
                _links[endpoint] = link
            link.users += 1
            links.append(link)
    return Watch(links)


def gone(endpoint: str) -> str | None:
    """Why the worker at `endpoint`, which a loaded model uses, is gone, or None while its
    connection is fine; KeyError when no loaded model uses it. Does not mark it lost."""
    link = _links[endpoint]
    return link.lost if link.lost is not None else _gone(link.fd)


def abandon_endpoints(endpoints: tuple[str, ...]) -> None:
    """The next load on `endpoints` uses fresh libggml connections (see `_generation`); any
    connection of this process to them that is still open gets a stand-in, so that the workers
    see their client go."""
    with _lock:
        for endpoint in dict.fromkeys(endpoints):
            key = parse_endpoint(endpoint)
            for fd in _sockets_to(endpoint):
                _lose(_Link(endpoint, fd), "abandoned", quiet=True)
            _generation[key] = _generation.get(key, 0) + 1


# -- calls a worker may fail mid-way ---------------------------------------------------------
RPC_FAILURE = "Remote RPC server crashed or returned malformed response"
"""libggml's RPC client aborts with this (RPC_STATUS_ASSERT) when a call to a worker fails:
a send or receive on a connection the worker closed, or a reply of the wrong size."""

T = TypeVar("T")


class Stuck(Exception):
    """A guarded call will never return: a worker failed it mid-way, and the libggml thread
    that talked to that worker was parked instead of ending the process."""


class _CallThread:
    """The thread guarded calls run on, so that the caller can come back when one of them
    never will (its thread stays blocked inside libllama for the life of the process)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._job: tuple[Callable[..., Any], tuple[Any, ...]] | None = None
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None
        self.failed = False
        """Set by the abort callback (from the failed libggml thread)."""
        self.thread = threading.Thread(target=self._loop, name="localspec-rpc-calls", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._job is not None)
                assert self._job is not None
                fn, args = self._job
                self._job = None
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the caller
                error = exc
            with self._cv:
                self._result, self._error, self._done = result, error, True
                self._cv.notify_all()

    def call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._cv:
            self._done, self._error = False, None
            self._job = (fn, args)
            self._cv.notify_all()
            self._cv.wait_for(lambda: self._done or self.failed)
            if not self._done:
                raise Stuck()
            if self._error is not None:
                raise self._error
            return self._result  # type: ignore[no-any-return]

    def fail(self) -> None:
        with self._cv:
            self.failed = True
            self._cv.notify_all()


_calls: _CallThread | None = None
_guarding: _CallThread | None = None
"""The call thread while a guarded call runs on it (what the abort callback unblocks)."""
_call_lock = threading.Lock()
_parked = threading.Lock()
_parked.acquire()  # never released: a failed libggml thread waits on it for the life of the process


def guarded(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, a libllama call on a model with layers on RPC workers, run so that a worker
    failing it mid-way raises `Stuck` here instead of aborting the process: libggml's thread
    for that worker calls the abort callback, which parks it (forever) and wakes this caller.
    The call itself never returns, and what it used (the model, its context) must be
    abandoned, never freed. About 70 µs per call (a thread handoff)."""
    global _calls, _guarding
    install_abort_message()
    with _call_lock:
        calls = _calls if _calls is not None else _CallThread()
        _calls = _guarding = calls
        try:
            return calls.call(fn, args)
        except Stuck:
            _calls = None  # its thread is stuck inside libllama: the next call gets a new one
            raise
        finally:
            _guarding = None


def _park_if_guarded(text: str) -> None:
    """From the abort callback: when a guarded call is running and libggml's thread for a
    worker failed it (RPC_FAILURE, on a thread libggml started, not a caller's thread that may
    hold libggml's locks), wake the caller and block this thread forever; return otherwise
    (the process then ends)."""
    calls = _guarding
    if calls is None or RPC_FAILURE not in text:
        return
    if type(threading.current_thread()).__name__ != "_DummyThread":  # a Python thread: not libggml's own
        return
    calls.fail()
    _parked.acquire()
