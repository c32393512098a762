"""Phase 3 of a step: turn the target's verify logits and the draft into output tokens,
through the chosen acceptance backend (kernels/), with randomness drawn here."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from localspec.engine.drafters import DraftProposal
from localspec.kernels import AcceptanceBackend
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

    def accept(
        self,
        target_logits: npt.NDArray[np.float32],
        proposal: DraftProposal,
        params: SamplingParams,
        rng: np.random.Generator,
    ) -> AcceptResult:
        """target_logits: [k+1, V_target] view of the verify batch; returns >= 1 token."""
        k = len(proposal.tokens)
        logits = target_logits if target_logits.shape[1] == self.n_vocab else target_logits[:, : self.n_vocab]
        uniforms = _NO_UNIFORMS[: k + 1] if params.greedy else rng.random(k + 1)
        drafts = np.fromiter(proposal.tokens, dtype=np.int64, count=k)
        result = self.backend.accept(logits, drafts, proposal.logits, uniforms, params)
        # llama.cpp: GGML_ASSERT(ids.size() > 0) -- there is always at least one token
        assert len(result.tokens) == result.num_accepted + 1 and 0 <= result.num_accepted <= k, result
        return result
