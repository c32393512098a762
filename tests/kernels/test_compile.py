"""The kernel sources build: for every supported architecture with nvcc, and for the host."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from localspec.kernels import _build
from localspec.kernels._build import TEST_ARCHS, KernelBuildError, compile_check, find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (install the CUDA toolkit)")


@needs_nvcc
def test_compile_check_builds_every_arch(tmp_path: Path) -> None:
    assert TEST_ARCHS == ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_120")
    size = compile_check(TEST_ARCHS, out_dir=tmp_path)
    lib = tmp_path / _build.DEVICE_LIBRARY
    assert lib.is_file() and lib.stat().st_size == size > 100_000
    data = lib.read_bytes()
    # every kernel symbol follows the `_kernel` naming and is in the fat binary
    assert b"accept_greedy_kernel" in data and b"accept_stochastic_kernel" in data
    assert b"accept_batch_kernel" in data and b"lsk_accept_batch" in data


def _broken_sources(tmp_path: Path) -> tuple[Path, int]:
    """A copy of cuda/ with a syntax error on a known line of accept_math.cuh."""
    src = Path(str(_build.packaged("cuda")))
    dst = tmp_path / "cuda"
    shutil.copytree(src, dst)
    header = dst / "accept_math.cuh"
    lines = header.read_text().splitlines()
    line_no = next(i for i, ln in enumerate(lines) if "LSK_HD uint32_t logit_key" in ln) + 2
    lines.insert(line_no - 1, "    this is not C++;")
    header.write_text("\n".join(lines) + "\n")
    return dst, line_no


def test_host_build_error_points_at_the_source_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if _build.find_host_compiler() is None:
        pytest.skip("no C++ compiler")
    broken, line_no = _broken_sources(tmp_path)
    monkeypatch.setattr(_build, "packaged", lambda *parts: broken)
    monkeypatch.setenv("LOCALSPEC_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(KernelBuildError) as info:
        _build.build_host_library()
    assert f"accept_math.cuh:{line_no}" in str(info.value)
    assert not list((tmp_path / "cache").rglob("*.so")), "a failed build must not leave a library in the cache"


@needs_nvcc
def test_nvcc_build_error_points_at_the_source_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken, line_no = _broken_sources(tmp_path)
    monkeypatch.setattr(_build, "packaged", lambda *parts: broken)
    with pytest.raises(KernelBuildError) as info:
        compile_check(("sm_90",), out_dir=tmp_path)
    assert f"accept_math.cuh({line_no})" in str(info.value)


def test_cache_key_changes_with_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = Path(str(_build.packaged("cuda")))
    copy = tmp_path / "cuda"
    shutil.copytree(src, copy)
    monkeypatch.setattr(_build, "packaged", lambda *parts: copy)
    before = _build.source_digest()
    (copy / "accept.cu").write_text((copy / "accept.cu").read_text() + "\n// edited\n")
    assert _build.source_digest() != before


def test_missing_nvcc_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_build, "find_nvcc", lambda: None)
    with pytest.raises(_build.KernelUnavailableError, match="nvcc not found"):
        _build.build_device_library("sm_90")


def test_target_arch_from_the_hardware_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from localspec import hardware

    fake = SimpleNamespace(gpus=[SimpleNamespace(compute_capability=(8, 9))])
    monkeypatch.setattr(hardware, "probe", lambda: fake, raising=False)
    assert _build.target_arch() == "sm_89"
    assert _build.arch_flags("sm_89") == ["-gencode", "arch=compute_89,code=[sm_89,compute_89]"]
    monkeypatch.setattr(hardware, "probe", lambda: SimpleNamespace(gpus=[]), raising=False)
    assert _build.target_arch() == "native"
