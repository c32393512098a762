"""`localspec bench`: acceptance length per domain (SPEED-Bench style), the draft-length
sweep, and the speed model's optimal γ — measured through the engine's public API only.

runner (interleaved arms; lockstep: an engine per arm, a step each in turn) -> summary/estimates (pooled counts, α, c, b(γ), theory) ->
report (JSON, rich and markdown tables) and plot (PNG).
"""

from __future__ import annotations

from localspec.bench.lockstep import run_lockstep
from localspec.bench.runner import SWEEP_GAMMAS, Arm, BenchConfig, BenchRun, Sample, make_arms, run_bench

__all__ = ["SWEEP_GAMMAS", "Arm", "BenchConfig", "BenchRun", "Sample", "make_arms", "run_bench", "run_lockstep"]
