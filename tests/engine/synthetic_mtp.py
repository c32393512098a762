"""Writes tiny synthetic `qwen35` GGUFs with one MTP (nextn) layer, for tests on real llama.cpp.

No real MTP model is reachable offline, so the tests build one: the Qwen2.5 tokenizer copied
from a local GGUF, random float32 weights from a seed, a 2-layer trunk and one nextn block.
What the loader needs was read from llama.cpp's `src/models/qwen35.cpp` and
`src/llama-model.cpp` (vendored by llama-cpp-python 0.3.36):

- keys: `qwen35.{context_length, embedding_length, block_count (trunk + nextn),
  nextn_predict_layers, feed_forward_length, attention.head_count(_kv), attention.key_length,
  attention.value_length, attention.layer_norm_rms_epsilon, rope.dimension_count,
  rope.dimension_sections, full_attention_interval, ssm.{conv_kernel, inner_size, state_size,
  time_step_rank, group_count}}` (the ssm keys are read even when no layer is recurrent);
- every trunk layer: attn_norm, post_attention_norm, ffn_{gate,up,down}; an attention layer
  attn_{q (query + gate), k, v, output, q_norm, k_norm}; a recurrent (gated delta net) layer
  attn_qkv, attn_gate, ssm_{conv1d, dt.bias, a, beta, alpha, norm, out};
- the nextn block (index n_layer): a full-attention block plus nextn.{eh_proj, enorm, hnorm}
  (embed_tokens / shared_head_* are optional: the trunk's embedding, head and output norm serve).

Every `qwen35` context gets a hybrid memory; with no recurrent layer at all
(`full_attention_interval=1`) the model loads but its first `llama_decode` aborts in
`llm_graph_input_mem_hybrid::set_input` (GGML_ASSERT(buffer): the recurrent part has no
tensors), so every fixture keeps at least one recurrent (gated delta net) layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

ARCH = "qwen35"


@dataclass(frozen=True)
class Tokenizer:
    """The `tokenizer.*` metadata of a GGUF, ready to write into another."""

    model: str
    pre: str
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    bos: int
    eos: int
    chat_template: str | None


def read_tokenizer(path: Path) -> Tokenizer:
    """The tokenizer of the GGUF at `path` (only its metadata is read)."""
    r = gguf.GGUFReader(str(path))

    def field(name: str) -> gguf.ReaderField:
        f = r.get_field(name)
        assert f is not None, f"{path} has no {name}"
        return f

    def text(name: str) -> str:
        return str(field(name).contents())

    tmpl = r.get_field("tokenizer.chat_template")
    return Tokenizer(
        model=text("tokenizer.ggml.model"),
        pre=text("tokenizer.ggml.pre"),
        tokens=list(field("tokenizer.ggml.tokens").contents()),
        token_types=[int(t) for t in field("tokenizer.ggml.token_type").contents()],
        merges=list(field("tokenizer.ggml.merges").contents()),
        bos=int(field("tokenizer.ggml.bos_token_id").contents()),
        eos=int(field("tokenizer.ggml.eos_token_id").contents()),
        chat_template=str(tmpl.contents()) if tmpl is not None else None,
    )


@dataclass(frozen=True)
class Shape:
    """Sizes of the synthetic model."""

    n_layer: int = 2
    """Trunk layers (the nextn block comes after them)."""
    full_attention_interval: int = 2
    """Every n-th trunk layer is attention, the others recurrent (1 is not loadable, see above)."""
    n_embd: int = 64
    n_ff: int = 128
    n_head: int = 2
    n_head_kv: int = 1
    head_dim: int = 16
    ssm_state: int = 16
    ssm_groups: int = 2
    ssm_v_heads: int = 2
    conv_kernel: int = 4
    scale: float = 0.5
    """Std of the random layer matrices (times 1/sqrt(fan-in)): how far the target is from a bigram model."""
    head_scale: float = 0.5
    """Std of the output matrix: larger gives peakier logits."""
    mtp_h_scale: float = 0.2
    """Weight of the target's hidden state in the nextn block (against the token's embedding)."""


def write_mtp_gguf(path: Path, tok: Tokenizer, seed: int, shape: Shape = Shape(), n_ctx: int = 4096) -> Path:
    """Write a random `qwen35` model with one nextn layer to `path`; returns `path`."""
    rng = np.random.default_rng(seed)
    s = shape
    n_vocab = len(tok.tokens)
    e, hd = s.n_embd, s.head_dim

    def mat(n_in: int, n_out: int, scale: float = s.scale) -> np.ndarray:
        # ggml {ne0=n_in, ne1=n_out} is numpy (n_out, n_in)
        return (rng.standard_normal((n_out, n_in)) * scale / np.sqrt(n_in)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = gguf.GGUFWriter(str(path), ARCH)
    w.add_name("localspec synthetic qwen35 MTP")
    w.add_context_length(n_ctx)
    w.add_embedding_length(e)
    w.add_block_count(s.n_layer + 1)
    w.add_uint32(f"{ARCH}.nextn_predict_layers", 1)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_rope_dimension_count(hd)
    w.add_array(f"{ARCH}.rope.dimension_sections", [hd // 4, hd // 8, hd // 8, 0])
    w.add_uint32(f"{ARCH}.full_attention_interval", s.full_attention_interval)
    w.add_uint32(f"{ARCH}.ssm.conv_kernel", s.conv_kernel)
    w.add_uint32(f"{ARCH}.ssm.inner_size", s.ssm_state * s.ssm_v_heads)
    w.add_uint32(f"{ARCH}.ssm.state_size", s.ssm_state)
    w.add_uint32(f"{ARCH}.ssm.time_step_rank", s.ssm_v_heads)
    w.add_uint32(f"{ARCH}.ssm.group_count", s.ssm_groups)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    w.add_tokenizer_model(tok.model)
    w.add_tokenizer_pre(tok.pre)
    w.add_token_list(tok.tokens)
    w.add_token_types(tok.token_types)
    w.add_token_merges(tok.merges)
    w.add_bos_token_id(tok.bos)
    w.add_eos_token_id(tok.eos)
    w.add_add_bos_token(False)
    if tok.chat_template:
        w.add_chat_template(tok.chat_template)

    # the residual stream is mostly the token's embedding (layers add small random terms), and
    # an untied random head reads it: the target is close to a bigram model, so the nextn block
    # (identity on the token part of eh_proj) often predicts what the target will: drafts are
    # both accepted and rejected
    w.add_tensor("token_embd.weight", rng.standard_normal((n_vocab, e)).astype(np.float32))
    w.add_tensor("output.weight", (rng.standard_normal((n_vocab, e)) * s.head_scale).astype(np.float32))
    w.add_tensor("output_norm.weight", norm(e))

    def attention(il: int) -> None:
        w.add_tensor(f"blk.{il}.attn_q.weight", mat(e, hd * s.n_head * 2))
        w.add_tensor(f"blk.{il}.attn_k.weight", mat(e, hd * s.n_head_kv))
        w.add_tensor(f"blk.{il}.attn_v.weight", mat(e, hd * s.n_head_kv))
        w.add_tensor(f"blk.{il}.attn_output.weight", mat(hd * s.n_head, e))
        w.add_tensor(f"blk.{il}.attn_q_norm.weight", norm(hd))
        w.add_tensor(f"blk.{il}.attn_k_norm.weight", norm(hd))

    def common(il: int) -> None:
        w.add_tensor(f"blk.{il}.attn_norm.weight", norm(e))
        w.add_tensor(f"blk.{il}.post_attention_norm.weight", norm(e))
        w.add_tensor(f"blk.{il}.ffn_gate.weight", mat(e, s.n_ff))
        w.add_tensor(f"blk.{il}.ffn_up.weight", mat(e, s.n_ff))
        w.add_tensor(f"blk.{il}.ffn_down.weight", mat(s.n_ff, e))

    key_dim = s.ssm_state * s.ssm_groups
    value_dim = s.ssm_state * s.ssm_v_heads
    for il in range(s.n_layer):
        common(il)
        if (il + 1) % s.full_attention_interval == 0:
            attention(il)
            continue
        w.add_tensor(f"blk.{il}.attn_qkv.weight", mat(e, key_dim * 2 + value_dim))
        w.add_tensor(f"blk.{il}.attn_gate.weight", mat(e, value_dim))
        w.add_tensor(f"blk.{il}.ssm_conv1d.weight", mat(s.conv_kernel, key_dim * 2 + value_dim, 1.0))
        w.add_tensor(f"blk.{il}.ssm_dt.bias", (0.1 * rng.standard_normal(s.ssm_v_heads)).astype(np.float32))
        w.add_tensor(f"blk.{il}.ssm_a", (-np.exp(0.1 * rng.standard_normal(s.ssm_v_heads))).astype(np.float32))
        w.add_tensor(f"blk.{il}.ssm_beta.weight", mat(e, s.ssm_v_heads))
        w.add_tensor(f"blk.{il}.ssm_alpha.weight", mat(e, s.ssm_v_heads))
        w.add_tensor(f"blk.{il}.ssm_norm.weight", norm(s.ssm_state))
        w.add_tensor(f"blk.{il}.ssm_out.weight", mat(value_dim, e))

    mtp = s.n_layer
    common(mtp)
    attention(mtp)
    eh = np.concatenate([np.eye(e, dtype=np.float32), mat(e, e, s.mtp_h_scale)], axis=1)  # [e | h] -> e
    w.add_tensor(f"blk.{mtp}.nextn.eh_proj.weight", eh)
    w.add_tensor(f"blk.{mtp}.nextn.enorm.weight", norm(e))
    w.add_tensor(f"blk.{mtp}.nextn.hnorm.weight", norm(e))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
