"""Consumer NVIDIA GPUs by name: VRAM and memory bandwidth from models/gpus.toml.

`localspec recommend --gpu "RTX 4090"` and the TUI's models screen plan for a card that is
not in this machine; `--vram` alone plans for the typical card of that memory size. Names are
matched leniently ("rtx4090", "NVIDIA GeForce RTX 4090 Laptop GPU", "4060 ti 16gb"); an unknown
name is an UnknownGpuError that lists the close matches. Layer 1: stdlib only.
"""

from __future__ import annotations

import difflib
import functools
import re
import statistics
import tomllib
from dataclasses import dataclass

from localspec.errors import LocalSpecError
from localspec.paths import packaged

GIB = 1 << 30


class UnknownGpuError(LocalSpecError):
    """A GPU name that the table does not know (or that needs its memory size to be told)."""


@dataclass(frozen=True)
class GpuSpec:
    """One card of the table."""

    name: str
    """"RTX 4090", "RTX 4060 Ti 16GB", "RTX 4090 Laptop"."""
    series: int
    vram_gb: float
    bandwidth_gbs: float
    """Peak memory bandwidth in GB/s (bus width / 8 x data rate)."""
    source: str
    laptop: bool = False

    @property
    def vram_bytes(self) -> int:
        """VRAM in bytes, read as GiB (what NVML reports for a card sold as N GB)."""
        return int(self.vram_gb * GIB)

    @property
    def bandwidth_bytes_s(self) -> float:
        """Peak bandwidth in bytes per second."""
        return self.bandwidth_gbs * 1e9

    @property
    def label(self) -> str:
        """"RTX 4090 (24 GB, 1008 GB/s)"."""
        return f"{self.name} ({self.vram_gb:g} GB, {self.bandwidth_gbs:g} GB/s)"


@functools.cache
def load_gpus() -> tuple[GpuSpec, ...]:
    """Every card in the packaged table, in file order."""
    data = tomllib.loads(packaged("models", "gpus.toml").read_text(encoding="utf-8"))
    return tuple(
        GpuSpec(name=g["name"], series=int(g["series"]), vram_gb=float(g["vram_gb"]),
                bandwidth_gbs=float(g["bandwidth_gbs"]), source=g["source"], laptop=bool(g.get("laptop", False)))
        for g in data["gpu"]
    )


_VRAM = re.compile(r"(\d+)\s*gb\b")
_NOISE = re.compile(r"\b(nvidia|geforce)\b")
_LAPTOP = re.compile(r"\b(laptop(\s+gpu)?|mobile|notebook|max-?q)\b")


def _parse(name: str) -> tuple[str, bool, float | None]:
    """(model key, laptop?, VRAM hint in GB) of a free-form GPU name: "rtx4090", False, None."""
    text = name.lower().strip()
    vram_match = _VRAM.search(text)
    vram = float(vram_match.group(1)) if vram_match else None
    text = _VRAM.sub(" ", text)
    laptop = bool(_LAPTOP.search(text))
    text = _LAPTOP.sub(" ", _NOISE.sub(" ", text))
    key = re.sub(r"[\s_\-]+", "", text)
    if key and key[0].isdigit():
        key = "rtx" + key
    return key, laptop, vram


def _key(spec: GpuSpec) -> str:
    return _parse(spec.name)[0]


def find_gpu(name: str, vram_gb: float | None = None) -> GpuSpec:
    """The card called `name` (case, spaces, "NVIDIA GeForce" and "Laptop GPU" forms all match).

    A model sold with several memory sizes (RTX 3060 8/12 GB, RTX 4060 Ti 8/16 GB) needs the
    size in the name ("RTX 4060 Ti 16GB") or `vram_gb`; UnknownGpuError says which sizes exist.
    """
    key, laptop, vram_hint = _parse(name)
    vram = vram_hint if vram_hint is not None else vram_gb
    gpus = load_gpus()
    same = [g for g in gpus if _key(g) == key and g.laptop == laptop]
    if vram is not None and len(same) > 1:
        sized = [g for g in same if abs(g.vram_gb - vram) < 1.0]
        same = sized or same
    if len(same) == 1:
        return same[0]
    if len(same) > 1:
        sizes = ", ".join(f"{g.vram_gb:g} GB" for g in same)
        raise UnknownGpuError(
            f"{name!r} is sold with {sizes}: say which, e.g. --gpu {same[-1].name!r}"
        )
    names = {f"{_key(g)}{' laptop' if g.laptop else ''}": g.name for g in gpus}
    wanted = f"{key}{' laptop' if laptop else ''}"
    close = [names[k] for k in difflib.get_close_matches(wanted, list(names), n=6, cutoff=0.6)]
    hint = f" Close matches: {', '.join(close)}." if close else ""
    raise UnknownGpuError(
        f"no GPU called {name!r} in localspec's table of RTX 20/30/40/50 desktop and laptop cards.{hint} "
        "For another card give its memory size instead: --vram GB."
    )


def gpu_for_vram(vram_gb: float) -> GpuSpec:
    """The typical desktop card of a memory size: the one with the median bandwidth among the
    desktop cards with the nearest VRAM, newest first (24 GB -> RTX 4090, 1008 GB/s)."""
    desktop = [g for g in load_gpus() if not g.laptop]
    nearest = min({g.vram_gb for g in desktop}, key=lambda v: (abs(v - vram_gb), -v))
    same = [g for g in desktop if g.vram_gb == nearest]
    median = statistics.median_high(g.bandwidth_gbs for g in same)
    # of the cards at the median, the newest series (and the plain name over a "D" or "Super")
    return min((g for g in same if g.bandwidth_gbs == median), key=lambda g: (-g.series, len(g.name)))


def match_probed(name: str, vram_bytes: int) -> GpuSpec | None:
    """The table's entry for a GPU NVML reported (by name and memory size), if any."""
    try:
        return find_gpu(name, vram_bytes / GIB)
    except UnknownGpuError:
        return None
