"""`LlamaCppBackend`: one GGUF on llama.cpp through llama-cpp-python's low-level API.

It owns the model, the context, one reusable `llama_batch`, and the record of which tokens
the cache holds, so rollback never leaks into the loop.

Rollback by memory kind (`memory_kind`, from the model): a KV cache drops a suffix with
`llama_memory_seq_rm`. A recurrent or hybrid model's state has no per-position entries;
where llama.cpp keeps per-token snapshots of it (`n_rs_seq`: Qwen3.5, Nemotron-H, LFM2,
GLM-5-Next, ...), `llama_memory_seq_rm` steps back up to that many tokens of the last
decode, once per decode. Elsewhere the recurrent part of the state is saved before every verify batch
(`llama_state_seq_get_data_ext`, PARTIAL_ONLY) and a rejection restores it and decodes the
kept rows again. Any other drop is re-evaluation: clear the memory, decode the kept tokens.
"""

from __future__ import annotations

import copy
import ctypes
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt

from localspec.engine.llama import rpc
from localspec.engine.numerics import TILED_MM_ENV, NumericsPlan, plan_numerics
from localspec.errors import ContextOverflowError, DecodeError, LocalSpecError, ModelLoadError, ModelNotFoundError
from localspec.hardware import cpu_has_amx
from localspec.types import ModelSpec

_PARTIAL_ONLY = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: the recurrent (or SWA) part of a sequence's state

RS_SNAPSHOTS = 8
"""Recurrent-state snapshots kept per sequence for hybrid/recurrent rollback (`n_rs_seq`):
a rejection of up to this many draft tokens rolls back natively; each costs one copy of
the recurrent state in memory."""

log = logging.getLogger(__name__)

_init_lock = threading.Lock()
_initialized = False


@llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # llama.cpp is chatty at load; route it to logging (debug unless it is an error).
    msg = text.decode("utf-8", "replace").rstrip()
    if msg:
        log.log(logging.WARNING if level == 4 else logging.DEBUG, "%s", msg)  # 4 = GGML_LOG_LEVEL_ERROR


def _ensure_backend() -> None:
    global _initialized
    with _init_lock:
        if not _initialized:
            # read once per process by ggml at its first matmul: exact numerics need the
            # tiled K-quant matmul off (it computes batches of 8+ rows in another order)
            os.environ.setdefault(TILED_MM_ENV, "0")
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _initialized = True


def _physical_cores() -> int:
    try:
        import psutil

        return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)
    except Exception:  # psutil missing or unsupported platform
        return max(1, os.cpu_count() or 1)


def llama_cpp_version() -> str:
    """Version of the llama-cpp-python binding."""
    return str(getattr(llama_cpp, "__version__", "unknown"))


def build_features() -> frozenset[str]:
    """CPU-backend features this llama.cpp build compiled in (`AVX2`, `REPACK`, `LLAMAFILE`,
    `AMX_INT8`, ...), from llama_print_system_info()."""
    info = llama_cpp.llama_print_system_info()
    text = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    return frozenset(m.group(1) for m in re.finditer(r"([A-Z0-9_]+) = 1", text))


def build_has_amx() -> bool:
    """True when this llama.cpp build compiled its AMX kernels (a native build on an AMX CPU)."""
    return "AMX_INT8" in build_features()


def use_extra_buffers(numerics: str) -> bool:
    """Whether a CPU model in mode `numerics` gets llama.cpp's repacked weight buffers here."""
    return numerics_plan(numerics, on_gpu=False, flash_attn=None).use_extra_bufts


def numerics_plan(numerics: str, *, on_gpu: bool, flash_attn: bool | None) -> NumericsPlan:
    """The llama.cpp settings for `numerics` on this build, CPU and environment."""
    _ensure_backend()  # sets the tiled-matmul switch before anything reads it
    return plan_numerics(
        numerics, on_gpu=on_gpu, flash_attn=flash_attn, build=build_features(), cpu_amx=cpu_has_amx(),
        tiled_env=os.environ.get(TILED_MM_ENV),
    )


def gpu_offload_supported() -> bool:
    """True when this machine has a GPU this llama.cpp build can offload layers to. Not
    llama_supports_gpu_offload(): a build with the RPC backend says true without a GPU."""
    _ensure_backend()
    return rpc.has_local_gpu()


def _ext() -> Any:
    """llama-cpp-python's bindings of libllama's nextn functions (a private module of the binding)."""
    try:
        from llama_cpp import llama_cpp_ext
    except ImportError as e:  # a binding without them
        raise ModelLoadError(
            f"this llama-cpp-python ({llama_cpp_version()}) does not bind the nextn (MTP) functions; "
            "install llama-cpp-python 0.3.36"
        ) from e
    return llama_cpp_ext


def _nextn_rows(ctx: Any, n: int, n_embd: int) -> npt.NDArray[np.float32]:
    """The last decode's hidden rows [n, n_embd] (a view into llama.cpp's buffer)."""
    ptr = _ext().llama_get_embeddings_nextn(ctx)
    if not ptr:
        raise DecodeError("llama.cpp returned no nextn hidden states for the target")
    return np.ctypeslib.as_array(ptr, shape=(n, n_embd))


def _synced(fn: Callable[..., Any], ctx: Any, *args: Any) -> Any:
    """`fn(*args)`, then wait for `ctx`'s work (over RPC llama_decode returns before the
    workers are done; reading the logits would wait outside the guarded call)."""
    rc = fn(*args)
    llama_cpp.llama_synchronize(ctx)
    return rc


class LlamaCppBackend:
    """A GGUF model with its own context, batch and token record of sequence 0.

    With `n_seq` > 1 the context holds that many sequences, each with its own KV stream of
    `spec.n_ctx` positions (non-unified: a sequence's attention runs over its own cells only,
    as if it were alone, so exact numerics hold per sequence); `sequence(i)` is the view of
    sequence i (this object is sequence 0), and `decode_many` evaluates rows of several
    sequences in one `llama_decode`.
    """

    def __init__(
        self, spec: ModelSpec, *, n_outputs_max: int = 64, rs_snapshots: int = RS_SNAPSHOTS, checkpoint: bool = True,
        n_seq: int = 1, kv_unified: bool | None = None,
    ) -> None:
        """`kv_unified`: share one KV cache between the sequences (None: in fast numerics only;
        False for a model decoded one sequence per call, whose rows then never depend on the
        other sequences, whatever its numerics)."""
        if not os.path.isfile(spec.path):
            raise ModelNotFoundError(
                f"model file not found: {spec.path}. See `localspec models list`, or "
                "`localspec models install-default` for the offline pair."
            )
        _ensure_backend()
        self.spec = spec
        self.name = spec.display_name
        self._watch: rpc.Watch | None = None
        self._stuck = False
        """A call on this model's RPC workers never came back: the model can only be abandoned."""
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = spec.n_gpu_layers if spec.n_gpu_layers >= 0 else 999
        self._devices = self._offload_devices(spec)
        if self._devices is not None:
            mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        # RPC workers run localspec's CPU backend (`localspec worker`): CPU numerics
        on_gpu = spec.n_gpu_layers != 0 and not spec.rpc and gpu_offload_supported()
        plan = numerics_plan(spec.numerics, on_gpu=on_gpu, flash_attn=spec.flash_attn)
        if plan.mode != spec.numerics:
            log.warning("%s: exact numerics cannot be ensured here (%s); running as 'fast': greedy "
                        "output may part from plain decoding where batched and one-row logits disagree",
                        spec.display_name, "; ".join(plan.reasons))
        self.numerics = plan.mode
        """The numerics mode that really runs (see engine/numerics.py)."""
        mparams.use_extra_bufts = plan.use_extra_bufts
        mparams.load_mtp = True  # a model's nextn (MTP) layers, if any, can then draft (engine/llama/mtp.py)
        self._model = self.native(llama_cpp.llama_model_load_from_file, spec.path.encode(), mparams)
        if not self._model:
            raise ModelLoadError(
                f"llama.cpp could not load {spec.path}; the file may be truncated or not a GGUF "
                "model. Re-download it, or check `localspec models list`."
            )
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self.n_embd = int(llama_cpp.llama_model_n_embd(self._model))
        self.n_layer_nextn = int(llama_cpp.llama_model_n_layer_nextn(self._model))
        """The model's MTP (nextn) layers: > 0 means it can draft for itself."""
        self.memory_kind = (
            "recurrent" if llama_cpp.llama_model_is_recurrent(self._model)
            else "hybrid" if llama_cpp.llama_model_is_hybrid(self._model) else "kv"
        )
        """`kv` (attention only), `hybrid` (attention + recurrent layers) or `recurrent`."""
        n_threads = spec.n_threads or _physical_cores()
        cparams = llama_cpp.llama_context_default_params()
        self.n_seq = max(1, n_seq)
        cparams.n_ctx = spec.n_ctx * self.n_seq
        cparams.n_batch = spec.n_batch
        cparams.n_ubatch = spec.n_batch
        cparams.n_seq_max = self.n_seq
        # several sequences: exact numerics give each its own KV stream (its attention sums run
        # over its own cells, as alone), at the price of llama.cpp splitting a batch into
        # ubatches of equal rows per consecutive sequence ids; fast numerics share one unified
        # cache (one ubatch per batch, but a sequence's attention sums then group its cells
        # among the others', so its logits can change in the last bits with the batch)
        self.kv_unified = self.n_seq > 1 and (self.numerics == "fast" if kv_unified is None else kv_unified)
        """One KV cache shared by the sequences (else one stream each; see `sequence`)."""
        cparams.kv_unified = self.kv_unified
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.no_perf = True
        if plan.flash_attn is not None:
            cparams.flash_attn_type = (
                llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if plan.flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
            )
        cparams.op_offload = plan.op_offload
        if self.memory_kind != "kv":
            cparams.n_rs_seq = rs_snapshots  # llama.cpp clamps it to 0 where the arch has none
        self._cparams = cparams
        self._ctx = self.native(llama_cpp.llama_init_from_model, self._model, cparams)
        if not self._ctx:
            self.native(llama_cpp.llama_model_free, self._model)
            raise ModelLoadError(
                f"llama.cpp could not create a context of {spec.n_ctx} tokens for {self.name}; "
                "try a smaller context (-c) or fewer GPU layers (-ngl)."
            )
        self._watch = rpc.attach(spec.rpc) if spec.rpc else None
        """libggml's connections to this model's RPC workers, checked before every forward."""
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx)) // self.n_seq
        """Positions of one sequence."""
        self.seq_id = 0
        self._owner = True
        """This object frees the model (views from `sequence()` do not)."""
        self._views: dict[int, LlamaCppBackend] = {0: self}
        self.n_rs_seq = int(llama_cpp.llama_n_rs_seq(self._ctx)) if self.memory_kind != "kv" else 0
        """How many tokens of its last decode a recurrent/hybrid model can step back natively."""
        self._last_decode_n = 0
        self._rollback_pending = False
        self._checkpoint = checkpoint and self.memory_kind != "kv" and self.n_rs_seq == 0
        """Save the recurrent state before each verify batch (where llama.cpp keeps no snapshots)."""
        self._snap = (ctypes.c_uint8 * 0)()
        self._snap_size = 0
        self._snap_pos: int | None = None
        self.num_reevaluated = 0
        """Tokens decoded again because the memory could not drop a suffix (recurrent fallback)."""
        self.hidden: npt.NDArray[np.float32] | None = None
        """[n_ctx, n_embd] the hidden state (nextn input) of every position, once `keep_hidden()`."""
        self.n_batch = spec.n_batch
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self._pieces: dict[int, bytes] = {}
        self._piece_buf = ctypes.create_string_buffer(256)
        self.tokens: list[int] = []
        self.t_decode_s = 0.0
        self.decode_hooks: list[Callable[[int, Sequence[int]], None]] = []
        """Called after each successful llama_decode with (first position, its tokens), e.g. to copy
        captured hidden states before the next decode overwrites them (llama/hidden.py)."""
        self.n_threads = n_threads
        self.n_params = int(llama_cpp.llama_model_n_params(self._model))
        self.size_bytes = int(llama_cpp.llama_model_size(self._model))
        self.n_layer = int(llama_cpp.llama_model_n_layer(self._model))
        self._bos = int(llama_cpp.llama_vocab_bos(self._vocab))
        self._eos = int(llama_cpp.llama_vocab_eos(self._vocab))
        self._eog = np.zeros(self.n_vocab, dtype=bool)
        for t in range(self.n_vocab):
            # a numpy lookup table: is_eog runs for every emitted token
            if llama_cpp.llama_vocab_is_eog(self._vocab, t):
                self._eog[t] = True
        tmpl = llama_cpp.llama_model_chat_template(self._model, None)
        self._chat_template = tmpl.decode("utf-8", "replace") if tmpl else None

    @staticmethod
    def _offload_devices(spec: ModelSpec) -> ctypes.Array[ctypes.c_void_p] | None:
        """The NULL-terminated device list for llama_model_params: the RPC workers of `spec`;
        a model without `rpc` in a process that registered workers gets the local GPUs only
        (llama.cpp would otherwise offload to every registered device); None: llama.cpp's default."""
        if spec.rpc:
            handles = rpc.connect(spec.rpc)
        elif rpc.any_connected():
            handles = rpc.local_gpu_handles()
        else:
            return None
        return (ctypes.c_void_p * (len(handles) + 1))(*handles, None)

    # -- RPC workers ----------------------------------------------------------------
    def native(self, fn: Callable[..., Any], *args: Any, sync: Any = None) -> Any:
        """`fn(*args)`, a libllama call on this model (or a context on it). On a model with RPC
        workers it is guarded (`rpc.guarded`): a worker that fails it mid-way ends it with
        WorkerLostError (ModelLoadError while loading) instead of aborting the process, and the
        model is stuck from then on (abandoned at `close`). `sync`: a context to synchronize
        inside the call, so that the work `fn` started is done before it returns."""
        if not self.spec.rpc:
            return fn(*args)
        if self._stuck:
            self.check_workers()
        call = fn if sync is None else partial(_synced, fn, sync)
        try:
            return rpc.guarded(call, *args)
        except rpc.Stuck:
            self._stuck = True
            if self._watch is not None:
                raise self._watch.lost_mid_call() from None
            rpc.abandon_endpoints(self.spec.rpc)
            raise ModelLoadError(
                f"an RPC worker ({', '.join(self.spec.rpc)}) stopped answering while {self.name} loaded; "
                "restart `localspec worker` there and load the model again"
            ) from None

    @property
    def stuck(self) -> bool:
        """A call on this model's RPC workers failed mid-way: nothing of it may run or be freed."""
        return self._stuck

    def check_workers(self) -> None:
        """WorkerLostError when an RPC worker holding layers of this model is gone (one
        non-blocking poll of libggml's connections; nothing without workers). Every forward on
        this model's weights runs it first: a worker that stopped between forwards then ends
        the generation with that error instead of aborting the process inside llama.cpp."""
        if self._watch is not None:
            self._watch.check()

    def before_free(self) -> None:
        """Call before freeing a context on this model: a worker found gone gets a stand-in
        connection first, so that freeing its buffers cannot abort the process."""
        if self._watch is not None:
            self._watch.before_free()

    # -- KV cache -------------------------------------------------------------------
    @property
    def n_past(self) -> int:
        """Positions held by the KV cache."""
        return len(self.tokens)

    def decode(self, tokens: Sequence[int], all_logits: bool = False) -> npt.NDArray[np.float32]:
        """Evaluate `tokens` at positions n_past..; logits [len(tokens), V] if `all_logits`
        (at most n_batch tokens), else [1, V] for the last token. A zero-copy view into
        llama.cpp's buffer, overwritten by the next decode."""
        n = len(tokens)
        if n == 0:
            raise ValueError("decode needs at least one token")
        if all_logits and n > self.n_batch:
            raise ValueError(f"all_logits needs at most n_batch={self.n_batch} tokens, got {n}")
        self._before_decode(n, all_logits)
        batch = self._batch
        n_out = 0
        for start in range(0, n, self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            last_chunk = start + self.n_batch >= n
            pos0 = self.n_past + start
            batch.n_tokens = self._fill(batch, 0, chunk, pos0, all_logits)
            if last_chunk and not all_logits:
                batch.logits[len(chunk) - 1] = True
            n_out = len(chunk) if all_logits else 1
            if start:
                self.check_workers()  # each chunk of a long prompt is a forward of its own
            t0 = time.perf_counter()
            rc = self.native(llama_cpp.llama_decode, self._ctx, batch, sync=self._ctx)
            if rc == 0 and self.hidden is not None:
                h = _nextn_rows(self._ctx, len(chunk), self.n_embd)
                self.hidden[pos0 : pos0 + len(chunk)] = h
            self.t_decode_s += time.perf_counter() - t0
            self._last_decode_n, self._rollback_pending = len(chunk), False
            if rc != 0:
                # the cache may hold part of the batch now: drop it so `tokens` stays true
                llama_cpp.llama_memory_seq_rm(self._mem, self.seq_id, self.n_past, -1)
                if rc == 1:
                    raise ContextOverflowError(
                        f"{self.name}: no KV cache slot for {len(chunk)} tokens at position {pos0}; "
                        "raise -c/--ctx-size"
                    )
                raise DecodeError(f"{self.name}: llama_decode failed with code {rc}")
            for hook in self.decode_hooks:
                hook(pos0, chunk)
        self.tokens.extend(int(t) for t in tokens)
        ptr = llama_cpp.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))

    def _before_decode(self, n: int, all_logits: bool) -> None:
        """Refuse n more tokens beyond the context, check the RPC workers (before any state
        call: one on a lost worker aborts); on a recurrent model keep the state from before a
        batch that may be rolled back (a verify batch: all_logits)."""
        if self.n_past + n > self.n_ctx:
            raise ContextOverflowError(
                f"{self.name}: {self.n_past + n} tokens exceed the context of {self.n_ctx}; "
                "raise -c/--ctx-size or shorten the prompt"
            )
        self.check_workers()
        if self._checkpoint:
            if all_logits and self.tokens:
                self._save_recurrent()
            else:
                self._snap_pos = None

    def _fill(self, batch: Any, i: int, tokens: Sequence[int], pos0: int, all_logits: bool) -> int:
        """Write this sequence's `tokens` at positions pos0.. into `batch` from row i on;
        returns the next free row."""
        for j, tok in enumerate(tokens):
            batch.token[i + j] = tok
            batch.pos[i + j] = pos0 + j
            batch.n_seq_id[i + j] = 1
            batch.seq_id[i + j][0] = self.seq_id
            batch.logits[i + j] = all_logits
        return i + len(tokens)

    def truncate(self, n_past: int) -> None:
        """Drop positions >= n_past (see the module docstring for recurrent/hybrid models)."""
        if n_past >= len(self.tokens):
            return
        self.check_workers()
        n_past = max(0, n_past)
        back = len(self.tokens) - n_past
        if self.memory_kind != "kv" and n_past > 0:
            # a snapshot exists for the states after each of the last decode's tokens but its
            # last one; llama.cpp does not check that, so step back only within them, once
            native = not self._rollback_pending and back <= self.n_rs_seq and back < self._last_decode_n
            if native and llama_cpp.llama_memory_seq_rm(self._mem, self.seq_id, n_past, -1):
                self._rollback_pending = True
                del self.tokens[n_past:]
                return
            if self._snap_pos is not None and self._snap_pos <= n_past:
                self._restore_recurrent(n_past)
                return
            self._reevaluate(n_past)
            return
        if not llama_cpp.llama_memory_seq_rm(self._mem, self.seq_id, n_past, -1):
            self._reevaluate(n_past)
            return
        del self.tokens[n_past:]

    def _save_recurrent(self) -> None:
        """Copy the recurrent part of the state (position n_past - 1) to host memory."""
        size = self.native(llama_cpp.llama_state_seq_get_size_ext, self._ctx, self.seq_id, _PARTIAL_ONLY)
        if len(self._snap) < size:
            self._snap = (ctypes.c_uint8 * size)()
        self._snap_size = self.native(llama_cpp.llama_state_seq_get_data_ext, self._ctx, self._snap, size, self.seq_id,
                                      _PARTIAL_ONLY)
        self._snap_pos = self.n_past if self._snap_size else None

    def _restore_recurrent(self, n_past: int) -> None:
        """Back to the saved recurrent state, drop the attention rows after it, and decode
        the kept rows since it again (a few rows instead of the whole prefix)."""
        pos = self._snap_pos
        assert pos is not None
        again = self.tokens[pos:n_past]
        self._snap_pos = None
        if self.native(llama_cpp.llama_state_seq_set_data_ext, self._ctx, self._snap, self._snap_size, self.seq_id,
                       _PARTIAL_ONLY) == 0:
            self._reevaluate(n_past)
            return
        if not llama_cpp.llama_memory_seq_rm(self._mem, self.seq_id, pos, -1):
            self._reevaluate(n_past)
            return
        del self.tokens[pos:]
        if again:
            self.num_reevaluated += len(again)
            self.decode(again)

    def _reevaluate(self, n_past: int) -> None:
        """Rebuild the state of tokens[:n_past] from scratch (the memory cannot drop the rest)."""
        keep = self.tokens[:n_past]
        if self.n_seq == 1:
            self.native(llama_cpp.llama_memory_clear, self._mem, True)
        else:  # the other sequences stay
            self.native(llama_cpp.llama_memory_seq_rm, self._mem, self.seq_id, -1, -1)
        self.tokens.clear()
        self._rollback_pending = False
        if keep:
            log.debug("%s: re-evaluating %d tokens to drop %d", self.name, len(keep), n_past)
            self.num_reevaluated += len(keep)
            self.decode(keep)

    # -- several sequences ------------------------------------------------------------
    def sequence(self, i: int) -> LlamaCppBackend:
        """The view of sequence `i` (0 <= i < n_seq): the same model and context, its own
        KV positions, token record and rollback state. Views are made once and kept."""
        if not 0 <= i < self.n_seq:
            raise ValueError(f"sequence {i} out of range: this context holds {self.n_seq}")
        owner = self._views[0]
        view = owner._views.get(i)
        if view is None:
            view = copy.copy(owner)
            view.seq_id, view._owner = i, False
            view.tokens = []
            view.t_decode_s = 0.0
            view.num_reevaluated = 0
            view._last_decode_n, view._rollback_pending = 0, False
            view._snap, view._snap_size, view._snap_pos = (ctypes.c_uint8 * 0)(), 0, None
            view.hidden = None
            view.decode_hooks = []
            owner._views[i] = view
        return view

    def decode_many(self, parts: Sequence[tuple[LlamaCppBackend, Sequence[int], bool]]) -> list[npt.NDArray[np.float32]]:
        """Evaluate each (sequence view, tokens, all_logits) in one `llama_decode` (several when
        the rows exceed n_batch); returns per part its logits rows [len(tokens), V] when
        all_logits, else an empty [0, V] (no row is read: prompt chunks). Views into
        llama.cpp's buffer, valid until the next decode (copies, for the rows of all but the
        last call when the rows exceed n_batch). On failure the parts of the failing
        call are left as before it (when the rows exceed n_batch, parts of earlier calls stay
        evaluated and recorded: every view's `tokens` stays true) and the error names the model."""
        out: list[npt.NDArray[np.float32]] = [np.zeros((0, self.n_vocab), dtype=np.float32)] * len(parts)
        groups: list[list[int]] = [[]]
        rows = 0
        for i, (_, tokens, _) in enumerate(parts):
            if not len(tokens):
                continue
            if len(tokens) > self.n_batch:
                raise ValueError(f"a part of {len(tokens)} rows exceeds n_batch={self.n_batch}")
            if rows + len(tokens) > self.n_batch:
                groups.append([])
                rows = 0
            groups[-1].append(i)
            rows += len(tokens)
        for g, group in enumerate(groups):
            if not group:
                continue
            logits = self._decode_group([parts[i] for i in group])
            # the next call overwrites llama.cpp's logits buffer: keep copies of earlier calls' rows
            last = g == len(groups) - 1
            for i, rows_i in zip(group, logits, strict=True):
                out[i] = rows_i if last else rows_i.copy()
        return out

    def _decode_group(self, parts: Sequence[tuple[LlamaCppBackend, Sequence[int], bool]]) -> list[npt.NDArray[np.float32]]:
        batch = self._batch
        i = 0
        for view, tokens, all_logits in parts:
            if view._views[0] is not self._views[0]:
                raise ValueError("decode_many needs views of this model's context")
            view._before_decode(len(tokens), all_logits)
            i = view._fill(batch, i, tokens, view.n_past, all_logits)
        batch.n_tokens = i
        t0 = time.perf_counter()
        self.check_workers()
        rc = self.native(llama_cpp.llama_decode, self._ctx, batch, sync=self._ctx)
        dt = time.perf_counter() - t0
        for view, tokens, _ in parts:
            view.t_decode_s += dt
            view._last_decode_n, view._rollback_pending = len(tokens), False
            if rc != 0:
                llama_cpp.llama_memory_seq_rm(self._mem, view.seq_id, view.n_past, -1)
        if rc != 0:
            if rc == 1:
                raise ContextOverflowError(f"{self.name}: no KV cache slot for a batch of {i} rows; raise -c/--ctx-size")
            raise DecodeError(f"{self.name}: llama_decode failed with code {rc}")
        n_out = sum(len(t) for _, t, a in parts if a)
        ptr = llama_cpp.llama_get_logits(self._ctx)
        logits = np.ctypeslib.as_array(ptr, shape=(max(n_out, 1), self.n_vocab))
        out: list[npt.NDArray[np.float32]] = []
        row = 0
        for view, tokens, all_logits in parts:
            view.tokens.extend(int(t) for t in tokens)
            if all_logits:
                out.append(logits[row : row + len(tokens)])
                row += len(tokens)
            else:
                out.append(logits[:0])
        return out

    def keep_hidden(self) -> None:
        """From now on record every position's hidden state (the input of the nextn layers) in
        `hidden`; positions < n_past that were decoded before are not recorded."""
        if self.hidden is None:
            _ext().llama_set_embeddings_nextn(self._ctx, True, False)  # every row, not only logits rows
            self.hidden = np.zeros((self.n_ctx, self.n_embd), dtype=np.float32)

    # -- tokenizer -----------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text to token ids (BOS added when the model asks for it and add_special)."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def token_bytes(self, token: int) -> bytes:
        """The raw bytes of a token's piece; special/control tokens give b""."""
        piece = self._pieces.get(token)
        if piece is None:
            buf = self._piece_buf
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            piece = buf.raw[:n]
            self._pieces[token] = piece
        return piece

    def is_eog(self, token: int) -> bool:
        """End-of-generation token (EOS, EOT, <|im_end|>, ...)."""
        return bool(0 <= token < self.n_vocab and self._eog[token])

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", "replace")

    @property
    def chat_template(self) -> str | None:
        """The GGUF's Jinja chat template (`tokenizer.chat_template`)."""
        return self._chat_template

    @property
    def bos_token(self) -> str:
        """Text of the BOS token."""
        return self._token_text(self._bos)

    @property
    def eos_token(self) -> str:
        """Text of the EOS token."""
        return self._token_text(self._eos)

    def close(self) -> None:
        """Free batch, context and model (idempotent; a sequence view frees nothing; also after a
        worker was lost). A stuck model (a call on its workers never came back) is abandoned
        instead: freeing it would wait for that call forever, so its memory here stays allocated."""
        if not getattr(self, "_owner", True):
            return
        if getattr(self, "_ctx", None):
            if not self._stuck:
                self.before_free()
                llama_cpp.llama_batch_free(self._batch)
                try:
                    self.native(llama_cpp.llama_free, self._ctx)
                    self.native(llama_cpp.llama_model_free, self._model)
                except LocalSpecError:  # stuck while freeing: the rest is abandoned below
                    pass
            if self._stuck:
                log.warning("%s: abandoned without freeing it (a call on its RPC workers never came back); "
                            "its memory in this process stays allocated until it ends", self.name)
            self._ctx = None
            self._model = None
        watch = getattr(self, "_watch", None)
        if watch is not None:
            if getattr(self, "_stuck", False):
                watch.abandon()
            else:
                watch.release()
            self._watch = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass
