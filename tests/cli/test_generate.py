"""`localspec generate` end to end on a real model, and the CLI's error handling."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from localspec.cli import _register_all, main


@pytest.mark.models
def test_generate_streams_text_and_compares_with_plain(smollm2_path: Path) -> None:
    app = _register_all()
    result = CliRunner().invoke(app, [
        "generate", "-m", str(smollm2_path), "-md", str(smollm2_path), "-p", "def add(a, b):",
        "-n", "24", "--drafter", "model", "--spec-draft-n-max", "3", "--compare-plain", "-c", "512",
    ])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "return" in out  # the model really wrote code
    assert re.search(r"\[model\(γ=3\)\] 24 tokens .* AL \d\.\d\d", out)
    assert re.search(r"\[none\] 24 tokens", out)
    m = re.search(r"speculative ([\d.]+) tok/s vs plain ([\d.]+) tok/s: ([\d.]+)x", out)
    assert m
    spec, plain, ratio = float(m[1]), float(m[2]), float(m[3])
    # the printed speeds are rounded to 0.01: the ratio agrees with them within that rounding
    assert abs(spec / plain - ratio) <= 0.005 + ratio * (0.005 / spec + 0.005 / plain)


def test_incompatible_pair_is_one_clear_line(smollm2_path: Path, qwen_draft_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "localspec", "generate", "-m", str(qwen_draft_path), "-md", str(smollm2_path),
         "-p", "hi"], capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1
    assert "error: drafter" in proc.stderr and "cannot draft for target" in proc.stderr
    assert "LOCALSPEC_DEBUG=1" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_model_file_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["generate", "-m", str(tmp_path / "missing.gguf"), "-md", "none", "-p", "x"])
    assert code == 1
    assert "not found" in capsys.readouterr().err


def test_usage_error_exits_2() -> None:
    assert main(["generate", "--no-such-flag"]) == 2


def test_bad_json_schema_file_is_refused_before_loading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema = tmp_path / "s.json"
    schema.write_text('{"type": "object", "properties": {"a": {"type": "strnig"}}}')
    code = main(["generate", "-m", str(tmp_path / "missing.gguf"), "-md", "none", "-p", "x", "--json-schema", str(schema)])
    assert code == 1
    err = capsys.readouterr().err
    assert "strnig" in err and "not found" not in err  # the schema is checked before the model is looked for


@pytest.mark.models
def test_generate_with_a_json_schema_prints_valid_json(smollm2_path: Path, tmp_path: Path) -> None:
    import json

    schema = {"type": "object", "properties": {"name": {"type": "string"}, "year": {"type": "integer"}},
              "required": ["name", "year"], "additionalProperties": False}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schema))
    result = CliRunner().invoke(_register_all(), [
        "generate", "-m", str(smollm2_path), "-md", str(smollm2_path), "-p", "Python was released by Guido in",
        "--chat", "-n", "48", "--drafter", "model", "--json-schema", str(path), "-c", "512",
    ])
    assert result.exit_code == 0, result.output
    obj = json.loads(result.stdout)
    assert set(obj) == {"name", "year"} and isinstance(obj["year"], int)
