"""Constrained decoding: a grammar (JSON object, JSON schema, or a Lark grammar for tool calls)
turned into token masks by llguidance, and the per-generation cursor the step loop drives.

Why llguidance: measured on the Qwen vocabulary (README "Structured output"), its mask costs
tens of microseconds per token with no compile step over the vocabulary, it rolls back any
number of tokens, and its JSON-schema compiler names what it does not support.

Speculation under a mask (the loop's view): the cursor is advanced along the drafted tokens
(a drafter that accepts a `guide` samples from masked rows, so its q is the masked q; other
drafts are cut at the first token the grammar refuses), gives one mask per verify row, and is
rolled back to the accepted drafts together with the KV caches before the last token is
consumed. The target's p at every row is the masked p, so acceptance is exact for the
constrained target.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from localspec.engine.backend import ModelBackend
from localspec.engine.drafters.base import DraftProposal
from localspec.errors import InvalidRequestError
from localspec.types import Constraint, SamplingParams

CONSTRAINT_KINDS = ("json_object", "json_schema", "lark")

_JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""One canonical JSON layout (json.dumps's): fewer ways to write the same object means drafts
and n-gram matches land more often, and outputs stay readable."""


def _llg() -> Any:
    import llguidance

    return llguidance


def compile_grammar(constraint: Constraint) -> str:
    """The llguidance grammar for `constraint`, validated; InvalidRequestError names what is
    wrong or unsupported (param `response_format`)."""
    llg = _llg()
    if constraint.kind == "json_object":
        schema: Any = {"type": "object"}
    elif constraint.kind == "json_schema":
        try:
            schema = json.loads(constraint.source) if isinstance(constraint.source, str) else None
        except json.JSONDecodeError as e:
            raise InvalidRequestError(f"the JSON schema is not valid JSON: {e}", param="response_format") from e
        if not isinstance(schema, (dict, bool)):
            raise InvalidRequestError("a JSON schema must be a JSON object", param="response_format")
    elif constraint.kind == "lark":
        grammar: str = llg.LLMatcher.grammar_from_lark(constraint.source or "")
        return _validated(grammar)
    else:
        raise InvalidRequestError(
            f"constraint kind must be one of {', '.join(CONSTRAINT_KINDS)}, got {constraint.kind!r}",
            param="response_format",
        )
    try:
        grammar = llg.LLMatcher.grammar_from_json_schema(schema, defaults=_JSON_OPTIONS)
    except ValueError as e:
        raise InvalidRequestError(f"invalid JSON schema: {e}", param="response_format") from e
    return _validated(grammar)


def _validated(grammar: str) -> str:
    is_error, messages = _llg().LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise InvalidRequestError(
            f"unsupported or invalid schema/grammar: {messages[0]}; remove or rewrite that feature",
            param="response_format",
        )
    return grammar


class _Wrapper:
    """What llguidance's LLTokenizer reads from a tokenizer: pieces, EOS, and an encoder."""

    def __init__(self, pieces: list[bytes], eos: list[int], encode: Callable[[bytes], list[int]]) -> None:
        self.tokens = pieces
        self.eos_token_id = eos[0] if eos else 0
        self.bos_token_id = None
        self.special_token_ids = list(eos)
        self._encode = encode
        self.is_tokenizer_wrapper = True

    def __call__(self, s: str | bytes) -> list[int]:
        return self._encode(s if isinstance(s, bytes) else s.encode("utf-8"))


def grammar_tokenizer(model: ModelBackend) -> Any:
    """An llguidance LLTokenizer over `model`'s vocabulary: every id's raw bytes (special tokens
    are empty, so never allowed by a grammar) and its end-of-generation ids as EOS. Build once
    per model (about a second on a 150k vocabulary)."""
    pieces = [model.token_bytes(t) for t in range(model.n_vocab)]
    eos = [t for t in range(model.n_vocab) if model.is_eog(t)]

    def encode(b: bytes) -> list[int]:
        return model.tokenize(b.decode("utf-8", "replace"), add_special=False, parse_special=False)

    return _llg().LLTokenizer(_Wrapper(pieces, eos, encode), n_vocab=model.n_vocab, eos_token=eos or None)


class Guide(Protocol):
    """What a drafter that samples under the grammar sees (`GrammarCursor` implements it)."""

    def mask_row(self, row: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """A copy of `row` (logits [V]) with the tokens the grammar refuses at the cursor set to -inf."""
        ...

    def push(self, token: int) -> bool:
        """Advance the cursor by one drafted token; False (and no move) if the grammar refuses
        it or it ends the generation (the target emits the end itself)."""
        ...


class GuidedDrafter(Protocol):
    """A drafter whose `propose` takes `guide=` and samples every draft from the masked row."""

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator,
        p_min: float = 0.0, *, guide: Guide | None = None,
    ) -> DraftProposal:
        """As Drafter.propose, each draft drawn from `guide.mask_row(row)` then `guide.push`ed."""
        ...


@dataclass
class _Masks:
    bits: npt.NDArray[np.int32]
    """[MAX_DEPTH, W] llguidance bitmasks, row d = the mask after d pushed tokens."""
    bools: npt.NDArray[np.bool_]
    """[MAX_DEPTH, V] the same, unpacked (True = allowed)."""
    ready: list[bool]


class GrammarCursor:
    """The grammar state of one generation, following the committed tokens plus a stack of
    drafted ones (depth = drafted tokens pushed since the last commit)."""

    def __init__(self, tokenizer: Any, grammar: str, n_vocab: int, max_depth: int = 64) -> None:
        llg = _llg()
        self._m = llg.LLMatcher(tokenizer, grammar)
        if self._m.is_error():
            raise InvalidRequestError(f"the grammar does not compile: {self._m.get_error()}", param="response_format")
        self.n_vocab = n_vocab
        self._eos = frozenset(tokenizer.eos_tokens)
        width = (tokenizer.vocab_size + 31) // 32
        self._masks = _Masks(np.zeros((max_depth + 1, width), dtype=np.int32),
                             np.zeros((max_depth + 1, width * 32), dtype=np.bool_), [False] * (max_depth + 1))
        self.depth = 0
        self.mask_seconds = 0.0
        """Cumulative seconds computing masks and applying them to logits (for stats)."""
        self.num_masks = 0

    # -- masks ----------------------------------------------------------------------
    def allowed(self, depth: int | None = None) -> npt.NDArray[np.bool_]:
        """[V] True where the grammar allows a token after `depth` pushed tokens (default:
        the cursor's depth; only depths on the current stack)."""
        d = self.depth if depth is None else depth
        m = self._masks
        if not m.ready[d]:
            assert d == self.depth, "masks of earlier depths are computed on the way"
            t0 = time.perf_counter()
            row = m.bits[d]
            self._m.unsafe_compute_mask_ptr(row.ctypes.data, row.nbytes)
            m.bools[d] = np.unpackbits(row.view(np.uint8), bitorder="little").view(np.bool_)
            m.ready[d] = True
            self.mask_seconds += time.perf_counter() - t0
            self.num_masks += 1
        return m.bools[d, : self.n_vocab]

    def mask_row(self, row: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """A copy of `row` with refused tokens at -inf."""
        allowed = self.allowed()[: row.shape[0]]
        t0 = time.perf_counter()
        out = np.where(allowed, row, np.float32(-np.inf)).astype(np.float32, copy=False)
        self.mask_seconds += time.perf_counter() - t0
        return out

    def mask_rows(self, logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """A masked copy of verify logits [k+1, V]: row i under the mask after i pushed drafts."""
        k1, v = logits.shape
        assert k1 == self.depth + 1, (k1, self.depth)
        for d in range(k1):
            self.allowed(d)
        t0 = time.perf_counter()
        out = np.where(self._masks.bools[:k1, :v], logits, np.float32(-np.inf)).astype(np.float32, copy=False)
        self.mask_seconds += time.perf_counter() - t0
        return out

    # -- moves ----------------------------------------------------------------------
    def push(self, token: int) -> bool:
        """Advance by one drafted token if the grammar allows it (checked on its mask)."""
        if self.depth + 1 >= len(self._masks.ready) or not 0 <= token < self.n_vocab or not self.allowed()[token]:
            return False
        if token in self._eos:  # never draft the end: the target emits it itself (no empty rows after it)
            return False
        if not self._m.consume_token(token):
            raise AssertionError(f"llguidance refused an allowed token {token}: {self._m.get_error()}")
        self.depth += 1
        self._masks.ready[self.depth] = False
        return True

    def follow(self, proposal: DraftProposal, guided: bool) -> DraftProposal:
        """Push `proposal`'s drafts that are not on the stack yet; cut it at the first one the
        grammar refuses. A drafter that did not sample under the mask loses its q rows (its
        drafts are then judged one-hot, which is exact for any draft chosen before the target
        is read)."""
        tokens = proposal.tokens
        n = self.depth if guided else 0
        while n < len(tokens) and self.push(tokens[n]):
            n += 1
        if n == len(tokens) and guided:
            return proposal
        logits = proposal.logits[:n] if guided and proposal.logits is not None else None
        return replace(proposal, tokens=tokens[:n], logits=logits)

    def commit(self, num_accepted: int, final: int) -> None:
        """The step kept `num_accepted` drafts and emitted `final` after them: drop the other
        drafts (as the caches do) and consume `final`."""
        drop = self.depth - num_accepted
        if drop > 0 and not self._m.rollback(drop):
            raise AssertionError(f"llguidance could not roll back {drop} tokens: {self._m.get_error()}")
        self.depth = 0
        self._masks.ready = [False] * len(self._masks.ready)
        if not self._m.is_stopped():
            ok = self._m.consume_token(final)
            if not ok:
                raise AssertionError(f"llguidance refused the emitted token {final}: {self._m.get_error()}")

    @property
    def done(self) -> bool:
        """The grammar accepted an end-of-generation token or cannot continue."""
        return bool(self._m.is_stopped())
