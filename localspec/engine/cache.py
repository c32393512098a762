"""Phase 4 of a step: commit accepted tokens and roll both KV caches back to them.

State between steps: `context` is every committed token (prompt + output); the target's
KV cache holds `context[:-1]` (the last committed token is evaluated by the next verify);
the drafter's holds a prefix of `context` at most two tokens shorter. vLLM's scheduler
keeps the same rule (`num_computed_tokens -= num_rejected`); llama.cpp drops the rejected
positions with `llama_memory_seq_rm(..., n_past, -1)` on both contexts.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.engine.backend import ModelBackend, common_prefix_len
from localspec.engine.drafting import Drafter, ModelDrafter

MAX_DRAFTER_LAG = 2


class CacheInvariantError(AssertionError):
    """The KV caches and the committed tokens disagree (a bug in localspec)."""


def prefill(target: ModelBackend, context: Sequence[int]) -> int:
    """Make the target hold `context[:-1]`, reusing its cached prefix. Returns reused tokens."""
    keep = min(common_prefix_len(target.tokens, context), len(context) - 1)
    target.truncate(keep)
    if len(context) - 1 > keep:
        target.decode(context[keep:-1])
    return keep


def commit(target: ModelBackend, n_past_before: int, num_accepted: int) -> None:
    """After verifying [last, d_1..d_k] from n_past_before: keep last + accepted drafts."""
    target.truncate(n_past_before + 1 + num_accepted)


def check_invariants(
    target: ModelBackend, drafter: Drafter, context: Sequence[int], *, drafted: bool, full: bool = False
) -> None:
    """Raise CacheInvariantError unless the caches match the rule above. `drafted`: the
    model drafter ran this step (else it may lag more: it catches up when next used).
    `full` compares every token (tests); otherwise lengths and the last tokens."""
    if target.n_past != len(context) - 1:
        raise CacheInvariantError(f"target holds {target.n_past} tokens, expected {len(context) - 1}")
    span = len(context) - 1 if full else min(8, len(context) - 1)
    if target.tokens[len(target.tokens) - span :] != list(context[len(context) - 1 - span : len(context) - 1]):
        raise CacheInvariantError("target KV tokens differ from the committed context")
    if isinstance(drafter, ModelDrafter):
        d = drafter.backend
        lag = len(context) - d.n_past
        if lag < 0 or (drafted and lag > MAX_DRAFTER_LAG):
            raise CacheInvariantError(f"drafter lags by {lag} tokens (allowed 0..{MAX_DRAFTER_LAG})")
        n = d.n_past if full else min(8, d.n_past)
        if d.tokens[d.n_past - n :] != list(context[d.n_past - n : d.n_past]):
            raise CacheInvariantError("drafter KV tokens differ from the committed context")
