"""Phase 3 of a step: turn the target's verify logits and the draft into output tokens,
through the chosen acceptance backend (kernels/), with randomness drawn here."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from localspec.engine.drafters import DraftProposal
from localspec.kernels import AcceptanceBackend, AcceptItem
from localspec.types import MAX_GAMMA, AcceptResult, SamplingParams

_NO_UNIFORMS = np.zeros(MAX_GAMMA + 1, dtype=np.float64)
"""Greedy acceptance draws no randomness: zeros for the longest verify batch (γ + 1 rows)."""


class Acceptor:
    """Calls the acceptance backend with the right shapes and checks its result."""

    def __init__(self, backend: AcceptanceBackend, n_vocab: int) -> None:
        self.backend = backend
        self.n_vocab = n_vocab
        """Columns shared by target and drafter; ids beyond are padding."""

    @property
    def name(self) -> str:
        """What actually runs (e.g. reference, torch-cpu, cuda)."""
        return self.backend.name

    def item(
        self,
        target_logits: npt.NDArray[np.float32],
        proposal: DraftProposal,
        params: SamplingParams,
        rng: np.random.Generator,
    ) -> AcceptItem:
        """One sequence's inputs to the backend: target_logits [k+1, V_target] view of its
        verify rows; draws its k+1 uniforms from `rng` (none when greedy)."""
        k = len(proposal.tokens)
        logits = target_logits if target_logits.shape[1] == self.n_vocab else target_logits[:, : self.n_vocab]
        uniforms = _NO_UNIFORMS[: k + 1] if params.greedy else rng.random(k + 1)
        drafts = np.fromiter(proposal.tokens, dtype=np.int64, count=k)
        return AcceptItem(logits, drafts, proposal.logits, uniforms, params)

    def accept(
        self,
        target_logits: npt.NDArray[np.float32],
        proposal: DraftProposal,
        params: SamplingParams,
        rng: np.random.Generator,
    ) -> AcceptResult:
        """target_logits: [k+1, V_target] view of the verify batch; returns >= 1 token."""
        return self.accept_one(self.item(target_logits, proposal, params, rng))

    def accept_one(self, item: AcceptItem) -> AcceptResult:
        """One sequence's acceptance (`item` from `item()`)."""
        return _checked(self.backend.accept(*item.args()), _k(item))

    def accept_batch(self, items: Sequence[AcceptItem]) -> list[AcceptResult]:
        """Several sequences' acceptance in one backend call (the CUDA kernel: one launch);
        result i is what `accept` gives for item i."""
        results = self.backend.accept_batch(items)
        assert len(results) == len(items), (len(results), len(items))
        return [_checked(r, _k(it)) for r, it in zip(results, items, strict=True)]


def _k(item: AcceptItem) -> int:
    return int(np.asarray(item.draft_tokens).reshape(-1).shape[0])


def _checked(result: AcceptResult, k: int) -> AcceptResult:
    # llama.cpp: GGML_ASSERT(ids.size() > 0) -- there is always at least one token
    assert len(result.tokens) == result.num_accepted + 1 and 0 <= result.num_accepted <= k, result
    return result
