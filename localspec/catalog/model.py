"""Catalog data: known families, Hub repos, GGUF files per quantization, sizes,
architecture figures (KV-cache sizing; dense, MoE with active parameters, hybrid recurrent
layers, built-in MTP layers), tokenizer identities and the drafters made for each target
(models/catalog.toml).

Every figure carries its provenance (`source`): "measured" (computed here from a local
file), "model card" (as published upstream, not checked here), "estimated" (computed, e.g.
params × bits per weight) or "hub YYYY-MM-DD" (written by `localspec models refresh`); `ref`
gives the address the figures were read from.
`models refresh` writes a user copy (`user_catalog_path()`) that overrides the packaged one.

Pair compatibility uses THE rule of `compat.pair_problems` on VocabInfo records built from
the catalog, plus one condition for metadata: when a fingerprint is unknown, two entries are
compatible only if the catalog says they share a tokenizer id. Also here: the registry of
local GGUF paths added with `localspec models add`.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localspec.catalog.drafters import CatalogDrafter, parse_drafter
from localspec.compat import pair_problems
from localspec.errors import LocalSpecError, ModelNotFoundError
from localspec.paths import data_dir, packaged
from localspec.types import VocabInfo

log = logging.getLogger(__name__)

SCHEMA = 2
"""2: MoE/hybrid/MTP architecture fields, family chat-template facts, [[drafter]] records."""
KV_BYTES_PER_ELEMENT = 2
"""llama.cpp's default KV cache type is f16."""

QUANT_PATTERN = re.compile(
    r"(?<![A-Za-z0-9])(IQ[1-4]_[A-Z]+|Q[2-8]_K(?:_[SML]|_XL)?|Q[4-8]_[01]|BF16|F16|F32)(?![A-Za-z0-9])",
    re.IGNORECASE,
)


class CatalogError(LocalSpecError):
    """The catalog file is unreadable or inconsistent."""


@dataclass(frozen=True)
class TokenizerInfo:
    """One tokenizer the catalog knows (shared by every model that names its `id`)."""

    id: str
    model: str
    """`tokenizer.ggml.model` (gpt2, llama)."""
    pre: str | None
    n_vocab: int
    bos: int | None
    eos: int | None
    eog: tuple[int, ...]
    fingerprint: str
    """gguf_info.vocab_fingerprint of the token texts; "" = unknown (refresh fills it)."""
    source: str
    note: str = ""


@dataclass(frozen=True)
class CatalogFile:
    """One GGUF file of a model at one quantization."""

    quant: str
    file: str
    size: int
    sha256: str
    """The Hub's LFS oid when known, else ""."""
    source: str
    repo: str
    """Hub repo holding the file ("" for files only the offline store carries)."""
    offline: str | None = None
    """Id in models/offline.toml when the local store can install this exact file."""
    parts: int = 1
    """Split GGUF: `file` is the first of `parts` files and `size` is their total."""


@dataclass(frozen=True)
class CatalogModel:
    """One model (one set of weights) with its architecture and files."""

    id: str
    family: str
    name: str
    tokenizer: str
    repo: str
    params: float
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ctx_train: int
    n_vocab: int
    source: str
    files: tuple[CatalogFile, ...]
    sliding_window: int = 0
    """Sliding-window size of local attention layers (Gemma 3), 0 = every layer global."""
    swa_pattern: int = 0
    """Every `swa_pattern`-th layer is global when sliding_window > 0."""
    active_params: float = 0.0
    """Parameters one token reads: a MoE's shared part plus the experts it is routed to (0 = params)."""
    n_expert: int = 0
    """Routed experts per MoE layer (0 = dense)."""
    n_expert_used: int = 0
    """Experts each token is routed to (top-k)."""
    expert_params: float = 0.0
    """Parameters of all routed experts together (the part a verify batch reads more of)."""
    n_layer_kv: int = 0
    """Layers with a KV cache (0 = all): a hybrid keeps one only on its attention layers."""
    recurrent_layers: int = 0
    """Layers with a recurrent state (Gated DeltaNet): a suffix of it cannot be dropped."""
    mtp_layers: int = 0
    """Multi-token-prediction (nextn) layers trained into the model, usable as a drafter."""
    ref: str = ""
    """Address the architecture figures were read from."""

    @property
    def active(self) -> float:
        """Parameters read per decoded token (= params for a dense model)."""
        return self.active_params or self.params

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model."""
        return self.n_expert > 0

    @property
    def is_hybrid(self) -> bool:
        """True when some layers keep a recurrent state instead of a KV cache."""
        return self.recurrent_layers > 0

    @property
    def arch_kind(self) -> str:
        """"dense", "MoE", "hybrid" or "hybrid MoE"."""
        kind = "MoE" if self.is_moe else "dense"
        return f"hybrid {kind}" if self.is_hybrid and self.is_moe else ("hybrid" if self.is_hybrid else kind)

    def describe_arch(self) -> str:
        """"MoE 35B, 3B active · hybrid (10/40 attention layers) · 1 MTP layer"."""
        size = f"{self.params / 1e9:.3g}B"
        parts = [f"MoE {size}, {self.active / 1e9:.3g}B active ({self.n_expert_used}/{self.n_expert} experts)"
                 if self.is_moe else f"dense {size}"]
        if self.is_hybrid:
            parts.append(f"hybrid ({self.n_layer - self.recurrent_layers}/{self.n_layer} attention layers)")
        if self.mtp_layers:
            parts.append(f"{self.mtp_layers} MTP layer{'s' if self.mtp_layers > 1 else ''}")
        return " · ".join(parts)

    def file_for(self, quant: str) -> CatalogFile:
        """The file at `quant` (case-insensitive), or ModelNotFoundError listing the known ones."""
        for f in self.files:
            if f.quant.lower() == quant.lower():
                return f
        known = ", ".join(f.quant for f in self.files)
        raise ModelNotFoundError(f"{self.id} has no {quant} file in the catalog; known: {known}")

    def kv_bytes(self, n_ctx: int, n_layers: int | None = None) -> int:
        """f16 K+V cache bytes at `n_ctx` tokens for `n_layers` layers (default all).

        Sliding-window layers hold min(n_ctx, window) positions (llama.cpp's iSWA cache); a
        hybrid's cache sits on its attention layers only, so `n_layers` of its layers hold
        that share of it.
        """
        layers = self.n_layer if n_layers is None else n_layers
        per_pos = 2 * self.n_head_kv * self.head_dim * KV_BYTES_PER_ELEMENT
        if self.n_layer_kv and self.n_layer_kv < self.n_layer:
            return int(per_pos * self.n_layer_kv * n_ctx * layers / self.n_layer)
        if self.sliding_window and self.swa_pattern:
            n_global = math.ceil(layers / self.swa_pattern)
            n_local = layers - n_global
            return per_pos * (n_global * n_ctx + n_local * min(n_ctx, self.sliding_window))
        return per_pos * layers * n_ctx


@dataclass(frozen=True)
class Family:
    """A model family: display name, the tasks it is meant for, its default tokenizer."""

    id: str
    name: str
    tokenizer: str
    tasks: tuple[str, ...]
    license: str
    arch: str
    template: str = ""
    """Chat template in the GGUF (what it expects: roles, thinking switch)."""
    tools: bool = False
    """The template renders tool definitions and tool calls."""
    ref: str = ""


@dataclass(frozen=True)
class Catalog:
    """The loaded catalog."""

    tokenizers: dict[str, TokenizerInfo]
    families: dict[str, Family]
    models: tuple[CatalogModel, ...]
    origin: str
    """Where it was read from (packaged file or the user copy)."""
    raw: dict[str, Any]
    """The parsed TOML (what `models refresh` edits and writes back)."""
    drafters: tuple[CatalogDrafter, ...] = ()
    """Drafters made for particular targets (MTP files, EAGLE-3, DFlash, DSpark)."""

    def model(self, model_id: str) -> CatalogModel:
        """The model called `model_id` (ModelNotFoundError lists close matches)."""
        for m in self.models:
            if m.id == model_id:
                return m
        close = [m.id for m in self.models if model_id.split("-")[0].lower() in m.id]
        hint = f" Did you mean: {', '.join(close[:5])}?" if close else " See `localspec models list --catalog`."
        raise ModelNotFoundError(f"no model {model_id!r} in the catalog.{hint}")

    def tokenizer_of(self, model: CatalogModel) -> TokenizerInfo:
        """The tokenizer record a model names."""
        return self.tokenizers[model.tokenizer]

    def vocab_info(self, model: CatalogModel) -> VocabInfo:
        """A VocabInfo built from catalog metadata, for `compat.pair_problems`."""
        tok = self.tokenizer_of(model)
        return VocabInfo(
            path=f"catalog:{model.id}",
            name=model.name,
            tokenizer_model=tok.model,
            tokenizer_pre=tok.pre,
            n_vocab=model.n_vocab,
            bos_token_id=tok.bos,
            eos_token_id=tok.eos,
            eog_token_ids=frozenset(tok.eog),
            fingerprint=tok.fingerprint,
            architecture=self.families[model.family].arch,
        )

    def pair_problems(self, target: CatalogModel, draft: CatalogModel) -> list[str]:
        """Why `draft` cannot draft for `target` per the catalog (empty = compatible)."""
        problems = pair_problems(self.vocab_info(target), self.vocab_info(draft))
        t_tok, d_tok = self.tokenizer_of(target), self.tokenizer_of(draft)
        if t_tok.id != d_tok.id and not (t_tok.fingerprint and t_tok.fingerprint == d_tok.fingerprint):
            problems.append(
                f"tokenizers {t_tok.id!r} and {d_tok.id!r} are not known to be the same "
                "(fingerprint unknown or different)"
            )
        return problems

    def match_file(self, filename: str) -> tuple[CatalogModel, CatalogFile] | None:
        """The catalog entry whose file name is `filename` (case-insensitive), if any."""
        name = os.path.basename(filename).lower()
        for m in self.models:
            for f in m.files:
                if f.file.lower() == name:
                    return m, f
        return None


def guess_quant(filename: str) -> str | None:
    """The quantization named in a GGUF file name (`...-Q4_K_M.gguf` -> Q4_K_M)."""
    found = QUANT_PATTERN.findall(os.path.basename(filename))
    return found[-1].upper() if found else None


def user_catalog_path() -> Path:
    """The user copy written by `models refresh`; it overrides the packaged catalog."""
    return data_dir() / "catalog.toml"


def packaged_catalog_text() -> str:
    """The catalog shipped in the wheel."""
    return packaged("models", "catalog.toml").read_text(encoding="utf-8")


def load_catalog(path: str | os.PathLike[str] | None = None) -> Catalog:
    """Read the catalog: `path`, else the user copy when present, else the packaged one."""
    if path is not None:
        return _load_cached(str(path), _mtime(str(path)))
    user = user_catalog_path()
    if user.is_file():
        try:
            cat = _load_cached(str(user), _mtime(str(user)))
            if cat.raw.get("schema") == SCHEMA:
                return cat
            log.warning("ignoring %s: schema %s, expected %s", user, cat.raw.get("schema"), SCHEMA)
        except CatalogError as exc:
            log.warning("ignoring the user catalog: %s", exc)
    return parse_catalog(tomllib.loads(packaged_catalog_text()), "packaged")


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError as exc:
        raise CatalogError(f"cannot read catalog {path}: {exc}") from exc


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int) -> Catalog:
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(
            f"catalog {path} is unreadable ({exc}); delete it to use the packaged catalog"
        ) from exc
    return parse_catalog(data, path)


def parse_catalog(data: dict[str, Any], origin: str) -> Catalog:
    """Build a Catalog from parsed TOML; CatalogError names the first bad entry."""
    try:
        tokenizers = {
            tid: TokenizerInfo(
                id=tid, model=t["model"], pre=t.get("pre"), n_vocab=int(t["n_vocab"]),
                bos=t.get("bos"), eos=t.get("eos"), eog=tuple(t.get("eog", ())),
                fingerprint=t.get("fingerprint", ""), source=t["source"], note=t.get("note", ""),
            )
            for tid, t in data["tokenizer"].items()
        }
        families = {
            f["id"]: Family(
                id=f["id"], name=f["name"], tokenizer=f["tokenizer"], tasks=tuple(f["tasks"]),
                license=f.get("license", ""), arch=f["arch"], template=f.get("template", ""),
                tools=bool(f.get("tools", False)), ref=f.get("ref", ""),
            )
            for f in data["family"]
        }
        models = tuple(_parse_model(m, families, tokenizers) for m in data["model"])
        ids = {m.id for m in models}
        drafters = tuple(x for d in data.get("drafter", ()) if (x := parse_drafter(d, ids)) is not None)
    except (KeyError, TypeError, ValueError) as exc:
        raise CatalogError(f"catalog {origin} is malformed: {exc!r}") from exc
    return Catalog(tokenizers, families, models, origin, data, drafters)


def _parse_model(m: dict[str, Any], families: dict[str, Family], tokenizers: dict[str, TokenizerInfo]) -> CatalogModel:
    family = families[m["family"]]
    tok_id = m.get("tokenizer", family.tokenizer)
    if tok_id not in tokenizers:
        raise ValueError(f"model {m['id']} names unknown tokenizer {tok_id!r}")
    files = tuple(
        CatalogFile(
            quant=f["quant"], file=f["file"], size=int(f["size"]), sha256=f.get("sha256", ""),
            source=f["source"], repo=f.get("repo", m["repo"]), offline=f.get("offline"), parts=int(f.get("parts", 1)),
        )
        for f in m["files"]
    )
    return CatalogModel(
        id=m["id"], family=family.id, name=m["name"], tokenizer=tok_id, repo=m["repo"],
        params=float(m["params"]), n_layer=int(m["n_layer"]), n_embd=int(m["n_embd"]),
        n_head=int(m["n_head"]), n_head_kv=int(m["n_head_kv"]), head_dim=int(m["head_dim"]),
        n_ctx_train=int(m["n_ctx_train"]), n_vocab=int(m.get("n_vocab", tokenizers[tok_id].n_vocab)),
        source=m["source"], files=files, sliding_window=int(m.get("sliding_window", 0)),
        swa_pattern=int(m.get("swa_pattern", 0)), active_params=float(m.get("active_params", 0.0)),
        n_expert=int(m.get("n_expert", 0)), n_expert_used=int(m.get("n_expert_used", 0)),
        expert_params=float(m.get("expert_params", 0.0)), n_layer_kv=int(m.get("n_layer_kv", 0)),
        recurrent_layers=int(m.get("recurrent_layers", 0)), mtp_layers=int(m.get("mtp_layers", 0)), ref=m.get("ref", ""),
    )
