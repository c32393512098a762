"""KV caches between steps: prefill with prefix reuse, and phase 4 of a step, the rollback of
*both* caches to the committed tokens. This module is the only place that drops positions.

State between steps: `context` is every committed token (prompt + output); the target's
KV cache holds `context[:-1]` (the last committed token is evaluated by the next verify);
a drafter's cache holds a prefix of `context`, at most MAX_DRAFTER_LAG tokens shorter after
a step it drafted in (it catches up when it next drafts). vLLM's scheduler keeps the same
rule (`num_computed_tokens -= num_rejected`); llama.cpp drops the rejected positions with
`llama_memory_seq_rm(..., n_past, -1)` on both contexts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from localspec.engine.backend import KVCache, ModelBackend, common_prefix_len

MAX_DRAFTER_LAG = 2


class CacheInvariantError(AssertionError):
    """The KV caches and the committed tokens disagree (a bug in localspec)."""


def keep_prefix(model: KVCache, context: Sequence[int]) -> int:
    """Drop what `model` holds beyond its longest prefix shared with `context[:-1]`; returns
    the kept length (the first half of `prefill`, for drivers that evaluate the rest in chunks)."""
    keep = min(common_prefix_len(model.tokens, context), len(context) - 1)
    model.truncate(keep)
    return keep


def prefill(model: ModelBackend, context: Sequence[int]) -> int:
    """Make `model` hold `context[:-1]`, reusing its cached prefix. Returns reused tokens."""
    keep = keep_prefix(model, context)
    if len(context) - 1 > keep:
        model.decode(context[keep:-1])
    return keep


def rollback(
    target: KVCache, n_past_before: int, num_accepted: int, drafter_caches: Iterable[KVCache], context: Sequence[int]
) -> None:
    """After verifying [last, d_1..d_k] from `n_past_before` and committing to `context`:
    the target keeps last + the accepted drafts; each drafter cache drops every position
    that is not a prefix of `context` (its rejected drafts)."""
    target.truncate(n_past_before + 1 + num_accepted)
    for kv in drafter_caches:
        kv.truncate(common_prefix_len(kv.tokens, context))


def check_invariants(
    target: KVCache,
    context: Sequence[int],
    drafter_caches: Iterable[tuple[KVCache, bool]] = (),
    *,
    full: bool = False,
) -> None:
    """Raise CacheInvariantError unless the caches match the rule above. `drafter_caches`:
    (cache, drafted this step); a drafter that did not draft may lag more. `full` compares
    every token (tests); otherwise lengths and the last tokens."""
    if target.n_past != len(context) - 1:
        raise CacheInvariantError(f"target holds {target.n_past} tokens, expected {len(context) - 1}")
    span = len(context) - 1 if full else min(8, len(context) - 1)
    if target.tokens[len(target.tokens) - span :] != list(context[len(context) - 1 - span : len(context) - 1]):
        raise CacheInvariantError("target KV tokens differ from the committed context")
    for kv, drafted in drafter_caches:
        lag = len(context) - kv.n_past
        if lag < 0 or (drafted and lag > MAX_DRAFTER_LAG):
            raise CacheInvariantError(f"drafter lags by {lag} tokens (allowed 0..{MAX_DRAFTER_LAG})")
        n = kv.n_past if full else min(8, kv.n_past)
        if kv.tokens[kv.n_past - n :] != list(context[kv.n_past - n : kv.n_past]):
            raise CacheInvariantError("drafter KV tokens differ from the committed context")
