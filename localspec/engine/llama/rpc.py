"""ggml's RPC backend: a target's layers on other machines.

`localspec worker` on each machine serves its CPU (or GPU) to one client over TCP
(`start_worker`); the main process registers the workers (`connect`), after which they are
devices like a GPU: `-ngl` layers of the target go to them, the drafter stays local.

Why the probe: libggml aborts the whole process when a worker cannot be reached, speaks
another protocol version, or dies during a call. `probe` asks each worker over a socket of
its own first (HELLO, device count, memory), so the first two are clear errors before
anything is registered; a worker that dies mid-generation still ends the process, with the
message set by `install_abort_message`.

The protocol has no authentication: workers belong on trusted networks (loopback by default).
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import struct
import threading
from dataclasses import dataclass

import llama_cpp
from llama_cpp import _ggml

from localspec.engine.numerics import TILED_MM_ENV
from localspec.errors import ModelLoadError

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
_connected: dict[str, list[int]] = {}
"""endpoint -> its registered device handles (registration lasts for the process)."""


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
    """Register the workers at `endpoints` (each probed first) and return their device
    handles, in order, for `llama_model_params.devices`."""
    devices: list[int] = []
    with _lock:
        for endpoint in endpoints:
            if endpoint not in _connected:
                info = probe(endpoint)
                if info.devices == 0:
                    raise ModelLoadError(f"the RPC worker at {endpoint} offers no device")
                add = _ADD_SERVER(_lib.ggml_backend_reg_get_proc_address(_rpc_reg(), b"ggml_backend_rpc_add_server"))
                reg = add(endpoint.encode())
                if not reg:
                    raise ModelLoadError(f"the RPC worker at {endpoint} could not be registered")
                _lib.ggml_backend_register(reg)
                n = int(_lib.ggml_backend_reg_dev_count(reg))
                _connected[endpoint] = [int(_lib.ggml_backend_reg_dev_get(reg, i)) for i in range(n)]
                log.info("RPC worker %s: %d device(s), %.1f GiB free", endpoint, n, info.free_bytes / 2**30)
            devices += _connected[endpoint]
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
    """Every ggml device this process has (CPU, GPUs, registered RPC workers)."""
    out = []
    for i in range(int(_lib.ggml_backend_dev_count())):
        dev = _lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        _lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(Device(
            name=(_lib.ggml_backend_dev_name(dev) or b"").decode(),
            description=(_lib.ggml_backend_dev_description(dev) or b"").decode(),
            kind=DEVICE_TYPES.get(int(_lib.ggml_backend_dev_type(dev)), "?"),
            free_bytes=free.value, total_bytes=total.value,
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
        hint = ""
        if "RPC" in text or "rpc" in text:
            hint = ("\nlocalspec: an RPC worker stopped answering during a model call; llama.cpp cannot recover "
                    "from that inside this process, which now ends. Restart the worker(s) "
                    "(`localspec worker`) and then localspec.")
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
