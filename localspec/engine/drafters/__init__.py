"""Drafting mechanisms, one module each, all behind the `Drafter` interface (base.py):

- `model.ModelDrafter`: a small GGUF with the target's tokenizer.
- `ngram.PromptLookupDrafter`: continuations found in the context (prompt lookup), no q.
- `base.NoDrafter`: plain decoding.

The step loop and the policies know only the interface; `offered` says which drafters an
engine has for its models.
"""

from __future__ import annotations

from localspec.engine.backend import ModelBackend
from localspec.engine.drafters.base import EMPTY, Drafter, DraftProposal, NoDrafter
from localspec.engine.drafters.model import ModelDrafter
from localspec.engine.drafters.ngram import PromptLookupDrafter

__all__ = ["EMPTY", "DraftProposal", "Drafter", "ModelDrafter", "NoDrafter", "PromptLookupDrafter", "offered"]


def offered(target: ModelBackend, draft: ModelBackend | None, n_vocab: int) -> dict[str, Drafter]:
    """Every drafter an engine with these models can use, by name: prompt lookup always, the
    draft model when there is one (`n_vocab`: the columns target and drafter share)."""
    drafters: dict[str, Drafter] = {}
    if draft is not None:
        drafters["model"] = ModelDrafter(draft, n_vocab)
    drafters["ngram"] = PromptLookupDrafter()
    return drafters
