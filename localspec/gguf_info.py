"""Read a GGUF file's header (metadata only, no weights) with the `gguf` package.

Used before any weights load: the compatibility check, the catalog's vocabulary
fingerprints, `models list`. Results are cached by (path, size, mtime) because parsing
150k token strings takes seconds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localspec.errors import ModelNotFoundError, ModelLoadError
from localspec.paths import cache_dir
from localspec.types import VocabInfo

log = logging.getLogger(__name__)

_PAD_TOKEN = re.compile(r"^\[PAD\d+\]$|^<\|PAD_TOKEN\|>$|^<pad_\d+>$")
"""Padding entries converters append to round the vocabulary up; ignored by the fingerprint."""

_EOG_KEYS = (
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
)


def _header_reader(path: str) -> Any:
    """A GGUFReader that parses the key/value header and tensor infos but maps no tensor data,
    so a header-only or truncated file (a split's first part) can still be read."""
    from gguf import GGUFReader

    class HeaderReader(GGUFReader):
        def _build_tensors(self, start_offs: int, fields: list[Any]) -> None:
            self.tensors = []
            self.tensor_dims = {
                str(bytes(f.parts[1]), encoding="utf-8"): tuple(int(d) for d in f.parts[3]) for f in fields
            }

    return HeaderReader(path)


def vocab_fingerprint(tokens: list[str]) -> str:
    """sha256 over the token texts in id order, trailing padding entries dropped.

    Two tokenizers with the same fingerprint have the same token text for every real id,
    which is what a drafter needs to draft for a target.
    """
    end = len(tokens)
    while end and _PAD_TOKEN.match(tokens[end - 1]):
        end -= 1
    h = hashlib.sha256()
    for t in tokens[:end]:
        h.update(t.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """All scalar/string metadata of a GGUF header (arrays other than tokens omitted)."""
    info, _, _ = _read(str(path))
    return info


def read_tokens(path: str | os.PathLike[str]) -> list[str]:
    """The token texts of a GGUF's tokenizer, in id order."""
    _, tokens, _ = _read(str(path))
    return tokens


def tensor_dims(path: str | os.PathLike[str]) -> dict[str, tuple[int, ...]]:
    """Every tensor's name and dimensions (GGUF order: ne[0] first), from the header."""
    _, _, dims = _read(str(path))
    return dims


def _read(path: str) -> tuple[dict[str, Any], list[str], dict[str, tuple[int, ...]]]:
    p = Path(path)
    if not p.is_file():
        raise ModelNotFoundError(f"GGUF file not found: {path}")
    st = p.stat()
    return _read_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read_cached(path: str, size: int, mtime_ns: int) -> tuple[dict[str, Any], list[str], dict[str, tuple[int, ...]]]:
    try:
        reader = _header_reader(path)
    except Exception as exc:  # the gguf package raises ValueError/struct errors on junk
        raise ModelLoadError(f"{path} is not a readable GGUF file ({exc}); re-download it") from exc
    meta: dict[str, Any] = {}
    tokens: list[str] = []
    for key, field in reader.fields.items():
        if key == "tokenizer.ggml.tokens":
            tokens = [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data]
            continue
        if key in ("tokenizer.ggml.merges", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            continue
        try:
            value = field.contents()
        except Exception:  # unusual types: skip rather than fail the whole header
            continue
        if isinstance(value, list) and len(value) > 64:
            continue
        meta[key] = value
    return meta, tokens, dict(getattr(reader, "tensor_dims", {}))


def vocab_info(path: str | os.PathLike[str], *, use_cache: bool = True) -> VocabInfo:
    """The tokenizer facts of one GGUF file, from its header alone."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise ModelNotFoundError(
            f"GGUF file not found: {path}. Check the path, or see `localspec models list`."
        )
    st = p.stat()
    key = hashlib.sha256(f"{p}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:32]
    cache_file = cache_dir() / "vocab" / f"{key}.json"
    if use_cache and cache_file.is_file():
        try:
            return _from_json(json.loads(cache_file.read_text()), str(p))
        except (ValueError, KeyError, TypeError):
            log.debug("ignoring unreadable vocab cache %s", cache_file)
    meta, tokens, _ = _read(str(p))
    eog = {int(meta[k]) for k in _EOG_KEYS if isinstance(meta.get(k), int)}
    info = VocabInfo(
        path=str(p),
        name=str(meta.get("general.name") or p.name),
        tokenizer_model=str(meta.get("tokenizer.ggml.model", "unknown")),
        tokenizer_pre=meta.get("tokenizer.ggml.pre"),
        n_vocab=len(tokens),
        bos_token_id=_opt_int(meta.get("tokenizer.ggml.bos_token_id")),
        eos_token_id=_opt_int(meta.get("tokenizer.ggml.eos_token_id")),
        eog_token_ids=frozenset(eog),
        fingerprint=vocab_fingerprint(tokens),
        architecture=meta.get("general.architecture"),
        chat_template=meta.get("tokenizer.chat_template"),
    )
    if use_cache:
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(_to_json(info)))
            os.replace(tmp, cache_file)
        except OSError:
            log.debug("could not write vocab cache %s", cache_file)
    return info


def _opt_int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) else None


def _to_json(info: VocabInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "tokenizer_model": info.tokenizer_model,
        "tokenizer_pre": info.tokenizer_pre,
        "n_vocab": info.n_vocab,
        "bos_token_id": info.bos_token_id,
        "eos_token_id": info.eos_token_id,
        "eog_token_ids": sorted(info.eog_token_ids),
        "fingerprint": info.fingerprint,
        "architecture": info.architecture,
        "chat_template": info.chat_template,
    }


def _from_json(d: dict[str, Any], path: str) -> VocabInfo:
    return VocabInfo(
        path=path,
        name=d["name"],
        tokenizer_model=d["tokenizer_model"],
        tokenizer_pre=d["tokenizer_pre"],
        n_vocab=int(d["n_vocab"]),
        bos_token_id=d["bos_token_id"],
        eos_token_id=d["eos_token_id"],
        eog_token_ids=frozenset(d["eog_token_ids"]),
        fingerprint=d["fingerprint"],
        architecture=d["architecture"],
        chat_template=d["chat_template"],
    )


HIDDEN_DRAFTER_KINDS = ("eagle3", "dflash", "dspark")
"""Drafters that read the target's hidden states: EAGLE-3, DFlash, DSpark (DFlash + Markov head)."""


@dataclass(frozen=True)
class HiddenDrafterInfo:
    """What an EAGLE-3 / DFlash / DSpark drafter GGUF says about the target it was made for."""

    kind: str
    """One of HIDDEN_DRAFTER_KINDS."""
    target_layers: tuple[int, ...]
    """Target layers whose inputs it reads."""
    target_hidden_size: int | None
    """Hidden size of the target it was made for."""
    block_size: int | None
    """DFlash/DSpark: the trained block size."""
    d2t_size: int | None
    """Reduced draft vocabulary: entries of its draft-to-target map (None: the full vocabulary)."""
    has_confidence_head: bool


def hidden_drafter_info(path: str | os.PathLike[str]) -> HiddenDrafterInfo | None:
    """The drafter facts of a GGUF from its header, or None if it is no hidden-state drafter."""
    meta, _, dims = _read(str(path))
    arch = meta.get("general.architecture")
    if arch not in ("eagle3", "dflash"):
        return None
    dspark = arch == "dflash" and "markov_w1.weight" in dims
    layers = meta.get(f"{arch}.target_layers") or []
    hidden = meta.get("eagle3.target_hidden_size") if arch == "eagle3" else meta.get("dflash.embedding_length")
    d2t = dims.get("d2t")
    return HiddenDrafterInfo(
        kind="dspark" if dspark else str(arch),
        target_layers=tuple(int(x) for x in layers) if isinstance(layers, list) else (),
        target_hidden_size=int(hidden) if isinstance(hidden, int) else None,
        block_size=_opt_int(meta.get("dflash.block_size")),
        d2t_size=int(d2t[0]) if d2t else None,
        has_confidence_head=dspark and "conf_proj.weight" in dims,
    )


def read_d2t(path: str | os.PathLike[str]) -> list[int] | None:
    """The target token id of each draft row of a reduced-vocabulary drafter (its `d2t`
    tensor, a few hundred KB), or None when it has none."""
    if "d2t" not in tensor_dims(path):
        return None
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # the gguf package raises ValueError/struct errors on junk
        raise ModelLoadError(f"{path} is not a readable GGUF file ({exc}); re-download it") from exc
    for t in reader.tensors:
        if t.name == "d2t":
            return [int(x) for x in t.data.reshape(-1)]
    return None


def kv_bytes_per_token(path: str | os.PathLike[str]) -> int:
    """Bytes of f16 K and V cache one token takes in a model (0 when the header does not
    say): 2 · layers · KV heads · (key + value head size) / 2 · 2 bytes."""
    meta = read_metadata(path)
    arch = str(meta.get("general.architecture", ""))

    def num(key: str) -> int:
        v = meta.get(f"{arch}.{key}")
        if isinstance(v, list):  # per-layer values (e.g. head_count_kv): the largest
            v = max((int(x) for x in v), default=0)
        return int(v) if isinstance(v, (int, float)) else 0

    layers, heads, embd = num("block_count"), num("attention.head_count"), num("embedding_length")
    kv_heads = num("attention.head_count_kv") or heads
    if not (layers and heads and embd):
        return 0
    k = num("attention.key_length") or embd // heads
    v = num("attention.value_length") or embd // heads
    return layers * kv_heads * (k + v) * 2
