"""Can this drafter draft for this target? Decided from GGUF headers, before weights load.

The rule follows llama.cpp's `common_speculative_are_compatible`: same tokenizer model,
same BOS/EOS (and end-of-generation set), vocabulary sizes within 128 of each other
(converters pad vocabularies differently, e.g. Qwen2.5 151,936 vs 152,064), and identical
token text for every id the two share. The catalog and the recommender apply the same
rule to catalog metadata (fingerprints), so nothing suggests a pair the engine refuses.
"""

from __future__ import annotations

import os

from localspec.errors import IncompatibleModelsError
from localspec.types import VocabInfo

MAX_VOCAB_SIZE_DIFFERENCE = 128


def pair_problems(target: VocabInfo, draft: VocabInfo) -> list[str]:
    """Every reason `draft` cannot draft for `target`, from metadata alone (empty = compatible)."""
    problems: list[str] = []
    if target.tokenizer_model != draft.tokenizer_model:
        problems.append(
            f"tokenizer model {target.tokenizer_model!r} vs {draft.tokenizer_model!r}"
        )
    if target.bos_token_id != draft.bos_token_id:
        problems.append(f"BOS token id {target.bos_token_id} vs {draft.bos_token_id}")
    if target.eos_token_id != draft.eos_token_id:
        problems.append(f"EOS token id {target.eos_token_id} vs {draft.eos_token_id}")
    if target.eog_token_ids and draft.eog_token_ids and target.eog_token_ids != draft.eog_token_ids:
        problems.append(
            f"end-of-generation tokens {sorted(target.eog_token_ids)} vs {sorted(draft.eog_token_ids)}"
        )
    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > MAX_VOCAB_SIZE_DIFFERENCE:
        problems.append(
            f"vocabulary size {target.n_vocab:,} vs {draft.n_vocab:,} "
            f"(differ by {diff:,} > {MAX_VOCAB_SIZE_DIFFERENCE})"
        )
    if target.fingerprint and draft.fingerprint and target.fingerprint != draft.fingerprint:
        problems.append("token texts differ (vocabulary fingerprints do not match)")
    return problems


def token_differences(target_tokens: list[str], draft_tokens: list[str], limit: int = 3) -> tuple[int, str]:
    """(number of shared ids whose text differs, a short description of the first few)."""
    n = min(len(target_tokens), len(draft_tokens))
    diffs = [i for i in range(n) if target_tokens[i] != draft_tokens[i]]
    shown = ", ".join(f"id {i}: {target_tokens[i]!r} vs {draft_tokens[i]!r}" for i in diffs[:limit])
    return len(diffs), shown


def check_pair(target: VocabInfo, draft: VocabInfo, detail: str | None = None) -> None:
    """Raise IncompatibleModelsError naming both models and every mismatch."""
    problems = pair_problems(target, draft)
    if not problems:
        return
    if detail:
        problems.append(detail)
    raise IncompatibleModelsError(
        f"drafter {draft.name!r} ({os.path.basename(draft.path)}) cannot draft for target "
        f"{target.name!r} ({os.path.basename(target.path)}): "
        + "; ".join(problems)
        + ". Pick a drafter from the target's family (same tokenizer): `localspec recommend` "
        "or `localspec models list` shows compatible pairs."
    )


def check_files(target_path: str, draft_path: str) -> tuple[VocabInfo, VocabInfo]:
    """Read both headers and check the pair; on mismatch the error lists differing tokens."""
    from localspec.gguf_info import read_tokens, vocab_info

    target = vocab_info(target_path)
    draft = vocab_info(draft_path)
    problems = pair_problems(target, draft)
    if problems:
        detail = None
        if target.fingerprint != draft.fingerprint and target.tokenizer_model == draft.tokenizer_model:
            count, shown = token_differences(read_tokens(target_path), read_tokens(draft_path))
            if count:
                detail = f"{count:,} shared ids have different text ({shown})"
        check_pair(target, draft, detail)
    return target, draft


CAPTURE_ARCHS = frozenset({
    "llama", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe", "qwen4exp", "gemma4", "gpt-oss",
    "lfm2", "deepseek4", "minimax-01", "minimax-m2", "bailingmoe3", "nemotron_h", "nanbeige", "hunyuan_vl",
    "mimo2", "muse-glimmer",
})
"""Target architectures whose llama.cpp graph records its layer inputs (`t_layer_inp`), which
EAGLE-3/DFlash/DSpark drafters read. For any other (qwen2, gemma3, ...) llama.cpp aborts the
process when capture is enabled, so such a target is refused before."""


def capture_problem(arch: str | None, name: str) -> str | None:
    """Why a target of architecture `arch` cannot feed a hidden-state drafter, or None."""
    if arch in CAPTURE_ARCHS:
        return None
    return (f"target {name!r} has architecture {arch!r}, whose llama.cpp graph does not expose the hidden "
            f"states EAGLE-3/DFlash/DSpark drafters read (supported: {', '.join(sorted(CAPTURE_ARCHS))})")


def check_hidden_files(target_path: str, draft_path: str) -> str | None:
    """If `draft_path` is an EAGLE-3/DFlash/DSpark drafter, check from both headers that it was
    made for this target and return its kind; None for any other GGUF (a draft model).

    Checks: the target's architecture exposes hidden states; the drafter's target layers exist
    in the target; the target hidden size it expects; its vocabulary (tokenizer, or the size of
    its draft-to-target map). Raises IncompatibleModelsError naming every mismatch."""
    from localspec.gguf_info import hidden_drafter_info, read_d2t, read_metadata, vocab_info

    info = hidden_drafter_info(draft_path)
    if info is None:
        return None
    meta = read_metadata(target_path)
    target = vocab_info(target_path)
    arch = meta.get("general.architecture")
    problems: list[str] = []
    cap = capture_problem(arch, target.name)
    if cap:
        problems.append(cap)
    n_layer = meta.get(f"{arch}.block_count")
    hidden = meta.get(f"{arch}.embedding_length")
    if not info.target_layers:
        problems.append("the drafter lists no target layers (its `target_layers` metadata is missing)")
    elif isinstance(n_layer, int) and any(not 0 <= i < n_layer for i in info.target_layers):
        problems.append(f"it reads target layers {list(info.target_layers)}, the target has {n_layer}")
    if info.target_hidden_size is None:
        problems.append("the drafter does not say which target hidden size it expects")
    elif isinstance(hidden, int) and info.target_hidden_size != hidden:
        problems.append(f"it expects target hidden size {info.target_hidden_size}, the target has {hidden}")
    if info.d2t_size is not None:
        d2t = read_d2t(draft_path) or []
        top = max(d2t, default=-1)
        if info.d2t_size > target.n_vocab or top >= target.n_vocab or min(d2t, default=0) < 0:
            problems.append(f"its draft-to-target map ({info.d2t_size:,} entries) names target token {top:,}, the "
                            f"target vocabulary has {target.n_vocab:,}")
        elif len(set(d2t)) != len(d2t):
            problems.append("its draft-to-target map names a target token twice")
    draft = vocab_info(draft_path)
    problems += [f"vocabulary: {p}" for p in pair_problems(target, draft)]
    if problems:
        raise IncompatibleModelsError(
            f"{info.kind} drafter {os.path.basename(draft_path)!r} cannot draft for target {target.name!r} "
            f"({os.path.basename(target_path)}): " + "; ".join(problems)
            + ". Use a drafter made for this target (its model card names the target), or a draft model "
            "with the target's tokenizer."
        )
    return info.kind
