"""Prompt sets: the built-in SPEED-Bench-style file and the two external JSONL formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localspec.errors import PromptSetError
from localspec.prompts import (
    SPEED_CATEGORIES, is_placeholder, load_builtin, load_prompt_file, load_prompt_sources, parse_rows, select,
)

FIXTURES = Path(__file__).parent / "fixtures"


def test_load_prompt_file_speed_bench_skips_placeholders_and_counts_them() -> None:
    ps = load_prompt_file(FIXTURES / "speed_bench_sample.jsonl")
    assert ps.format == "speed-bench"
    assert [p.question_id for p in ps.prompts] == ["q-code-1", "q-math-1"]
    assert ps.num_skipped_placeholder == 2  # the rag row and the roleplay row
    assert ps.num_skipped_invalid == 1  # empty turns
    math = ps.prompts[1]
    assert math.multiturn and math.turns == ("What is 2 + 3?", "Now multiply the result by 4.")
    assert (math.sub_category, math.source, math.difficulty) == ("algebra", "unit-test", "easy")


def test_load_prompt_file_spec_bench_keeps_ids_categories_and_turns() -> None:
    ps = load_prompt_file(FIXTURES / "spec_bench_question.jsonl")
    assert ps.format == "spec-bench"
    assert ps.categories == ("writing", "reasoning", "translation")
    assert [p.question_id for p in ps.prompts] == ["81", "101", "201"]
    assert ps.prompts[0].multiturn and len(ps.prompts[0].turns) == 2
    assert not ps.prompts[1].multiturn
    assert ps.num_skipped_placeholder == 0


def test_is_placeholder_matches_prefix_only() -> None:
    assert is_placeholder("FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH\n\nx")
    assert not is_placeholder("Please fetch the full benchmark data")


def test_load_prompt_file_bad_json_names_the_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({"category": "qa", "turns": ["hi"]}) + "\n{not json\n")
    with pytest.raises(PromptSetError, match="line 2"):
        load_prompt_file(f)


def test_load_prompt_file_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PromptSetError, match="cannot read"):
        load_prompt_file(tmp_path / "nope.jsonl")


def test_parse_rows_without_turns_is_rejected() -> None:
    with pytest.raises(PromptSetError, match="turns"):
        parse_rows([{"question_id": 1, "prompt": "x"}])


def test_load_builtin_has_every_speed_category_with_five_prompts() -> None:
    ps = load_builtin()
    assert ps.categories == SPEED_CATEGORIES
    for cat in SPEED_CATEGORIES:
        assert sum(p.category == cat for p in ps.prompts) >= 5, cat
    assert sum(p.multiturn for p in ps.prompts) >= 5
    assert len({p.question_id for p in ps.prompts}) == len(ps.prompts)
    for p in ps.prompts:
        if p.category in ("rag", "summarization"):
            assert len(p.turns[0]) >= 1000, p.question_id  # real long context


def test_select_takes_first_n_per_category_in_given_order() -> None:
    ps = load_builtin()
    out = select(ps.prompts, ["rag", "coding"], 2)
    assert [p.question_id for p in out] == ["rag-01", "rag-02", "coding-01", "coding-02"]
    assert len(select(ps.prompts, None, 1)) == len(SPEED_CATEGORIES)


def test_select_unknown_category_lists_the_available_ones() -> None:
    with pytest.raises(PromptSetError, match="available: coding"):
        select(load_builtin().prompts, ["poetry"], 1)


def test_prompt_sources_run_as_one_set(tmp_path: Path) -> None:
    """The built-in set plus the committed HumanEval subset: every category of both, in order;
    a question id in two sets is an error."""
    humaneval = Path(__file__).resolve().parents[2] / "models" / "prompts" / "humaneval.jsonl"
    ps = load_prompt_sources(["builtin", humaneval])
    assert ps.categories == (*dict.fromkeys(p.category for p in load_builtin().prompts), "humaneval")
    he = [p for p in ps.prompts if p.category == "humaneval"]
    assert len(he) == 12 and all("```python\n" in p.turns[0] and "def " in p.turns[0] for p in he)
    assert ps.format == "speed-bench+spec-bench"
    dup = tmp_path / "dup.jsonl"
    dup.write_text(humaneval.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    with pytest.raises(PromptSetError, match="humaneval-000"):
        load_prompt_sources([humaneval, dup])
