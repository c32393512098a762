"""Benchmark prompt sets: the built-in SPEED-Bench-style set and external JSONL files.

Formats read (one JSON object per line):
- SPEED-Bench (nvidia/SPEED-Bench): `question_id, category, sub_category, turns, source,
  src_id, difficulty, multiturn`. Its released files carry a placeholder instead of the
  text for prompts whose source data must be fetched by the owner's script; such rows are
  skipped and counted.
- Spec-Bench (`data/spec_bench/question.jsonl`): `question_id, category, turns`.
The built-in set (`models/prompts/speed_local.jsonl`, written for localspec) uses the
SPEED-Bench row format, with SPEED-Bench's 11 categories.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localspec.errors import PromptSetError
from localspec.paths import packaged

log = logging.getLogger(__name__)

SPEED_CATEGORIES = (
    "coding", "humanities", "math", "multilingual", "qa", "rag",
    "reasoning", "roleplay", "stem", "summarization", "writing",
)
"""SPEED-Bench's qualitative categories, in its order."""

BUILTIN_FILE = ("models", "prompts", "speed_local.jsonl")

PLACEHOLDER_PREFIX = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE"
"""How SPEED-Bench marks a turn whose text is not in the released file."""

_SPEED_KEYS = frozenset({"sub_category", "source", "src_id", "difficulty", "multiturn"})


@dataclass(frozen=True)
class BenchPrompt:
    """One benchmark conversation: user turns, answered one after another."""

    question_id: str
    category: str
    turns: tuple[str, ...]
    """User messages; turn i is sent with the model's answers to turns < i."""
    sub_category: str | None = None
    source: str | None = None
    difficulty: str | None = None

    @property
    def multiturn(self) -> bool:
        """True when the conversation has more than one user turn."""
        return len(self.turns) > 1


@dataclass(frozen=True)
class PromptSet:
    """Prompts read from one file, plus what was left out and why."""

    prompts: tuple[BenchPrompt, ...]
    format: str
    """"speed-bench", "spec-bench" or "empty"."""
    path: str
    num_skipped_placeholder: int = 0
    """SPEED-Bench rows whose turns are placeholders (text not released in the file)."""
    num_skipped_invalid: int = 0
    """Rows without usable turns (empty, not strings)."""
    categories: tuple[str, ...] = field(default=())
    """Categories in first-seen order."""


def is_placeholder(turn: str) -> bool:
    """True for a SPEED-Bench turn that stands in for data fetched from elsewhere."""
    return turn.lstrip().upper().startswith(PLACEHOLDER_PREFIX)


def _row_format(row: dict[str, object]) -> str:
    return "speed-bench" if _SPEED_KEYS & row.keys() else "spec-bench"


def parse_rows(rows: Iterable[dict[str, object]], path: str = "<rows>") -> PromptSet:
    """Turn decoded JSON rows (either format) into a PromptSet."""
    prompts: list[BenchPrompt] = []
    placeholder = invalid = 0
    fmt = "empty"
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "turns" not in row or "category" not in row:
            raise PromptSetError(
                f"{path}: row {i + 1} has no 'turns'/'category'; expected SPEED-Bench or Spec-Bench JSONL"
            )
        if fmt != "speed-bench":
            fmt = _row_format(row)  # one SPEED-Bench row makes the file SPEED-Bench
        turns = row["turns"]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
            invalid += 1
            continue
        if any(is_placeholder(t) for t in turns):
            placeholder += 1
            continue
        sub = row.get("sub_category")
        src = row.get("source")
        diff = row.get("difficulty")
        prompts.append(
            BenchPrompt(
                question_id=str(row.get("question_id", f"row-{i + 1}")),
                category=str(row["category"]),
                turns=tuple(turns),
                sub_category=str(sub) if sub is not None else None,
                source=str(src) if src is not None else None,
                difficulty=str(diff) if diff is not None else None,
            )
        )
    if placeholder:
        log.info("%s: skipped %d rows whose turns are placeholders", path, placeholder)
    cats = tuple(dict.fromkeys(p.category for p in prompts))
    return PromptSet(tuple(prompts), fmt, path, placeholder, invalid, cats)


def _read_jsonl(text: str, path: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise PromptSetError(f"{path}: line {n} is not JSON ({exc.msg}); give a JSONL file") from exc
    return rows


def load_prompt_file(path: str | Path) -> PromptSet:
    """Read a SPEED-Bench or Spec-Bench JSONL file (format detected per row keys)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptSetError(f"cannot read prompt file {p}: {exc.strerror}; check the path") from exc
    return parse_rows(_read_jsonl(text, str(p)), str(p))


def load_builtin() -> PromptSet:
    """The packaged SPEED-Bench-style set (11 categories, >= 5 prompts each)."""
    node = packaged(*BUILTIN_FILE)
    return parse_rows(_read_jsonl(node.read_text(encoding="utf-8"), "speed_local.jsonl"), "builtin:speed_local")


BUILTIN_NAME = "builtin"
"""How a list of prompt sources names the built-in set."""


def load_prompt_sources(sources: Sequence[str | Path]) -> PromptSet:
    """Several prompt sets read as one, in order: `BUILTIN_NAME` is the packaged set, anything
    else a JSONL file. Question ids must not repeat across them."""
    sets = [load_builtin() if str(s) == BUILTIN_NAME else load_prompt_file(s) for s in sources]
    if len(sets) == 1:
        return sets[0]
    prompts = tuple(p for ps in sets for p in ps.prompts)
    ids = [p.question_id for p in prompts]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise PromptSetError(f"question ids appear in more than one prompt set: {', '.join(dup[:5])}")
    formats = dict.fromkeys(ps.format for ps in sets if ps.format != "empty")
    return PromptSet(
        prompts, "+".join(formats) or "empty", "+".join(ps.path for ps in sets),
        sum(ps.num_skipped_placeholder for ps in sets), sum(ps.num_skipped_invalid for ps in sets),
        tuple(dict.fromkeys(p.category for p in prompts)),
    )


def select(
    prompts: Sequence[BenchPrompt], categories: Sequence[str] | None = None, per_category: int | None = None
) -> list[BenchPrompt]:
    """The first `per_category` prompts of each wanted category, grouped by category
    (order of `categories`, else first-seen order). Unknown categories raise."""
    seen = list(dict.fromkeys(p.category for p in prompts))
    wanted = list(categories) if categories else seen
    missing = [c for c in wanted if c not in seen]
    if missing:
        raise PromptSetError(
            f"no prompts in categories {', '.join(missing)}; available: {', '.join(seen) or 'none'}"
        )
    out: list[BenchPrompt] = []
    for cat in wanted:
        rows = [p for p in prompts if p.category == cat]
        out.extend(rows if per_category is None else rows[:per_category])
    return out
