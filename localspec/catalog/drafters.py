"""Which drafters fit a target: small same-family models, the target's own MTP layers,
and drafters trained for it (EAGLE-3 heads, DFlash and DSpark block drafters).

Drafter kinds the engine cannot run yet are data: they are listed, marked "not yet runnable
in localspec" with the reason, and never offered as a runnable pair. What the engine runs is
`localspec.types.DRAFTER_KINDS`; EAGLE-3/DFlash/DSpark records are runnable when a GGUF of
them exists and the target's llama.cpp graph exposes its hidden states; a small-model drafter
is runnable only when neither model keeps a recurrent state, because a rejected draft must be
dropped from both caches and llama.cpp cannot drop a suffix of a Gated DeltaNet state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from localspec.compat import CAPTURE_ARCHS
from localspec.types import DRAFTER_KINDS

if TYPE_CHECKING:
    from localspec.catalog.model import Catalog, CatalogModel

MAX_DRAFT_SHARE = 1 / 3
"""A small-model drafter has at most a third of the target's parameters, and reads at most a
third of what the target reads per token (beyond that its cost c eats the gain)."""

KINDS = ("model", "mtp", "eagle3", "dflash", "dspark")
"""Drafter kinds the catalog knows, in display order."""
KIND_LABELS = {"model": "small model", "mtp": "MTP", "eagle3": "EAGLE-3", "dflash": "DFlash", "dspark": "DSpark"}
BLOCK_KINDS = ("dflash", "dspark")
"""Kinds that draft a whole block in one forward pass (cost per step, not per token)."""
NOT_RUNNABLE = "not yet runnable in localspec"
HIDDEN_KINDS = ("eagle3", "dflash", "dspark")
"""Kinds that read the target's hidden states (runnable with a GGUF, on targets that expose them)."""


@dataclass(frozen=True)
class CatalogDrafter:
    """A drafter trained for particular targets (a `[[drafter]]` record of the catalog)."""

    id: str
    kind: str
    """One of KINDS other than "model"."""
    name: str
    targets: tuple[str, ...]
    """Catalog ids of the models it drafts for."""
    repo: str
    params: float
    """Parameters read per draft forward: per token for mtp/eagle3, per block for dflash/dspark."""
    source: str
    file: str = ""
    """GGUF file in `repo` when one exists ("" = safetensors only, or built into the target's file)."""
    size: int = 0
    sha256: str = ""
    file_source: str = ""
    """Where `size`/`sha256` come from ("hub <date>" after `models refresh`)."""
    block_size: int = 0
    """Tokens one forward drafts (dflash/dspark)."""
    ref: str = ""
    note: str = ""


def parse_drafter(d: dict[str, Any], model_ids: set[str]) -> CatalogDrafter | None:
    """A CatalogDrafter from its TOML table, keeping the targets this catalog has (None when it
    has none of them: a trimmed catalog); ValueError for an unknown kind."""
    kind = d["kind"]
    if kind not in KINDS or kind == "model":
        raise ValueError(f"drafter {d['id']} has kind {kind!r}; one of {', '.join(KINDS[1:])}")
    targets = tuple(t for t in d["targets"] if t in model_ids)
    if not targets:
        return None
    return CatalogDrafter(
        id=d["id"], kind=kind, name=d["name"], targets=targets, repo=d["repo"],
        params=float(d["params"]), source=d["source"], file=d.get("file", ""), size=int(d.get("size", 0)),
        sha256=d.get("sha256", ""), file_source=d.get("file_source", ""), block_size=int(d.get("block_size", 0)), ref=d.get("ref", ""), note=d.get("note", ""),
    )


@dataclass(frozen=True)
class DrafterOption:
    """One drafter for one target, runnable or not."""

    kind: str
    id: str
    """Catalog model id (kind "model"), a drafter record id, or "<target>:mtp" for built-in MTP."""
    label: str
    repo: str
    params: float
    """Parameters read per draft forward (see CatalogDrafter.params)."""
    runnable: bool
    why_not: str
    """Why localspec cannot run it ("" when it can)."""
    source: str
    block_size: int = 0
    note: str = ""

    @property
    def kind_label(self) -> str:
        """"MTP", "EAGLE-3", "small model"."""
        return KIND_LABELS.get(self.kind, self.kind)

    @property
    def status(self) -> str:
        """"runnable" or "not yet runnable in localspec: <reason>"."""
        return "runnable" if self.runnable else f"{NOT_RUNNABLE}: {self.why_not}"


def _recurrent_reason(models: list[CatalogModel]) -> str:
    stuck = [m.name for m in models if m.is_hybrid]
    if not stuck:
        return ""
    return (f"{' and '.join(stuck)} keep{'s' if len(stuck) == 1 else ''} a recurrent (Gated DeltaNet) state "
            "that cannot drop rejected draft tokens")


_MTP_WHY_NOT = ("load the GGUF that keeps the nextn layers as the target (-m) and pick --drafter mtp "
                "(not a separate drafter file)")


def _record_reason(catalog: Catalog, target: CatalogModel, r: CatalogDrafter) -> str:
    """Why localspec cannot run drafter record `r` for `target` ("" when it can)."""
    if r.kind == "mtp":
        return _MTP_WHY_NOT
    if r.kind not in DRAFTER_KINDS:
        return f"the {KIND_LABELS[r.kind]} drafter is being built"
    if r.kind in HIDDEN_KINDS:
        arch = catalog.families[target.family].arch.split()[0]
        if arch not in CAPTURE_ARCHS:
            return f"llama.cpp cannot hand out the hidden states of a {arch} target"
        if target.is_hybrid:
            return _recurrent_reason([target])
        if not r.file:
            return ("no GGUF of it is published: convert it with llama.cpp's convert_hf_to_gguf.py "
                    "(--target-model-dir <the target>) and load it with -md")
    return ""


def mtp_draft_params(model: CatalogModel) -> float:
    """Parameters one MTP draft token reads: the nextn layer(s) plus the output head (estimated:
    an average layer of the active parameters, the output head as n_vocab x n_embd)."""
    head = model.n_vocab * model.n_embd
    per_layer = max(0.0, model.active - 2 * head) / model.n_layer
    return model.mtp_layers * per_layer + head


def drafter_options(catalog: Catalog, target: CatalogModel) -> list[DrafterOption]:
    """Every drafter the catalog knows for `target`: runnable ones first, then by kind."""
    options: list[DrafterOption] = []
    for d in catalog.models:
        small = d.params <= target.params * MAX_DRAFT_SHARE and d.active <= target.active * MAX_DRAFT_SHARE
        if d.id == target.id or not small or catalog.pair_problems(target, d):
            continue
        reason = _recurrent_reason([target, d])
        options.append(DrafterOption(
            kind="model", id=d.id, label=d.name, repo=d.repo, params=d.active, runnable="model" in DRAFTER_KINDS
            and not reason, why_not=reason, source=f"same tokenizer as {target.name} (catalog)",
        ))
    records = [r for r in catalog.drafters if target.id in r.targets]
    for r in records:
        why = _record_reason(catalog, target, r)
        options.append(DrafterOption(
            kind=r.kind, id=r.id, label=f"{KIND_LABELS[r.kind]} {r.name}", repo=r.repo, params=r.params,
            runnable=not why, why_not=why, source=r.ref or r.source, block_size=r.block_size, note=r.note,
        ))
    if target.mtp_layers and not any(r.kind == "mtp" for r in records):
        options.append(DrafterOption(
            kind="mtp", id=f"{target.id}:mtp", label=f"MTP (built in, {target.mtp_layers} layer)", repo=target.repo,
            params=mtp_draft_params(target), runnable=False,
            why_not=_MTP_WHY_NOT, source=target.ref or target.source,
            note="needs a GGUF that keeps the nextn layers",
        ))
    return sorted(options, key=lambda o: (not o.runnable, KINDS.index(o.kind), o.params))


def runnable_model_drafters(catalog: Catalog, target: CatalogModel) -> list[CatalogModel]:
    """Catalog models the engine can use as drafters for `target` (kind "model", runnable)."""
    return [catalog.model(o.id) for o in drafter_options(catalog, target) if o.kind == "model" and o.runnable]
