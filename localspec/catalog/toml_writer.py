"""Writing the catalog's TOML (the user copy `localspec models refresh` keeps).

tomllib reads TOML but the stdlib cannot write it; the catalog's shape is small (scalars,
tables of tables, arrays of tables with arrays of inline tables), so this writes exactly that.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

from localspec.catalog.model import _load_cached, parse_catalog, user_catalog_path

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE_KEY.match(k) else json.dumps(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        if v and all(isinstance(x, dict) for x in v):
            return "[\n" + "".join(f"  {_value(x)},\n" for x in v) + "]"
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dump_toml(data: dict[str, Any], header: str = "") -> str:
    """TOML text for the catalog's shape: scalars, tables of tables, arrays of tables
    (whose list-of-dict values are written as arrays of inline tables)."""
    out = [header.rstrip() + "\n\n"] if header else []
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict) and not _is_table_array(v)}
    out.extend(f"{_key(k)} = {_value(v)}\n" for k, v in scalars.items())
    for k, v in data.items():
        if isinstance(v, dict):
            for sub, table in v.items():
                out.append(f"\n[{_key(k)}.{_key(sub)}]\n")
                out.extend(f"{_key(a)} = {_value(b)}\n" for a, b in table.items())
    for k, v in data.items():
        if _is_table_array(v):
            for table in v:
                out.append(f"\n[[{_key(k)}]]\n")
                out.extend(f"{_key(a)} = {_value(b)}\n" for a, b in table.items())
    return "".join(out)


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def save_user_catalog(data: dict[str, Any], path: Path | None = None) -> Path:
    """Write `data` (validated first) atomically as the user catalog copy."""
    parse_catalog(data, "update")
    path = path or user_catalog_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        "# localspec model catalog: user copy written by `localspec models refresh`.\n"
        "# It overrides the packaged catalog; delete it to go back to the packaged one."
    )
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dump_toml(data, header), encoding="utf-8")
    os.replace(tmp, path)
    _load_cached.cache_clear()
    return path
