"""Measure per-token mask cost of grammar engines on the Qwen vocabulary, in one run.

    flock /tmp/localspec-heavy.lock nice -n 5 .venv/bin/python tests/engine/measure_grammar.py

Loads the offline Qwen2.5-Coder target's tokenizer (151,936 token ids), compiles one JSON
schema with nested objects (the `invoice` row of models/prompts/json_schema.jsonl), and walks
a valid answer token by token: for each engine it times compile, then for every token the
mask computation (the whole vocabulary) and the advance. Engines that are not installed
are reported as such. Only llguidance is a localspec dependency; the run in
docs/bench/grammar_engines.md had outlines-core 0.2.14 pip-installed into the venv (removed
afterwards) and xgrammar outside it (`pip install --no-deps --target /tmp/xgr xgrammar==0.2.9
apache-tvm-ffi transformers tokenizers safetensors regex`, run with `PYTHONPATH=/tmp/xgr`).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from localspec.engine.llama.backend import LlamaCppBackend  # noqa: E402
from localspec.store import installed_path  # noqa: E402
from localspec.types import ModelSpec  # noqa: E402

ANSWER = {
    "customer": {"name": "ACME Corp", "country": "United States"},
    "items": [
        {"description": "Laptop", "quantity": 2, "unit_price": 1200.5},
        {"description": "Wireless mouse", "quantity": 5, "unit_price": 19.99},
        {"description": "27-inch monitor", "quantity": 1, "unit_price": 310},
    ],
    "total": 2810.45,
}


def _schema() -> dict[str, Any]:
    rows = [json.loads(line) for line in (ROOT / "models/prompts/json_schema.jsonl").read_text().splitlines()]
    return next(r["schema"] for r in rows if r["question_id"] == "json-invoice")


def _time_walk(tokens: list[int], mask: Callable[[], None], advance: Callable[[int], None]) -> dict[str, float]:
    t_mask: list[float] = []
    t_adv: list[float] = []
    for tok in tokens:
        t0 = time.perf_counter()
        mask()
        t1 = time.perf_counter()
        advance(tok)
        t_adv.append(time.perf_counter() - t1)
        t_mask.append(t1 - t0)
    return {
        "mask_mean_us": 1e6 * statistics.fmean(t_mask),
        "mask_p50_us": 1e6 * statistics.median(t_mask),
        "mask_max_us": 1e6 * max(t_mask),
        "advance_mean_us": 1e6 * statistics.fmean(t_adv),
    }


def llguidance_run(pieces: list[bytes], eos: list[int], schema: str, tokens: list[int], encode: Callable[[bytes], list[int]]) -> dict[str, float]:
    import llguidance
    import llguidance.numpy as lln

    from localspec.engine.constraint import _Wrapper

    t0 = time.perf_counter()
    tok = llguidance.LLTokenizer(_Wrapper(pieces, eos, encode), n_vocab=len(pieces))
    t1 = time.perf_counter()
    m = llguidance.LLMatcher(tok, llguidance.LLMatcher.grammar_from_json_schema(schema))
    assert not m.is_error(), m.get_error()
    t2 = time.perf_counter()
    bitmask = lln.allocate_token_bitmask(1, len(pieces))

    def advance(t: int) -> None:
        assert m.consume_token(t), m.get_error()

    r = _time_walk(tokens, lambda: lln.fill_next_token_bitmask(m, bitmask), advance)
    return {"tokenizer_s": t1 - t0, "compile_s": t2 - t1, **r}


def xgrammar_run(pieces: list[bytes], eos: list[int], schema: str, tokens: list[int]) -> dict[str, float]:
    import xgrammar as xgr

    t0 = time.perf_counter()
    info = xgr.TokenizerInfo(pieces, vocab_type=xgr.VocabType.RAW, vocab_size=len(pieces), stop_token_ids=eos)
    t1 = time.perf_counter()
    compiled = xgr.GrammarCompiler(info, max_threads=1).compile_json_schema(schema, any_whitespace=True)
    m = xgr.GrammarMatcher(compiled)
    t2 = time.perf_counter()
    bitmask = xgr.allocate_token_bitmask(1, len(pieces))

    def advance(t: int) -> None:
        assert m.accept_token(t)

    r = _time_walk(tokens, lambda: m.fill_next_token_bitmask(bitmask), advance)
    return {"tokenizer_s": t1 - t0, "compile_s": t2 - t1, **r}


def outlines_run(pieces: list[bytes], eos: list[int], schema: str, tokens: list[int]) -> dict[str, float]:
    import outlines_core as oc
    from outlines_core.json_schema import build_regex_from_schema

    t0 = time.perf_counter()
    vmap: dict[bytes, list[int]] = {}
    for i, p in enumerate(pieces):
        if p and i not in eos:
            vmap.setdefault(p, []).append(i)
    vocab = oc.Vocabulary(eos[0], vmap)
    t1 = time.perf_counter()
    index = oc.Index(build_regex_from_schema(schema, r"[ \n\t]?"), vocab)
    guide = oc.Guide(index)
    t2 = time.perf_counter()
    mask = np.zeros((len(pieces) + 31) // 32, dtype=np.int32)

    def advance(t: int) -> None:
        guide.advance(t, return_tokens=False)

    # outlines-core's guide has no end-of-sequence transition to walk: the answer without EOS
    r = _time_walk(tokens[:-1], lambda: guide.write_mask_into(mask.ctypes.data, mask.size, 4), advance)
    return {"tokenizer_s": t1 - t0, "compile_s": t2 - t1, **r}


def main() -> None:
    be = LlamaCppBackend(ModelSpec(str(installed_path("qwen2.5-coder-1.5b-instruct-q4_k_m")), n_ctx=256))
    pieces = [be.token_bytes(t) for t in range(be.n_vocab)]
    eos = [t for t in range(be.n_vocab) if be.is_eog(t)]
    schema = json.dumps(_schema())
    text = json.dumps(ANSWER)
    tokens = be.tokenize(text, add_special=False, parse_special=False) + [eos[0]]
    print("answer tokens:", [(t, pieces[t]) for t in tokens], flush=True)
    print(f"vocabulary {be.n_vocab} ids; answer {len(tokens)} tokens", flush=True)
    out: dict[str, Any] = {"n_vocab": be.n_vocab, "n_tokens": len(tokens)}
    runs: dict[str, Callable[[], dict[str, float]]] = {
        "llguidance": lambda: llguidance_run(pieces, eos, schema, tokens,
                                             lambda b: be.tokenize(b.decode("utf-8", "replace"), False, False)),
        "xgrammar": lambda: xgrammar_run(pieces, eos, schema, tokens),
        "outlines-core": lambda: outlines_run(pieces, eos, schema, tokens),
    }
    for name, fn in runs.items():
        try:
            out[name] = fn()
        except ImportError as e:
            out[name] = {"error": f"not installed: {e}"}
        except Exception as e:  # report and go on: one engine failing says something too
            out[name] = {"error": f"{type(e).__name__}: {e}"}
        print(name, json.dumps(out[name]), flush=True)
    be.close()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
