"""Warm-up at load: page the weights in and measure, before the first request, the costs the
adaptive policy would otherwise learn during it (llama.cpp's server runs a warm-up decode
for the first reason too).

Without it the first requests pay: the first calls after loading are slow (weights still
paging in), and the policy must spend steps on measuring — one step with the draft model,
which at that point evaluates the whole prompt first. Measured here on a short text:

- the target's one-row call (three times, after one discarded warm-up call) and its calls of
  2..max_rows rows, after a prefix (a verify batch sits behind some context);
- the draft model's batch over the same prefix and its one-token calls.

Both models end empty (every position dropped), as after loading.
"""

from __future__ import annotations

import logging

from localspec.engine.adaptive import PolicyState
from localspec.engine.backend import ModelBackend

log = logging.getLogger(__name__)

TEXT = "The quick brown fox jumps over the lazy dog, then it runs back home and sleeps until the morning. " * 2
PREFIX = 24
"""Tokens of context before the measured calls."""
SINGLE_CALLS = 3


def _timed(model: ModelBackend, tokens: list[int], all_logits: bool = False) -> float:
    t0 = model.t_decode_s
    model.decode(tokens, all_logits=all_logits)
    return model.t_decode_s - t0


def calibrate(target: ModelBackend, draft: ModelBackend | None, state: PolicyState, max_rows: int) -> None:
    """Measure into `state` (its verify cost, and the `model` drafter's cost when `draft` is
    given); `max_rows`: the largest verify batch to time (γ + 1)."""
    tokens = target.tokenize(TEXT, add_special=False)
    need = PREFIX + max(max_rows, SINGLE_CALLS + 1)
    if len(tokens) < need:
        tokens = (tokens * (need // max(1, len(tokens)) + 1))[:need]
    prefix = tokens[:PREFIX]
    try:
        target.decode(prefix)  # the warm-up proper: pages the weights in, not timed
        target.decode([tokens[PREFIX]])
        target.truncate(PREFIX)
        for i in range(SINGLE_CALLS):
            state.verify.observe(1, _timed(target, [tokens[PREFIX + i]]))
            target.truncate(PREFIX)
        for n in range(2, max_rows + 1):
            state.verify.observe(n, _timed(target, tokens[PREFIX : PREFIX + n], all_logits=True))
            target.truncate(PREFIX)
    finally:
        target.truncate(0)
    if draft is None:
        return
    cost = state.draft_cost("model")
    try:
        draft.decode(prefix[:4])  # warm-up, not timed
        draft.truncate(0)
        cost.observe(PREFIX, _timed(draft, prefix))
        for i in range(SINGLE_CALLS):
            cost.observe(1, _timed(draft, [tokens[PREFIX + i]]))
    finally:
        draft.truncate(0)
    log.debug("calibrated: target one row %.1f ms, %d rows %.2f×; draft one token %.1f ms",
              state.verify.predict(1) * 1e3, max_rows, state.verify.ratio(max_rows), cost.predict(1) * 1e3)
