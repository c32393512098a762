"""`HiddenStateDraft`: an EAGLE-3 or DFlash/DSpark drafter GGUF on llama.cpp, fed with the
target's hidden states.

llama.cpp ships the model graphs (`src/models/eagle3.cpp`, `dflash.cpp`) but their driver
lives in `common/speculative.cpp`, which the binding does not include; this is localspec's
driver on libllama, following that one:

- The target context captures the *input* of the drafter's target layers for every token it
  evaluates (`llama_set_embeddings_layer_inp`, enabled only for architectures whose graph
  records it: llama.cpp aborts the process for the others). A decode hook on the target
  backend copies the rows after each `llama_decode`; they wait in `pending` until the
  drafter next drafts (so their cost counts as drafting).
- The draft context borrows the target's token embeddings and output head through
  `llama_context_params.ctx_other`.
- EAGLE-3: the encoder fuses the 3 feature rows of each position into g; the draft KV at
  position P holds the pair (token P+1, g P). A chain then decodes (draft token, pre-norm
  hidden of the previous step) one position at a time.
- DFlash: each position's fused features are injected into the draft KV (one decode of
  embedding rows); a draft is one non-causal decode of [last, mask, ...] whose rows are the
  block's logits. DSpark adds a Markov head (in the graph) and a confidence per position.

Draft KV record: `tokens` are the target tokens whose features the drafter holds (injected
or pending), positions 0..n-1, always a prefix of what the target evaluated; `truncate`
drops features and KV entries from a position on, like any KV cache. Drafting positions
are removed again before `draft_*` returns.
"""

from __future__ import annotations

import ctypes
import logging
import os
import time
from collections.abc import Sequence

import llama_cpp
import numpy as np
import numpy.typing as npt

from localspec.engine.llama import ext
from localspec.engine.llama.backend import LlamaCppBackend
from localspec.compat import capture_problem
from localspec.errors import DecodeError, IncompatibleModelsError, LocalSpecError, ModelLoadError, ModelNotFoundError
from localspec.gguf_info import tensor_dims

log = logging.getLogger(__name__)

HIDDEN_ARCHS = ("eagle3", "dflash")


def _meta(model: object, key: str) -> str | None:
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace") if n >= 0 else None


class HiddenStateDraft:
    """A hidden-state drafter model bound to one loaded target (see the module doc)."""

    _tctx: ctypes.c_void_p
    _mem: ctypes.c_void_p
    _pos: ctypes.Array[ctypes.c_int32]
    _n_kv: int
    _g: npt.NDArray[np.float32] | None
    n_batch: int

    def __init__(self, path: str, target: LlamaCppBackend, *, n_threads: int | None = None) -> None:
        if not os.path.isfile(path):
            raise ModelNotFoundError(f"drafter file not found: {path}")
        ext.check_available()
        self.target = target
        tmodel = target._model  # the native boundary: same package
        problem = capture_problem(_meta(tmodel, "general.architecture"), target.name)
        if problem:
            raise IncompatibleModelsError(problem + ". Use a draft model or --drafter ngram with this target.")
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = target.spec.n_gpu_layers if target.spec.n_gpu_layers >= 0 else 999
        if target._devices is not None:  # where the target is (not every device this process registered)
            mparams.devices = ctypes.cast(target._devices, ctypes.c_void_p)
        self._model = target.native(llama_cpp.llama_model_load_from_file, path.encode(), mparams)
        if not self._model:
            raise ModelLoadError(f"llama.cpp could not load the drafter {path}; the file may be truncated or not "
                                 "an EAGLE-3/DFlash GGUF. Re-download it.")
        self._ctx = None
        self._batch = None
        try:
            self._setup(path, target, n_threads)
        except BaseException:
            self.close()
            raise

    def _setup(self, path: str, target: LlamaCppBackend, n_threads: int | None) -> None:
        arch = _meta(self._model, "general.architecture") or "?"
        if arch not in HIDDEN_ARCHS:
            raise IncompatibleModelsError(f"{path} is a {arch!r} model, not an EAGLE-3 or DFlash drafter")
        self.arch = arch
        self.name = os.path.basename(path)
        n_ids = int(ext.model_target_layer_ids_n(self._model))
        ptr = ext.model_target_layer_ids(self._model)
        self.layer_ids = tuple(int(ptr[i]) for i in range(n_ids))
        n_layer_tgt = target.n_layer
        self.n_embd_tgt = int(llama_cpp.llama_model_n_embd(target._model))
        self.n_embd = int(llama_cpp.llama_model_n_embd(self._model))
        bad = [i for i in self.layer_ids if not 0 <= i < n_layer_tgt]
        if not self.layer_ids or bad:
            raise IncompatibleModelsError(
                f"drafter {self.name!r} reads target layers {list(self.layer_ids)} but target {target.name!r} "
                f"has {n_layer_tgt} layers: it was made for another target")
        if arch == "eagle3" and len(self.layer_ids) != 3:
            raise IncompatibleModelsError(f"EAGLE-3 drafter {self.name!r} lists {n_ids} target layers, not 3")
        if arch == "dflash" and self.n_embd != self.n_embd_tgt:
            raise IncompatibleModelsError(
                f"DFlash drafter {self.name!r} has hidden size {self.n_embd}, target {target.name!r} "
                f"{self.n_embd_tgt}: it was made for another target")
        if arch == "dflash" and int(ext.model_dflash_selector_top_k(self._model)) > 0:
            raise IncompatibleModelsError(f"{self.name!r} is a DFlash2 (selector) drafter, which localspec "
                                          "does not run yet; use a DFlash or DSpark drafter")
        self.n_in = len(self.layer_ids) * self.n_embd_tgt
        vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        self.block_size = int(_meta(self._model, "dflash.block_size") or 16)
        self.sample_from_anchor = (_meta(self._model, "dflash.sample_from_anchor") or "true") == "true"
        dims = tensor_dims(path)
        self.is_dspark = arch == "dflash" and "markov_w1.weight" in dims
        self.has_confidence = self.is_dspark and "conf_proj.weight" in dims
        """DSpark with a confidence head: the graph's t_h_nextn rows carry its per-position value."""
        self.mask_token = int(llama_cpp.llama_vocab_mask(vocab))
        if arch == "dflash" and self.mask_token < 0:
            raise IncompatibleModelsError(f"DFlash drafter {self.name!r} has no mask token (tokenizer.ggml.mask_token_id)")
        causal = (_meta(self._model, "dflash.attention.causal") or "false") == "true"

        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = target.n_ctx
        cparams.n_batch = target.n_batch
        cparams.n_ubatch = target.n_batch
        cparams.n_seq_max = 1
        threads = n_threads or target.n_threads
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.no_perf = True
        cparams.ctx_other = target._ctx
        self._ctx = target.native(llama_cpp.llama_init_from_model, self._model, cparams)
        if not self._ctx:
            raise ModelLoadError(f"llama.cpp could not create a context for the drafter {self.name!r}")
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_ext_init(self._ctx)
        self.n_batch = target.n_batch
        ext.set_embeddings_nextn(self._ctx, True, True)
        if arch == "dflash":
            llama_cpp.llama_set_causal_attn(self._ctx, causal)
        for lid in self.layer_ids:
            ext.set_embeddings_layer_inp(target._ctx, lid, True)
        self._tctx = target._ctx
        self.tokens: list[int] = []
        """Target tokens whose features this drafter holds (positions 0..n-1)."""
        self._pending: list[tuple[int, npt.NDArray[np.float32]]] = []
        """(first position, [n, n_in] features) captured but not yet fed to the draft context."""
        self._n_kv = 0
        """Positions of the draft KV that hold committed entries (EAGLE-3 pairs / DFlash features)."""
        self._g = np.zeros((target.n_ctx, self.n_embd), dtype=np.float32) if arch == "eagle3" else None
        """EAGLE-3: fused features g of every position the encoder has seen."""
        self._pos = (ctypes.c_int32 * 4)()
        self.log: list[tuple[int, float]] = []
        """(tokens, seconds) of each draft-context call since the caller last cleared it."""
        target.decode_hooks.append(self._capture)

    # -- feature capture (called by the target's decode) -----------------------------
    def _capture(self, pos0: int, chunk: Sequence[int]) -> None:
        """Copy the captured layer inputs of the target's last decode (positions pos0..)."""
        n = len(chunk)
        if pos0 < len(self.tokens):  # the target re-evaluates positions: their old features go
            self.truncate(pos0)
        if len(self.tokens) != pos0:
            return  # a gap (cannot happen while the target's tokens are a prefix record): skip, stay a prefix
        feats = np.empty((n, self.n_in), dtype=np.float32)
        e = self.n_embd_tgt
        for j, lid in enumerate(self.layer_ids):
            ptr = ext.get_embeddings_layer_inp(self._tctx, lid)
            feats[:, j * e : (j + 1) * e] = np.ctypeslib.as_array(ptr, shape=(n, e))
        self._pending.append((pos0, feats))
        self.tokens.extend(int(t) for t in chunk)

    # -- KV cache -------------------------------------------------------------------
    @property
    def n_past(self) -> int:
        """Positions whose target features the drafter holds."""
        return len(self.tokens)

    def truncate(self, n_past: int) -> None:
        """Drop features and draft KV entries of positions >= n_past."""
        n_past = max(0, n_past)
        if n_past < len(self.tokens):
            del self.tokens[n_past:]
        kept = []
        for p0, f in self._pending:
            if p0 < n_past:
                kept.append((p0, f[: n_past - p0]))
        self._pending = kept
        # an EAGLE-3 pair at P holds token P+1: a change at n_past invalidates the pair at n_past-1
        keep_kv = max(0, n_past - 1) if self.arch == "eagle3" else n_past
        if self._n_kv > keep_kv:
            self._n_kv = keep_kv
        llama_cpp.llama_memory_seq_rm(self._mem, 0, self._n_kv, -1)

    def pending_rows(self) -> int:
        """Captured feature rows not yet fed to the draft context."""
        return sum(len(f) for _, f in self._pending)

    # -- calls into the draft context -------------------------------------------------
    def _process(self, kind: int, n: int) -> None:
        self.target.check_workers()  # the draft context reads the target's (and may hold layers on its workers)
        t0 = time.perf_counter()
        rc = self.target.native(llama_cpp.llama_process, self._ctx, kind, self._batch, sync=self._ctx)
        self.log.append((n, time.perf_counter() - t0))
        if rc != 0:
            raise DecodeError(f"{self.name}: llama_process failed with code {rc}")

    def _add(self, pos: int, token: int | None, embd: npt.NDArray[np.float32] | None, output: bool) -> None:
        b = self._batch
        if token is None:
            assert embd is not None
            e = llama_cpp.llama_embd(embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, embd.shape[-1])
            idx = llama_cpp.llama_batch_ext_add_embd(b, 0, e)
        else:
            idx = llama_cpp.llama_batch_ext_add_token(b, 0, token)
            if idx >= 0 and embd is not None:
                e = llama_cpp.llama_embd(embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, embd.shape[-1])
                if not llama_cpp.llama_batch_ext_set_embd_token(b, idx, e):
                    idx = -2
        if idx < 0:
            raise DecodeError(f"{self.name}: could not add an entry to the draft batch (error {idx})")
        self._pos[0] = self._pos[1] = self._pos[2] = pos
        llama_cpp.llama_batch_ext_set_pos(b, idx, self._pos)
        if output:
            llama_cpp.llama_batch_ext_set_output_logits(b, idx, True)

    def _logits(self, i: int) -> npt.NDArray[np.float32]:
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, i)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def _feed_pending(self) -> None:
        """EAGLE-3: encode pending features into g rows. DFlash: inject them into the draft KV."""
        for p0, feats in self._pending:
            for s in range(0, len(feats), self.n_batch):
                rows = np.ascontiguousarray(feats[s : s + self.n_batch])
                llama_cpp.llama_batch_ext_clear(self._batch)
                if self.arch == "eagle3":
                    base = self._n_kv  # the encoder ignores positions; keep them past the memory
                    for i in range(len(rows)):
                        self._add(base + i, None, rows[i], True)
                    self._process(llama_cpp.LLAMA_PROCESS_TYPE_ENCODE, len(rows))
                    g = ext.get_embeddings_nextn(self._ctx)
                    assert self._g is not None
                    self._g[p0 + s : p0 + s + len(rows)] = np.ctypeslib.as_array(g, shape=(len(rows), self.n_embd))
                else:
                    for i in range(len(rows)):
                        self._add(p0 + s + i, None, rows[i], False)
                    self._process(llama_cpp.LLAMA_PROCESS_TYPE_DECODE, len(rows))
                    self._n_kv = p0 + s + len(rows)
        self._pending = []

    def _ready(self, context: Sequence[int]) -> int:
        """Feed pending features; return m, the positions with features (the draft starts after them)."""
        m = len(self.tokens)
        if m != len(context) - 1 or self.tokens != list(context[:m]):
            raise DecodeError(f"{self.name}: drafter features ({m} tokens) do not match the committed context "
                              f"({len(context)} tokens); a bug in localspec")
        self._feed_pending()
        return m

    # -- EAGLE-3 chain ----------------------------------------------------------------
    def eagle3_start(self, context: Sequence[int]) -> npt.NDArray[np.float32]:
        """Write the committed (token, g) pairs the draft KV lacks and return the logits row of
        the first draft token (a view, valid until the next call)."""
        m = self._ready(context)
        assert self._g is not None
        if m == 0:
            raise DecodeError(f"{self.name}: nothing evaluated yet to draft from")
        # pairs P = n_kv..m-1: (context[P+1], g[P]); the last one is the draft's seed
        start = self._n_kv
        for s in range(start, m, self.n_batch):
            e = min(m, s + self.n_batch)
            llama_cpp.llama_batch_ext_clear(self._batch)
            for p in range(s, e):
                self._add(p, int(context[p + 1]), self._g[p], p == m - 1)
            self._process(llama_cpp.LLAMA_PROCESS_TYPE_DECODE, e - s)
        self._n_kv = m
        self._chain_pos = m - 1
        self._prenorm = np.ctypeslib.as_array(ext.get_embeddings_nextn(self._ctx), shape=(self.n_embd,)).copy()
        return self._logits(-1)

    def eagle3_next(self, token: int) -> npt.NDArray[np.float32]:
        """Feed the drafted `token` with the previous pre-norm hidden state; the next logits row."""
        self._chain_pos += 1
        llama_cpp.llama_batch_ext_clear(self._batch)
        self._add(self._chain_pos, token, self._prenorm, True)
        self._process(llama_cpp.LLAMA_PROCESS_TYPE_DECODE, 1)
        self._prenorm = np.ctypeslib.as_array(ext.get_embeddings_nextn(self._ctx), shape=(self.n_embd,)).copy()
        return self._logits(-1)

    def end_draft(self) -> None:
        """Drop the drafting positions from the draft KV (it keeps the committed entries)."""
        llama_cpp.llama_memory_seq_rm(self._mem, 0, self._n_kv, -1)

    # -- DFlash block -----------------------------------------------------------------
    def max_block(self) -> int:
        """Most draft tokens one block gives (the trained block size, less the anchor slot for DFlash)."""
        return self.block_size if self.is_dspark and self.sample_from_anchor else self.block_size - 1

    def dflash_block(self, context: Sequence[int], k: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32] | None]:
        """One decode of [last, mask...]: ([k, V] logits rows of the k draft positions (copies),
        [k] DSpark confidences or None). The block's KV is dropped before returning."""
        m = self._ready(context)
        k = max(1, min(k, self.max_block()))
        anchor = self.is_dspark and self.sample_from_anchor
        n_block = k if anchor else k + 1
        first = 0 if anchor else 1
        llama_cpp.llama_batch_ext_clear(self._batch)
        for i in range(n_block):
            self._add(m + i, int(context[-1]) if i == 0 else self.mask_token, None, True)
        try:
            self._process(llama_cpp.LLAMA_PROCESS_TYPE_DECODE, n_block)
            rows = np.empty((k, self.n_vocab), dtype=np.float32)
            for j in range(k):
                rows[j] = self._logits(first + j)
            conf = None
            if self.has_confidence:
                h = np.ctypeslib.as_array(ext.get_embeddings_nextn(self._ctx), shape=(n_block, self.n_embd))
                conf = h[first : first + k, 0].copy()
        finally:
            self.end_draft()
        return rows, conf

    def close(self) -> None:
        """Stop the target's capture hook and free the draft context and model (idempotent)."""
        hooks = getattr(self.target, "decode_hooks", [])
        if self._capture in hooks:
            hooks.remove(self._capture)
        if getattr(self, "_batch", None):
            llama_cpp.llama_batch_ext_free(self._batch)
            self._batch = None
        if self.target.stuck:  # its context reads the target's: abandoned with it
            self._ctx = self._model = None
        if getattr(self, "_ctx", None) or getattr(self, "_model", None):
            self.target.before_free()
        try:
            if getattr(self, "_ctx", None):
                self.target.native(llama_cpp.llama_free, self._ctx)
                self._ctx = None
            if getattr(self, "_model", None):
                self.target.native(llama_cpp.llama_model_free, self._model)
                self._model = None
        except LocalSpecError:  # stuck while freeing: abandoned with the target
            self._ctx = self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass
