"""localspec.gpus: the GPU table, lenient lookup, the typical card per VRAM size, and the
budgets `recommend --gpu/--vram` plan with."""

from __future__ import annotations

import pytest
from test_hardware import fake_nvml

from localspec.gpus import GIB, UnknownGpuError, find_gpu, gpu_for_vram, load_gpus, match_probed
from localspec.hardware import HardwareReport, probe
from localspec.recommend import budget_from


def test_table_covers_rtx_20_to_50_desktop_and_laptop_with_sources() -> None:
    gpus = load_gpus()
    for series in (20, 30, 40, 50):
        assert any(g.series == series and not g.laptop for g in gpus), series
        assert any(g.series == series and g.laptop for g in gpus), series
    assert len({g.name for g in gpus}) == len(gpus)
    for g in gpus:
        assert g.vram_gb > 0 and 100 < g.bandwidth_gbs < 2000 and g.source
        assert g.vram_bytes == int(g.vram_gb * GIB) and g.bandwidth_bytes_s == g.bandwidth_gbs * 1e9
    assert find_gpu("RTX 4090").bandwidth_gbs == 1008 and find_gpu("RTX 3090").vram_gb == 24


@pytest.mark.parametrize("name", ["RTX 4090", "rtx4090", "4090", "NVIDIA GeForce RTX 4090", "  geforce rtx-4090 "])
def test_find_gpu_is_lenient(name: str) -> None:
    assert find_gpu(name).name == "RTX 4090"


def test_find_gpu_laptop_parts_and_memory_variants() -> None:
    assert find_gpu("NVIDIA GeForce RTX 4090 Laptop GPU").name == "RTX 4090 Laptop"
    assert find_gpu("rtx 3080 mobile 16gb").name == "RTX 3080 Laptop 16GB"
    assert find_gpu("RTX 4060 Ti 16GB").vram_gb == 16
    assert find_gpu("RTX 4060 Ti", vram_gb=8).vram_gb == 8
    with pytest.raises(UnknownGpuError, match="8 GB, 12 GB"):
        find_gpu("RTX 3060")


def test_unknown_gpu_lists_close_matches() -> None:
    with pytest.raises(UnknownGpuError) as err:
        find_gpu("RTX 4099")
    text = str(err.value)
    assert "RTX 4090" in text and "--vram" in text
    with pytest.raises(UnknownGpuError):
        find_gpu("Radeon RX 7900 XTX")


def test_gpu_for_vram_picks_the_typical_card_of_the_size() -> None:
    assert gpu_for_vram(24).bandwidth_gbs >= 900  # 3090/4090 class, ~1 TB/s
    assert gpu_for_vram(32).name == "RTX 5090"
    for vram in (6, 8, 12, 16, 24):
        card = gpu_for_vram(vram)
        same = sorted(g.bandwidth_gbs for g in load_gpus() if not g.laptop and g.vram_gb == card.vram_gb)
        assert same[0] <= card.bandwidth_gbs <= same[-1] and card.vram_gb == vram and not card.laptop


def test_match_probed_uses_name_and_memory() -> None:
    assert match_probed("NVIDIA GeForce RTX 3060", 12 * GIB).name == "RTX 3060 12GB"  # type: ignore[union-attr]
    assert match_probed("NVIDIA GeForce Test 24GB", 24 * GIB) is None


def _no_gpu() -> HardwareReport:
    return HardwareReport([], "no NVIDIA GPU found: test", 64 * GIB, 32 * GIB, 8, 16, False)


def test_budget_for_a_named_gpu() -> None:
    b = budget_from(_no_gpu(), gpu_name="RTX 4070 Ti Super")
    assert b.has_gpu and b.vram_bytes == 16 * GIB and b.gpu_bandwidth == 672e9 and b.gpu_name == "RTX 4070 Ti Super"
    assert "GPU table" in b.source
    assert budget_from(_no_gpu(), vram_gb=12, gpu_name="RTX 3060").vram_bytes == 12 * GIB


def test_budget_from_vram_alone_says_which_bandwidth_it_assumed() -> None:
    b = budget_from(_no_gpu(), vram_gb=24)
    assert b.gpu_bandwidth == gpu_for_vram(24).bandwidth_bytes_s and b.gpu_bandwidth >= 900e9
    assert f"assuming an {gpu_for_vram(24).name}-class card" in b.source and "GB/s" in b.source


def test_budget_for_a_probed_gpu_without_bandwidth_uses_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, [("NVIDIA GeForce RTX 3090", 24)], bus_bits=0)
    b = budget_from(probe())
    assert b.gpu_bandwidth == 936e9 and b.source == "NVML: NVIDIA GeForce RTX 3090"
