"""`localspec serve`: flags reach the engine and the server settings (uvicorn and the engine
are replaced by fakes; no port is opened)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import localspec.engine
import localspec.store
from localspec.cli import main
from tests.server.conftest import fake_engine


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import uvicorn

    seen: dict[str, Any] = {}

    def fake_engine_cls(target: Any, draft: Any = None, **kw: Any) -> Any:
        seen.update(target=target, draft=draft, **kw)
        engine = fake_engine()
        seen["engine"] = engine
        return engine

    def fake_run(app: Any, host: str, port: int, **kw: Any) -> None:
        seen.update(app=app, host=host, port=port)

    monkeypatch.setattr(localspec.engine, "Engine", fake_engine_cls)
    monkeypatch.setattr(uvicorn, "run", fake_run)
    monkeypatch.delenv("LOCALSPEC_API_KEY", raising=False)
    return seen


def test_serve_flags_reach_engine_and_settings(captured: dict[str, Any]) -> None:
    rc = main(["serve", "-m", "t.gguf", "-md", "d.gguf", "-ngl", "99", "-ngld", "7", "-c", "1024", "-t", "2",
               "--spec-draft-n-max", "6", "--kernel", "reference", "--alias", "coder", "--port", "9001",
               "--api-key", "k", "--max-queue", "3", "--temp", "0", "-n", "64", "--strict-model",
               "--numerics", "fast", "-fa"])
    assert rc == 0
    t, d = captured["target"], captured["draft"]
    assert (t.path, t.n_gpu_layers, t.n_ctx, t.n_threads, t.flash_attn, t.numerics) == (
        "t.gguf", 99, 1024, 2, True, "fast")
    assert (d.path, d.n_gpu_layers, d.n_threads, d.numerics) == ("d.gguf", 7, 2, "fast")
    assert captured["gamma"] == 6 and captured["kernel"] == "reference"
    assert (captured["host"], captured["port"]) == ("127.0.0.1", 9001)
    s = captured["app"].state.settings
    assert (s.api_key_value, s.alias, s.max_queue, s.default_temperature, s.default_max_tokens, s.strict_model) == (
        "k", "coder", 3, 0.0, 64, True)
    assert captured["engine"].target.closed  # the engine is closed when the server stops


def test_serve_default_pair_when_no_model(captured: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(localspec.store, "default_pair_paths", lambda: (Path("/m/t.gguf"), Path("/m/d.gguf")))
    monkeypatch.setenv("LOCALSPEC_API_KEY", "env-key")
    assert main(["serve"]) == 0
    assert captured["target"].path == "/m/t.gguf" and captured["draft"].path == "/m/d.gguf"
    assert captured["app"].state.settings.api_key_value == "env-key"
    assert captured["port"] == 8000


def test_serve_draft_without_target_is_usage_error(captured: dict[str, Any]) -> None:
    assert main(["serve", "-md", "d.gguf"]) != 0
    assert "target" not in captured


def test_serve_default_target_without_drafter(captured: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(localspec.store, "default_pair_paths", lambda: (Path("/m/t.gguf"), Path("/m/d.gguf")))
    assert main(["serve", "-md", "none"]) == 0
    assert captured["target"].path == "/m/t.gguf" and captured["draft"] is None
    assert captured["target"].numerics == "exact"  # the default


def test_serve_unknown_numerics_is_usage_error(captured: dict[str, Any]) -> None:
    assert main(["serve", "-m", "t.gguf", "--numerics", "turbo"]) == 2
    assert "target" not in captured
