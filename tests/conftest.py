"""Shared fixtures. Real-model fixtures need the offline weights that `make setup`
installs; they fail (not skip) when missing, so CI cannot pass without them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec.store import installed_path

QWEN_TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m"
QWEN_DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m"
SMOLLM2 = "smollm2-135m-instruct-q4_1"
DEEPSEEK_HEADER = "deepseek-r1-distill-qwen-7b-header"


@pytest.fixture(scope="session")
def qwen_target_path() -> Path:
    """Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.1 GB)."""
    return installed_path(QWEN_TARGET)


@pytest.fixture(scope="session")
def qwen_draft_path() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491 MB)."""
    return installed_path(QWEN_DRAFT)


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (98 MB, 49,152 vocab): cheap real model."""
    return installed_path(SMOLLM2)


@pytest.fixture(scope="session")
def deepseek_header_path() -> Path:
    """Header-only DeepSeek-R1-Distill-Qwen-7B GGUF part (not loadable): a near-miss vocab."""
    return installed_path(DEEPSEEK_HEADER)


@pytest.fixture(scope="session")
def smol_engine(smollm2_path: Path) -> Iterator[object]:
    """A real Engine: SmolLM2 drafting for itself (shared across tests; keep it usable)."""
    from localspec.engine import Engine, ModelSpec

    spec = ModelSpec(str(smollm2_path), n_ctx=2048, name="SmolLM2-135M")
    engine = Engine(spec, spec, check_invariants=True)
    yield engine
    engine.close()
