"""`LlamaMtpHead`: a target's own MTP (nextn) layers in a llama.cpp MTP context.

The call sequence follows llama.cpp's `draft-mtp` (llama-cpp-python 0.3.36's
`examples/server/server.py`, `MTPDraftProvider`): the target is loaded with `load_mtp` and
outputs the hidden state of every row (`llama_set_embeddings_nextn(target, true, false)`);
a second context on the same model with `ctx_type = LLAMA_CONTEXT_TYPE_MTP` and
`ctx_other = target` runs only the nextn block, with a KV cache of its own. Its row at
position p takes token x_p and the target's hidden state h_{p-1} (zeros at p = 0) and
predicts x_{p+1}; a draft chain feeds each drafted token with the head's own output hidden
state instead (`llama_get_embeddings_nextn_ith`).

Cache rule: the head's KV holds only rows whose h came from the target (`tokens[p]` = x_p),
so a draft chain's rows are dropped again at the end of every proposal.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt

from localspec.engine.llama.backend import LlamaCppBackend, _ext
from localspec.errors import DecodeError, InvalidRequestError, LocalSpecError, ModelLoadError


class LlamaMtpHead:
    """The nextn block of `target` in its own llama.cpp context (one sequence)."""

    def __init__(self, target: LlamaCppBackend) -> None:
        if target.n_layer_nextn <= 0:
            raise InvalidRequestError(
                f"drafter 'mtp' needs a target with multi-token-prediction (nextn) layers, and "
                f"{target.name} has none; use --drafter model with -md, or ngram",
                param="drafter",
            )
        ext = _ext()
        self.target = target
        self.name = f"{target.name} (MTP)"
        self.n_vocab, self.n_embd = target.n_vocab, target.n_embd
        target.keep_hidden()
        params = llama_cpp.llama_context_default_params()
        tp = target._cparams
        for field in ("n_ctx", "n_batch", "n_ubatch", "n_threads", "n_threads_batch", "flash_attn_type", "op_offload"):
            setattr(params, field, getattr(tp, field))
        params.n_seq_max = 1
        params.no_perf = True
        params.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = target._ctx
        self._ctx = target.native(llama_cpp.llama_init_from_model, target._model, params)
        if not self._ctx:
            raise ModelLoadError(
                f"llama.cpp could not create the MTP context of {target.name}; try a smaller context (-c)"
            )
        ext.llama_set_embeddings_nextn(self._ctx, True, True)  # hidden rows of the logits rows only
        self._ext = ext
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self.n_batch = int(tp.n_batch)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, self.n_embd, 1)
        # a batch made for embeddings has no token array: give it one (the MTP graph reads both)
        self._token_buf = (llama_cpp.llama_token * self.n_batch)()
        self._batch.token = self._token_buf
        self._embd = np.ctypeslib.as_array(self._batch.embd, shape=(self.n_batch, self.n_embd))
        self.tokens: list[int] = []
        """x_p of every row the head's KV holds (each computed with the target's h_{p-1})."""
        self.t_decode_s = 0.0
        self._last_row = 0

    @property
    def n_past(self) -> int:
        """Rows held by the head's KV cache."""
        return len(self.tokens)

    def truncate(self, n_past: int) -> None:
        """Drop rows >= n_past."""
        if n_past >= len(self.tokens):
            return
        n_past = max(0, n_past)
        if not llama_cpp.llama_memory_seq_rm(self._mem, 0, n_past, -1):
            raise DecodeError(f"{self.name}: could not drop MTP rows from position {n_past}")
        del self.tokens[n_past:]

    def catch_up(self, context: Sequence[int], upto: int) -> int:
        """Add rows n_past..upto-1 of `context` with the target's hidden states (the target
        must hold positions < upto - 1); returns the rows added. The logits are not kept."""
        n = 0
        while self.n_past < upto:
            m = min(upto - self.n_past, self.n_batch)
            self._decode_rows(context[self.n_past : self.n_past + m], None, want_logits=False)
            n += m
        return n

    def draft_row(self, context: Sequence[int]) -> npt.NDArray[np.float32]:
        """Catch up to `context[:-1]`, then the row of the last committed token: logits [V]
        predicting the first draft token (a view until the next call)."""
        last = len(context) - 1
        if last > self.n_past:
            self.catch_up(context, last)
        return self._decode_rows(context[last:], None, want_logits=True)

    def chain_row(self, token: int) -> npt.NDArray[np.float32]:
        """A drafted `token` at the next position, fed the head's own last hidden state:
        logits [V] predicting the token after it."""
        h = self._ext.llama_get_embeddings_nextn_ith(self._ctx, self._last_row)
        if not h:
            raise DecodeError(f"{self.name}: llama.cpp returned no MTP hidden state")
        row = np.ctypeslib.as_array(h, shape=(self.n_embd,)).copy()
        return self._decode_rows([token], row, want_logits=True)

    def _decode_rows(
        self, tokens: Sequence[int], h_first: npt.NDArray[np.float32] | None, *, want_logits: bool
    ) -> npt.NDArray[np.float32]:
        """Decode `tokens` at positions n_past..; row p gets h_{p-1} from the target (or
        `h_first` for the first row). Logits of the last row [V] when `want_logits`."""
        n, p0 = len(tokens), self.n_past
        hidden = self.target.hidden
        assert hidden is not None and n <= self.n_batch
        b = self._batch
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = p0 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1 if want_logits and i == n - 1 else 0
        b.n_tokens = n
        if h_first is not None:
            self._embd[0] = h_first
        elif p0 == 0:
            self._embd[0] = 0.0
        else:
            self._embd[0] = hidden[p0 - 1]
        if n > 1:
            self._embd[1:n] = hidden[p0 : p0 + n - 1]
        self.target.check_workers()  # the head's weights are the target's, maybe on RPC workers
        t0 = time.perf_counter()
        rc = self.target.native(llama_cpp.llama_decode, self._ctx, b, sync=self._ctx)
        self.t_decode_s += time.perf_counter() - t0
        if rc != 0:
            llama_cpp.llama_memory_seq_rm(self._mem, 0, p0, -1)
            raise DecodeError(f"{self.name}: llama_decode failed with code {rc}")
        self.tokens.extend(int(t) for t in tokens)
        self._last_row = n - 1
        if not want_logits:
            return np.empty((0,), dtype=np.float32)
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, n - 1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def close(self) -> None:
        """Free the MTP context and its batch (idempotent); the target stays."""
        if getattr(self, "_ctx", None):
            self._batch.token = ctypes.POINTER(llama_cpp.llama_token)()  # ours, not llama.cpp's to free
            llama_cpp.llama_batch_free(self._batch)
            if not self.target.stuck:  # a stuck target's contexts are abandoned with it
                self.target.before_free()
                try:
                    self.target.native(llama_cpp.llama_free, self._ctx)
                except LocalSpecError:  # stuck while freeing: abandoned with the target
                    pass
            self._ctx = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


def mtp_head(target: Any) -> LlamaMtpHead:
    """The MTP head of a llama.cpp target; InvalidRequestError if it has no nextn layers or is
    not a llama.cpp model."""
    if not isinstance(target, LlamaCppBackend):
        raise InvalidRequestError(f"drafter 'mtp' needs a llama.cpp target, not {type(target).__name__}", param="drafter")
    return LlamaMtpHead(target)
