"""CLI: `localspec models ...` and `localspec recommend` through localspec.cli.main."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakehub import HubFile

from localspec.cli import main


@pytest.fixture
def hf_env(hub, hf_cache, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Point huggingface_hub's defaults (what the CLI uses) at the local hub and a temp cache."""
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "ENDPOINT", hub.url)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(hf_cache))
    monkeypatch.setattr(c, "HF_TOKEN_PATH", str(hf_cache / "no-token"))
    return hub


def test_cli_recommend_json_with_vram(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "--vram", "24", "--ram", "32", "--task", "code", "--json", "--limit", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    recs = out["recommendations"]
    assert out["hardware"]["vram_bytes"] == 24 << 30 and len(recs) == 3
    assert recs[0]["rank"] == 1 and recs[0]["placement"] in ("gpu", "partial")
    assert all(r["target"].startswith(("qwen", "deepseek")) for r in recs)


def test_cli_recommend_vram_alone_says_which_bandwidth_it_assumed(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a GPU, --vram 24 plans for a 3090/4090-class card (~1 TB/s) and says so; the
    32B coder then predicts near the ~35 tok/s published for a 3090."""
    from localspec.hardware import probe

    if probe().gpus:
        pytest.skip("a real GPU is present: --vram keeps its probed bandwidth")
    assert main(["recommend", "--vram", "24", "--ram", "32", "--task", "code", "--json", "--limit", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    hw = out["hardware"]
    assert hw["gpu_bandwidth_bytes_s"] >= 900e9 and "assuming an RTX" in hw["source"]
    coder = next(r for r in out["recommendations"] if r["target"] == "qwen2.5-coder-32b-instruct")
    assert 30 < coder["plain_tokens_per_s"] < 50
    assert main(["recommend", "--vram", "24", "--limit", "1"]) == 0
    assert "assuming an RTX" in capsys.readouterr().out


def test_cli_recommend_named_gpu_shows_current_families_and_unrunnable_drafters(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "--gpu", "RTX 4090", "--ram", "64", "--task", "code", "--limit", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GPU RTX 4090: 24.0 GiB, 1008 GB/s")
    assert "no drafter localspec can run yet" in out and "not yet runnable in localspec" in out
    assert "qwen3." in out and "[mtp]" in out and "MoE targets" in out
    assert main(["recommend", "--gpu", "RTX 4090", "--ram", "64", "--json", "--limit", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hardware"]["gpu"] == "RTX 4090" and data["without_runnable_drafter"]
    for row in data["without_runnable_drafter"]:
        assert row["plain"]["drafter"] == "none" and all(not o["runnable"] for o in row["not_yet_runnable"])
    for rec in data["recommendations"]:
        assert all(not o["runnable"] for o in rec["not_yet_runnable"])


def test_cli_recommend_unknown_gpu_and_gpu_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "--gpu", "RTX 4099"]) == 1
    err = capsys.readouterr().err
    assert "RTX 4090" in err and "--vram" in err
    assert main(["recommend", "--list-gpus"]) == 0
    out = capsys.readouterr().out
    assert "RTX 2080 Ti" in out and "RTX 5090 Laptop" in out and "1792 GB/s" in out


def test_cli_recommend_text_and_bad_task(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "--vram", "8", "--task", "chat", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert " 1. " in out and "γ=" in out and "α source:" in out and "tok/s" in out
    assert main(["recommend", "--task", "poetry"]) != 0


def test_cli_models_download_by_quant_then_list_and_rm(hf_env, hf_cache: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    data = bytes(range(256)) * 2000
    hf_env.add("org/Small-GGUF", "small-Q4_K_M.gguf", HubFile(data))
    hf_env.add("org/Small-GGUF", "small-Q8_0.gguf", HubFile(data[:1000]))
    # HF_ENDPOINT is read when huggingface_hub is imported: run the real CLI in a fresh process
    env = {**os.environ, "HF_ENDPOINT": hf_env.url, "HF_HUB_CACHE": str(hf_cache), "HF_HUB_DISABLE_XET": "1"}
    env.pop("HF_TOKEN", None)
    proc = subprocess.run([sys.executable, "-m", "localspec", "models", "download", "org/Small-GGUF", "--quant", "q4_k_m"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.read_bytes() == data and hf_cache in path.parents
    assert main(["models", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    entry = next(m for m in listed["models"] if m["origin"] == "hf-cache")
    assert entry["repo"] == "org/Small-GGUF" and entry["quant"] == "Q4_K_M" and entry["size"] == len(data)
    assert main(["models", "rm", str(path), "--yes"]) == 0
    assert not path.exists()


def test_cli_models_download_list_and_missing_repo(hf_env, capsys: pytest.CaptureFixture[str]) -> None:
    hf_env.add("org/Small-GGUF", "small-Q4_K_M.gguf", HubFile(b"a" * 100))
    assert main(["models", "download", "org/Small-GGUF", "--list"]) == 0
    assert "small-Q4_K_M.gguf" in capsys.readouterr().out
    assert main(["models", "download", "org/Missing-GGUF", "x.gguf"]) == 1
    err = capsys.readouterr().err
    assert "no model repo 'org/Missing-GGUF'" in err


@pytest.mark.models
def test_cli_models_add_then_list_shows_pairs(smollm2_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "add", str(smollm2_path)]) == 0
    assert "vocab 49,152" in capsys.readouterr().out
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "can draft for" in out
    assert "qwen2.5-coder-1.5b-instruct  <-  qwen2.5-coder-0.5b-instruct" in out
    assert "smollm2" not in out.split("can draft for")[1]


def test_cli_models_list_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "list", "--catalog"]) == 0
    out = capsys.readouterr().out
    assert "gemma-3-27b-it" in out and "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF" in out and "estimated" in out
