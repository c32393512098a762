"""The acceptance rule vectorized with torch ops, on CPU threads or a CUDA device.

All rows are processed at once in float32 (temperature, top-k, softmax, top-p); the ratio
test and the one inverse-CDF sample of the step use float64. Nothing is compiled.
`accept_batch` loops over the items (each item's result is the single call's).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from localspec.errors import KernelUnavailableError
from localspec.kernels import AcceptItem, accept_each
from localspec.kernels.reference import _TOP_P_CANDIDATES, _check_shapes
from localspec.types import AcceptResult, SamplingParams, TokenSource

log = logging.getLogger(__name__)

try:
    import torch
except ImportError as _exc:  # torch is a dependency, but keep the reason if it is broken
    torch = None  # type: ignore[assignment]
    _IMPORT_ERROR: str | None = f"torch cannot be imported: {_exc}"
else:
    _IMPORT_ERROR = None


def torch_status(device: str = "cpu") -> str | None:
    """Why torch on `device` ('cpu' or 'cuda') cannot run here, or None."""
    if torch is None:
        return _IMPORT_ERROR
    if device == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
            return f"torch {torch.__version__} ({build}) sees no CUDA device"
    elif device != "cpu":
        return f"unknown torch device {device!r}"
    return None


class TorchBackend:
    """Acceptance with torch tensors. `device`: 'cpu' or 'cuda' (name: torch-cpu / torch-cuda)."""

    def __init__(self, device: str = "cpu") -> None:
        reason = torch_status(device)
        if reason:
            raise KernelUnavailableError(f"torch acceptance backend unavailable: {reason}")
        self.device = torch.device(device)
        self.name = f"torch-{self.device.type}"

    def _tensor(self, array: np.ndarray) -> "torch.Tensor":
        t = torch.from_numpy(array)  # zero-copy view of the host buffer
        return t if self.device.type == "cpu" else t.to(self.device, non_blocking=True)

    def accept(
        self,
        target_logits: npt.ArrayLike,
        draft_tokens: npt.ArrayLike,
        draft_logits: npt.ArrayLike | None,
        uniforms: npt.ArrayLike,
        params: SamplingParams,
    ) -> AcceptResult:
        """Shapes as `reference.accept_ref`: target [k+1, V], drafts [k], q [k, V] | None, uniforms [k+1]."""
        logits_np = np.ascontiguousarray(target_logits, dtype=np.float32)
        drafts_np = np.asarray(draft_tokens, dtype=np.int64).reshape(-1)
        k = drafts_np.shape[0]
        if params.greedy:
            _check_shapes(logits_np, drafts_np, None, None)
            best = self._tensor(logits_np).max(dim=1).indices.cpu().numpy()  # [k+1], first max on ties
            return _greedy_result(best, drafts_np)
        q_np = None if draft_logits is None else np.ascontiguousarray(draft_logits, dtype=np.float32)
        u = np.asarray(uniforms, dtype=np.float64).reshape(-1)
        _check_shapes(logits_np, drafts_np, q_np, u)
        with torch.inference_mode():
            p = processed_probs(self._tensor(logits_np), params)  # [k+1, V]
            q = None if q_np is None else processed_probs(self._tensor(q_np), params)  # [k, V]
            rows = torch.arange(k, device=self.device)
            d = torch.from_numpy(drafts_np).to(self.device)
            p_d = p[rows, d].double().cpu().numpy()  # [k]
            if q is None:
                accepted = u[:k] < p_d
            else:
                q_d = q[rows, d].double().cpu().numpy()  # [k]
                accepted = u[:k] * q_d < p_d
            rejected = np.flatnonzero(~accepted)
            j = int(rejected[0]) if rejected.size else k
            if j == k:
                # The bonus token is sampled from the target only.
                token = _sample(p[k], float(u[k]))
                source = TokenSource.BONUS if k else TokenSource.PLAIN
            else:
                if q is None:
                    residual = p[j].clone()
                    residual[int(drafts_np[j])] = 0.0
                else:
                    residual = torch.clamp(p[j] - q[j], min=0.0)
                if not float(residual.double().sum()) > 0.0:
                    residual = p[j]  # p == q bit for bit: fall back to p, as the reference does
                token = _sample(residual, float(u[k]))
                source = TokenSource.RECOVERED
        tokens = tuple(int(t) for t in drafts_np[:j]) + (token,)
        return AcceptResult(tokens, j, source)

    def accept_batch(self, items: Sequence[AcceptItem]) -> list[AcceptResult]:
        """`accept` per item, in order (a loop: one sequence's rows at a time)."""
        return accept_each(self.accept, items)


def _greedy_result(best: np.ndarray, drafts: np.ndarray) -> AcceptResult:
    k = drafts.shape[0]
    mismatch = np.flatnonzero(best[:k] != drafts)
    j = int(mismatch[0]) if mismatch.size else k
    tokens = tuple(int(t) for t in best[: j + 1])
    source = TokenSource.RECOVERED if j < k else (TokenSource.BONUS if k else TokenSource.PLAIN)
    return AcceptResult(tokens, j, source)


def processed_probs(logits: "torch.Tensor", params: SamplingParams) -> "torch.Tensor":
    """Temperature, top-k, softmax, top-p, renormalise. logits: [n, V] float32 -> [n, V] float32."""
    n_vocab = logits.shape[-1]
    # Subtract the max before dividing: (x - max) is exact near the top, whereas x / T
    # first would put rounding of |x / T| into every exponent. The normaliser is summed in
    # float64 (torch's float32 sum over 10^5 terms loses ~1e-6 relative). In place: one
    # temporary of the logits' size.
    w = logits - logits.max(dim=-1, keepdim=True).values
    if 0 < params.top_k < n_vocab:
        kth = torch.topk(logits, params.top_k, dim=-1).values[:, -1:]  # [n, 1]; ties at kth kept
        w.masked_fill_(logits < kth, float("-inf"))
    w.div_(params.temperature).exp_()
    probs = w.div_(w.sum(dim=-1, keepdim=True, dtype=torch.float64).to(w.dtype))
    if params.top_p < 1.0 and logits.shape[0]:
        threshold = _top_p_threshold(probs, params.top_p)  # [n, 1]
        probs = torch.where(probs >= threshold, probs, torch.zeros((), dtype=probs.dtype, device=probs.device))
        probs = probs / probs.sum(dim=-1, keepdim=True, dtype=torch.float64).to(probs.dtype)
    return probs


def _top_p_threshold(probs: "torch.Tensor", top_p: float) -> "torch.Tensor":
    """Per row: probability of the last token of the shortest sorted prefix with mass >= top_p."""
    n_vocab = probs.shape[-1]
    m = min(n_vocab, _TOP_P_CANDIDATES)
    head = torch.topk(probs, m, dim=-1).values  # [n, m] descending
    csum = head.double().cumsum(dim=-1)
    if m < n_vocab and bool((csum[:, -1] < top_p).any()):
        head = torch.sort(probs, dim=-1, descending=True).values
        csum = head.double().cumsum(dim=-1)
    target = torch.full((probs.shape[0], 1), top_p, dtype=torch.float64, device=probs.device)
    j = torch.searchsorted(csum, target, right=False).clamp(max=head.shape[-1] - 1)
    return head.gather(-1, j)


def _sample(weights: "torch.Tensor", u: float) -> int:
    """Inverse CDF: smallest index with cumsum(weights) > u * sum. weights: [V] >= 0."""
    csum = weights.double().cumsum(dim=0)
    target = (csum[-1] * u).reshape(1)
    idx = int(torch.searchsorted(csum, target, right=True)[0])
    return min(idx, weights.shape[0] - 1)
