"""A small JSON-schema checker for the subset the test schemas use (object with properties,
required and additionalProperties, array items, string, integer, number, boolean, enum),
written here so that checking the output does not reuse the grammar engine under test."""

from __future__ import annotations

from typing import Any


def errors(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """What is wrong with `value` under `schema` (empty when it validates)."""
    out: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path}: {value!r} not in {schema['enum']}")
    kind = schema.get("type")
    checks = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }
    if kind is not None and not checks[kind](value):
        return out + [f"{path}: expected {kind}, got {type(value).__name__}"]
    if kind == "object":
        props = schema.get("properties", {})
        out += [f"{path}: missing {k}" for k in schema.get("required", []) if k not in value]
        if schema.get("additionalProperties") is False:
            out += [f"{path}: extra {k}" for k in value if k not in props]
        for k, v in value.items():
            if k in props:
                out += errors(v, props[k], f"{path}.{k}")
    if kind == "array" and "items" in schema:
        for i, v in enumerate(value):
            out += errors(v, schema["items"], f"{path}[{i}]")
    return out
