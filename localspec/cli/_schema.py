"""`--json-schema FILE` for `generate` and `tui`: the file as an engine Constraint, checked
before any model loads (a bad schema is one clear error line naming what is wrong)."""

from __future__ import annotations

from pathlib import Path

import typer

from localspec.types import Constraint

JSON_SCHEMA_HELP = ("Constrain the output to the JSON schema in this file (token masks; speculation "
                    "stays lossless).")


def schema_constraint(path: Path) -> Constraint:
    """The schema file as a `json_schema` constraint; InvalidRequestError names what the
    grammar engine refuses, BadParameter an unreadable file."""
    from localspec.engine.constraint import compile_grammar

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}", param_hint="--json-schema") from None
    constraint = Constraint("json_schema", text)
    compile_grammar(constraint)
    return constraint
