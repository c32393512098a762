"""The acceptance rule in NumPy: the specification every other backend is tested against.

Glossary (Leviathan et al. 2023, arXiv 2211.17192; the names vLLM's RejectionSampler uses):

- *target*: the large model whose output must be preserved.
- *draft tokens* d_1..d_k: proposed by the drafter; q_i is the drafter's (processed)
  distribution at position i, p_i the target's.
- *accepted*: draft tokens kept. Greedy: d_i is accepted while argmax p_i == d_i.
  Stochastic: d_i is accepted iff ``u_i * q_i(d_i) < p_i(d_i)``, i.e. with probability
  min(1, p_i(d_i) / q_i(d_i)).
- *recovered*: at the first rejected position j, a token sampled from
  norm(max(0, p_j - q_j)) (greedy: argmax p_j). Without q (n-gram drafts) q_j is one-hot
  at d_j, so the rule becomes "accept with probability p_j(d_j)" and the recovered token
  is sampled from p_j with d_j zeroed.
- *bonus*: when all k drafts are accepted, one more token sampled from p_{k+1}.

Output tokens per step = accepted + exactly one recovered or bonus token (k = 0 is plain
decoding: the single token is sampled from p_1). The output is distributed exactly as the
target alone would sample it, given the same temperature / top-k / top-p, which are
applied identically to target and draft logits before the rule (see `probs_from_logits`).

Randomness is an input: ``uniforms`` has k + 1 values in [0, 1); ``uniforms[i]`` (i < k)
decides draft i, and ``uniforms[k]`` samples the final recovered/bonus/plain token by
inverse CDF (the smallest index whose cumulative weight exceeds ``u * total``). Given the
same uniforms every backend must pick the same tokens.

Arithmetic is float64 here; backends may use float32 and are compared with a tolerance
tied to float32 rounding.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from localspec.types import AcceptResult, SamplingParams, TokenSource

FloatArray = npt.NDArray[np.floating]
IntArray = npt.NDArray[np.integer]

_TOP_P_CANDIDATES = 1024
"""Top-p first looks for the nucleus among this many largest tokens (exact either way)."""


def probs_from_logits(logits: npt.ArrayLike, params: SamplingParams) -> npt.NDArray[np.float64]:
    """Processed probabilities for each row.

    logits: [n, V] (or [V]) raw logits. Returns float64 [n, V] (or [V]), rows summing to 1.
    Greedy params give a one-hot row at the argmax (lowest index on ties).
    """
    x = np.asarray(logits)
    if x.ndim == 1:
        return _probs_row(x, params)
    return np.stack([_probs_row(row, params) for row in x]) if len(x) else np.zeros((0, x.shape[-1]))


def _probs_row(row: npt.NDArray[np.floating], params: SamplingParams) -> npt.NDArray[np.float64]:
    """One row of `probs_from_logits`. row: [V]."""
    n_vocab = row.shape[0]
    if params.greedy:
        out = np.zeros(n_vocab, dtype=np.float64)
        out[int(np.argmax(row))] = 1.0
        return out
    z = row.astype(np.float64) / params.temperature  # [V]
    if 0 < params.top_k < n_vocab:
        kth = np.partition(z, n_vocab - params.top_k)[n_vocab - params.top_k]
        z = np.where(z >= kth, z, -np.inf)
    z -= z.max()
    w = np.exp(z)
    probs: npt.NDArray[np.float64] = w / w.sum()
    if params.top_p < 1.0:
        threshold = _top_p_threshold(probs, params.top_p)
        probs = np.where(probs >= threshold, probs, 0.0)
        probs /= probs.sum()
    return probs


def _top_p_threshold(probs: npt.NDArray[np.float64], top_p: float) -> float:
    """Probability of the last token of the shortest sorted prefix with mass >= top_p."""
    n_vocab = probs.shape[0]
    m = min(n_vocab, _TOP_P_CANDIDATES)
    head = probs[np.argpartition(probs, n_vocab - m)[n_vocab - m :]] if m < n_vocab else probs
    head = np.sort(head)[::-1]
    csum = np.cumsum(head)
    if csum[-1] < top_p and m < n_vocab:
        head = np.sort(probs)[::-1]
        csum = np.cumsum(head)
    j = int(np.searchsorted(csum, top_p, side="left"))
    return float(head[min(j, len(head) - 1)])


def sample_from_weights(weights: npt.NDArray[np.floating], u: float) -> int:
    """Inverse-CDF sample: the smallest index i with cumsum(weights)[i] > u * sum(weights).

    weights: [V] non-negative, not necessarily normalised, with a positive sum.
    Never returns a zero-weight index for u in [0, 1).
    """
    csum = np.cumsum(weights, dtype=np.float64)
    idx = int(np.searchsorted(csum, u * csum[-1], side="right"))
    return min(idx, len(csum) - 1)


def accept_greedy_ref(target_logits: npt.ArrayLike, draft_tokens: npt.ArrayLike) -> AcceptResult:
    """Greedy acceptance.

    target_logits: [k+1, V] target logits for rows [last, d_1..d_k].
    draft_tokens: [k] int.
    """
    logits = np.asarray(target_logits)
    drafts = np.asarray(draft_tokens, dtype=np.int64).reshape(-1)
    k = drafts.shape[0]
    _check_shapes(logits, drafts, None, None)
    out: list[int] = []
    for i in range(k):
        best = int(np.argmax(logits[i]))
        if best != int(drafts[i]):
            return AcceptResult(tuple(out + [best]), i, TokenSource.RECOVERED)
        out.append(best)
    last = int(np.argmax(logits[k]))
    return AcceptResult(tuple(out + [last]), k, TokenSource.BONUS if k else TokenSource.PLAIN)


def accept_stochastic_ref(
    target_logits: npt.ArrayLike,
    draft_tokens: npt.ArrayLike,
    draft_logits: npt.ArrayLike | None,
    uniforms: npt.ArrayLike,
    params: SamplingParams,
) -> AcceptResult:
    """Speculative sampling (rejection rule with recovered and bonus tokens).

    target_logits: [k+1, V] raw target logits for rows [last, d_1..d_k].
    draft_tokens: [k] int, the drafts.
    draft_logits: [k, V] raw drafter logits the drafts were sampled from (after the same
        `params`), or None for drafts without q (n-gram): q is one-hot at d_i.
    uniforms: [k+1] in [0, 1): k ratio tests, then one for the final token.
    params: temperature > 0, top-k, top-p applied to both p and q.
    """
    logits = np.asarray(target_logits)
    drafts = np.asarray(draft_tokens, dtype=np.int64).reshape(-1)
    q_logits = None if draft_logits is None else np.asarray(draft_logits)
    u = np.asarray(uniforms, dtype=np.float64).reshape(-1)
    k = drafts.shape[0]
    _check_shapes(logits, drafts, q_logits, u)
    out: list[int] = []
    for i in range(k):
        p = _probs_row(logits[i], params)  # [V]
        d = int(drafts[i])
        if q_logits is None:
            if u[i] < p[d]:
                out.append(d)
                continue
            residual = p.copy()
            residual[d] = 0.0
        else:
            q = _probs_row(q_logits[i], params)  # [V]
            if u[i] * q[d] < p[d]:
                out.append(d)
                continue
            residual = np.maximum(p - q, 0.0)
        if not residual.sum() > 0.0:
            # Not in algorithm 1, but needed when p == q bit for bit: fall back to p.
            residual = p
        token = sample_from_weights(residual, float(u[k]))
        return AcceptResult(tuple(out + [token]), i, TokenSource.RECOVERED)
    # The bonus token is sampled from the target only.
    p_last = _probs_row(logits[k], params)
    token = sample_from_weights(p_last, float(u[k]))
    return AcceptResult(tuple(out + [token]), k, TokenSource.BONUS if k else TokenSource.PLAIN)


def accept_ref(
    target_logits: npt.ArrayLike,
    draft_tokens: npt.ArrayLike,
    draft_logits: npt.ArrayLike | None,
    uniforms: npt.ArrayLike,
    params: SamplingParams,
) -> AcceptResult:
    """The full rule: greedy when `params.greedy`, else stochastic. Shapes as in
    `accept_stochastic_ref`; greedy ignores `draft_logits` and `uniforms`."""
    if params.greedy:
        return accept_greedy_ref(target_logits, draft_tokens)
    return accept_stochastic_ref(target_logits, draft_tokens, draft_logits, uniforms, params)


def _check_shapes(
    logits: np.ndarray, drafts: np.ndarray, q_logits: np.ndarray | None, u: np.ndarray | None
) -> None:
    k = drafts.shape[0]
    if logits.ndim != 2 or logits.shape[0] != k + 1:
        raise ValueError(f"target_logits must be [k+1, V] = [{k + 1}, V], got {logits.shape}")
    n_vocab = logits.shape[1]
    if k and (drafts.min() < 0 or drafts.max() >= n_vocab):
        raise ValueError(f"draft token ids must be in [0, {n_vocab}), got {drafts.tolist()}")
    if q_logits is not None and q_logits.shape != (k, n_vocab):
        raise ValueError(f"draft_logits must be [k, V] = [{k}, {n_vocab}], got {q_logits.shape}")
    if u is not None and u.shape[0] != k + 1:
        raise ValueError(f"uniforms must be [k+1] = [{k + 1}], got {u.shape}")
