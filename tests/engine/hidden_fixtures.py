"""Synthetic EAGLE-3, DFlash and DSpark drafter GGUFs for a real target (test helper).

No trained drafter for an offline target exists, so tests write small ones from a seed:
random weights in the shapes llama.cpp's `eagle3` / `dflash` architectures load, the
target's hidden size and tokenizer (copied from the target's header), and valid metadata
(target layer ids, block size, mask token, DSpark's Markov and confidence heads). Token
embeddings and the output head are not written: the drafters borrow the target's through
`ctx_other`, as the published EAGLE-3 drafters for Llama-3.1-8B do. Random weights accept
little; these files test the machinery, not the speedup.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

KINDS = ("eagle3", "dflash", "dspark")


@functools.lru_cache(maxsize=2)
def _target_header(target: Path) -> tuple[dict[str, Any], list[tuple[str, Any, GGUFValueType, GGUFValueType | None]]]:
    """(architecture hyperparameters, tokenizer fields as (key, value, type, sub_type))."""
    reader = GGUFReader(str(target))
    arch = str(reader.fields["general.architecture"].contents())
    hp: dict[str, Any] = {"arch": arch}
    tok: list[tuple[str, Any, GGUFValueType, GGUFValueType | None]] = []
    for key, field in reader.fields.items():
        if key.startswith(f"{arch}."):
            hp[key[len(arch) + 1 :]] = field.contents()
        elif key.startswith("tokenizer."):
            vtype = field.types[0]
            sub = field.types[1] if vtype == GGUFValueType.ARRAY and len(field.types) > 1 else None
            tok.append((key, field.contents(), vtype, sub))
    return hp, tok


def _normal(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """[rows, cols] float32 weights (numpy order; GGUF dims are reversed: {cols, rows})."""
    return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)


def write_hidden_drafter(
    path: Path,
    kind: str,
    target: Path,
    *,
    seed: int = 0,
    target_layers: tuple[int, ...] | None = None,
    hidden_size: int | None = None,
    n_ff: int = 768,
    block_size: int = 8,
    markov_rank: int = 32,
    mask_token_id: int = 0,
    d2t: np.ndarray | None = None,
) -> Path:
    """Write a `kind` drafter ("eagle3", "dflash", "dspark") for `target` to `path`.

    `target_layers` defaults to EAGLE-3's low/middle/high choice; `hidden_size` (the target
    hidden size the drafter claims) defaults to the target's, overridable to make a drafter
    made for another target. `d2t` (EAGLE-3): a reduced draft vocabulary, the target id of
    each draft row (absolute ids, as llama.cpp's converter writes them), with its own output
    head of that many rows.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    rng = np.random.default_rng(seed)
    hp, tok = _target_header(target)
    n_layer_tgt = int(hp["block_count"])
    n_embd_tgt = int(hidden_size or hp["embedding_length"])
    n_head = int(hp["attention.head_count"])
    n_head_kv = int(hp.get("attention.head_count_kv", n_head))
    head_dim = n_embd_tgt // n_head
    layers = target_layers or (2, n_layer_tgt // 2, n_layer_tgt - 3)
    arch = "eagle3" if kind == "eagle3" else "dflash"
    n_embd = n_embd_tgt  # draft hidden size; DFlash requires it to equal the target's
    n_in = len(layers) * n_embd_tgt

    w = GGUFWriter(str(path), arch)
    w.add_name(f"synthetic-{kind}-seed{seed}")
    w.add_uint32(f"{arch}.block_count", 1)
    w.add_uint32(f"{arch}.context_length", int(hp.get("context_length", 4096)))
    w.add_uint32(f"{arch}.embedding_length", n_embd)
    w.add_uint32(f"{arch}.feed_forward_length", n_ff)
    w.add_uint32(f"{arch}.attention.head_count", n_head)
    w.add_uint32(f"{arch}.attention.head_count_kv", n_head_kv)
    w.add_float32(f"{arch}.rope.freq_base", float(hp.get("rope.freq_base", 10000.0)))
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", float(hp.get("attention.layer_norm_rms_epsilon", 1e-5)))
    w.add_array(f"{arch}.target_layers", [int(x) for x in layers])
    if kind == "eagle3":
        w.add_uint32("eagle3.target_hidden_size", n_embd_tgt)
    else:
        w.add_uint32("dflash.block_size", block_size)
        w.add_bool("dflash.attention.causal", False)
        if kind == "dspark":
            w.add_bool("dflash.sample_from_anchor", True)
            w.add_bool("dflash.has_confidence_head", True)
    for key, value, vtype, sub in tok:
        if vtype == GGUFValueType.ARRAY:
            w.add_key_value(key, value, vtype, sub_type=sub)
        else:
            w.add_key_value(key, value, vtype)
    if kind != "eagle3":
        w.add_uint32("tokenizer.ggml.mask_token_id", mask_token_id)

    ones = np.ones(n_embd, dtype=np.float32)
    w.add_tensor("fc.weight", _normal(rng, n_embd, n_in))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("blk.0.attn_norm.weight", ones)
    w.add_tensor("blk.0.ffn_norm.weight", ones)
    attn_in = 2 * n_embd if kind == "eagle3" else n_embd
    w.add_tensor("blk.0.attn_q.weight", _normal(rng, n_head * head_dim, attn_in))
    w.add_tensor("blk.0.attn_k.weight", _normal(rng, n_head_kv * head_dim, attn_in))
    w.add_tensor("blk.0.attn_v.weight", _normal(rng, n_head_kv * head_dim, attn_in))
    w.add_tensor("blk.0.attn_output.weight", _normal(rng, n_embd, n_head * head_dim))
    w.add_tensor("blk.0.ffn_gate.weight", _normal(rng, n_ff, n_embd))
    w.add_tensor("blk.0.ffn_up.weight", _normal(rng, n_ff, n_embd))
    w.add_tensor("blk.0.ffn_down.weight", _normal(rng, n_embd, n_ff))
    if kind == "eagle3":
        w.add_tensor("blk.0.attn_norm_2.weight", ones)
        if d2t is not None:
            w.add_tensor("output.weight", _normal(rng, len(d2t), n_embd))
            w.add_tensor("d2t", np.asarray(d2t, dtype=np.int64), raw_dtype=GGMLQuantizationType.I64)
    else:
        w.add_tensor("enc.output_norm.weight", ones)
        w.add_tensor("blk.0.attn_q_norm.weight", np.ones(head_dim, dtype=np.float32))
        w.add_tensor("blk.0.attn_k_norm.weight", np.ones(head_dim, dtype=np.float32))
    if kind == "dspark":
        n_vocab = len(next(v for k, v, _, _ in tok if k == "tokenizer.ggml.tokens"))
        w.add_tensor("markov_w1.weight", _normal(rng, n_vocab, markov_rank))
        w.add_tensor("markov_w2.weight", _normal(rng, n_vocab, markov_rank))
        w.add_tensor("conf_proj.weight", _normal(rng, 1, n_embd + markov_rank))
        w.add_tensor("conf_proj.bias", np.zeros(1, dtype=np.float32))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
