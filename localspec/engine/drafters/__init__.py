"""Drafting mechanisms, one module each, all behind the `Drafter` interface (base.py):

- `model.ModelDrafter`: a small GGUF with the target's tokenizer.
- `ngram.PromptLookupDrafter`: continuations found in the context (prompt lookup), no q.
- `mtp.MtpDrafter`: the target's own multi-token-prediction (nextn) layers.
- `base.NoDrafter`: plain decoding.

The step loop and the policies know only the interface.
"""

from localspec.engine.drafters.base import EMPTY, Drafter, DraftProposal, NoDrafter
from localspec.engine.drafters.model import ModelDrafter
from localspec.engine.drafters.mtp import MtpDrafter
from localspec.engine.drafters.ngram import PromptLookupDrafter

__all__ = ["EMPTY", "DraftProposal", "Drafter", "ModelDrafter", "MtpDrafter", "NoDrafter", "PromptLookupDrafter"]
