"""Drafting mechanisms, one module each, all behind the `Drafter` interface (base.py):

- `model.ModelDrafter`: a small GGUF with the target's tokenizer.
- `ngram.PromptLookupDrafter`: continuations found in the context (prompt lookup), no q.
- `mtp.MtpDrafter`: the target's own multi-token-prediction (nextn) layers.
- `eagle3.Eagle3Drafter`, `dflash.DFlashDrafter` (also DSpark): heads that read the target's
  hidden states through a native driver (`features.FeatureDraftModel`).
- `base.NoDrafter`: plain decoding.

The step loop and the policies know only the interface; `offered` says which drafters an
engine has for its models.
"""

from __future__ import annotations

from localspec.engine.backend import ModelBackend
from localspec.engine.drafters.base import EMPTY, Drafter, DraftProposal, NoDrafter
from localspec.engine.drafters.dflash import DFlashDrafter
from localspec.engine.drafters.eagle3 import Eagle3Drafter
from localspec.engine.drafters.features import FeatureDraftModel
from localspec.engine.drafters.model import ModelDrafter
from localspec.engine.drafters.mtp import MtpDrafter
from localspec.engine.drafters.ngram import PromptLookupDrafter

__all__ = ["EMPTY", "DFlashDrafter", "DraftProposal", "Drafter", "Eagle3Drafter", "FeatureDraftModel", "ModelDrafter",
           "MtpDrafter", "NoDrafter", "PromptLookupDrafter", "hidden_drafter", "offered"]


def hidden_drafter(kind: str, model: FeatureDraftModel, n_vocab: int) -> Drafter:
    """The drafter of `kind` ("eagle3", "dflash", "dspark") over its native driver."""
    if kind == "eagle3":
        return Eagle3Drafter(model, n_vocab)
    if kind in ("dflash", "dspark"):
        return DFlashDrafter(model, n_vocab, dspark=kind == "dspark")
    raise ValueError(f"not a hidden-state drafter kind: {kind!r}")


def offered(
    target: ModelBackend,
    draft: ModelBackend | None,
    n_vocab: int,
    features: tuple[str, FeatureDraftModel] | None = None,
    *,
    mtp: bool = True,
    lazy_begin: bool = False,
) -> dict[str, Drafter]:
    """Every drafter an engine with these models can use, by name: prompt lookup always, the
    draft model when there is one (`n_vocab`: the columns target and drafter share), the
    target's own MTP layers when it has some (`n_layer_nextn`, llama.cpp targets), and a
    hidden-state drafter when `features` gives its (kind, driver). `mtp=False` leaves MTP out
    (its head drives one sequence of the target: not in a batch of several); `lazy_begin`: the
    draft model evaluates a new prompt when it first drafts, not when the request starts."""
    drafters: dict[str, Drafter] = {}
    if draft is not None:
        drafters["model"] = ModelDrafter(draft, n_vocab, lazy_begin=lazy_begin)
    if features is not None:
        kind, model = features
        drafters[kind] = hidden_drafter(kind, model, n_vocab)
    drafters["ngram"] = PromptLookupDrafter()
    if mtp and getattr(target, "n_layer_nextn", 0) > 0:
        from localspec.engine.llama.mtp import mtp_head

        drafters["mtp"] = MtpDrafter(mtp_head(target), n_vocab)
    return drafters
