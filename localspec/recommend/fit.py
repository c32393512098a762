"""Memory fit and speed of one (target, drafter) choice on one machine.

Memory: GGUF weights + f16 KV cache at the context for both models + compute buffers + one
CUDA context. When the target does not fit in VRAM next to the drafter, as many target layers
as fit go to the GPU (llama.cpp `-ngl`) and the rest run from RAM.
Speed: decoding is memory-bound, so one token costs a fixed per-layer overhead plus the bytes
read divided by the effective bandwidth of where they sit (GPU or CPU). Every constant here is
an estimate with its reason; `localspec recommend --measure` replaces α, c and b by measured ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from localspec.catalog import CatalogFile, CatalogModel
from localspec.hardware import HardwareReport

GIB = 1 << 30
CUDA_CONTEXT_BYTES = 400 << 20
"""CUDA context + cuBLAS workspace of one process (estimated; ~300–500 MiB on recent drivers)."""
VRAM_USABLE_FRACTION = 0.95
"""Leave room for the desktop and allocator fragmentation (estimated)."""
RAM_USABLE_FRACTION = 0.85
"""Of --ram / available RAM, leave the rest to the OS and the app itself (estimated)."""
N_UBATCH = 512
"""llama.cpp's default micro-batch: sizes the compute buffer."""
DEFAULT_GPU_BANDWIDTH = 450e9
"""When NVML does not give bus width and clock (e.g. --vram without a GPU): a mid-range card."""
GPU_EFFICIENCY = 0.75
"""Share of peak memory bandwidth llama.cpp's decode kernels reach (estimated)."""
GPU_LAYER_OVERHEAD_S = 50e-6
"""Per-layer kernel-launch cost of one decode step on a GPU (estimated; dominates tiny drafters)."""
CPU_BANDWIDTH = 40e9
"""Desktop dual-channel DDR4/DDR5 peak (estimated)."""
CPU_EFFICIENCY = 0.6
CPU_BYTES_PER_S_PER_CORE = 7.2e9
"""Measured here: Qwen2.5-Coder-1.5B Q4_K_M (1.12 GB) decodes at 13.0 t/s on 2 cores."""
GPU_BATCH_SLOPE = 0.02
"""b(γ) = 1 + 0.02γ on a GPU: a small verify batch costs about one token (memory-bound; estimated)."""
CPU_BATCH_SLOPE = 0.3
"""b(γ) = 1 + 0.3γ on the CPU: measured here, batch of 5 = 2.13×, batch of 9 = 3.48× one token."""


@dataclass(frozen=True)
class Budget:
    """Memory and bandwidth the recommender may plan with."""

    vram_bytes: int
    """Total VRAM of the GPU to use; 0 = no GPU."""
    ram_bytes: int
    """RAM the models may use (before RAM_USABLE_FRACTION)."""
    gpu_name: str | None
    gpu_bandwidth: float
    cpu_bytes_per_s: float
    """Effective CPU decode throughput in weight bytes per second."""
    source: str
    """Where the figures came from ("NVML", "--vram 24", "no GPU: ...")."""

    @property
    def has_gpu(self) -> bool:
        """True when a GPU is planned for."""
        return self.vram_bytes > 0


def budget_from(report: HardwareReport, vram_gb: float | None = None, ram_gb: float | None = None) -> Budget:
    """A Budget from the probe, with --vram / --ram (GiB, as cards and DIMMs are sold) overriding it."""
    gpu = report.best_gpu
    cores = max(1, report.cpu_cores_physical)
    cpu_bps = min(CPU_BANDWIDTH * CPU_EFFICIENCY, CPU_BYTES_PER_S_PER_CORE * cores)
    ram = int(ram_gb * GIB) if ram_gb is not None else report.ram_available_bytes
    if vram_gb is not None:
        bw = gpu.memory_bandwidth_bytes_s if gpu and gpu.memory_bandwidth_bytes_s else DEFAULT_GPU_BANDWIDTH
        return Budget(int(vram_gb * GIB), ram, gpu.name if gpu else None, bw, cpu_bps, f"--vram {vram_gb:g}")
    if gpu is None:
        return Budget(0, ram, None, 0.0, cpu_bps, report.gpu_error or "no NVIDIA GPU found")
    bw = gpu.memory_bandwidth_bytes_s or DEFAULT_GPU_BANDWIDTH
    return Budget(gpu.vram_total_bytes, ram, gpu.name, bw, cpu_bps, f"NVML: {gpu.name}")


def compute_buffer_bytes(model: CatalogModel) -> int:
    """llama.cpp compute buffer for one micro-batch: logits plus activations (estimated)."""
    return N_UBATCH * 4 * (model.n_vocab + 8 * model.n_embd)


@dataclass(frozen=True)
class Placement:
    """Where a pair's weights go and what it needs."""

    kind: str
    """"gpu" (both fully offloaded), "partial" (target split GPU/RAM, drafter on GPU), "cpu"."""
    target_gpu_layers: int
    """llama.cpp `-ngl` for the target: repeating layers plus the output layer count."""
    target_layers: int
    """n_layer + 1 (the output layer); `-ngl` equal to this offloads everything."""
    vram_bytes: int
    ram_bytes: int
    target_token_s: float
    """Predicted seconds per target decode step of one token."""
    draft_token_s: float
    batch_slope: float
    """b(γ) = 1 + slope·γ for this placement (time-weighted GPU/CPU mix)."""
    target_all_gpu_token_s: float
    """What a target token would cost fully on the GPU (for the offload cost line)."""


def _token_s(model: CatalogModel, size: int, gpu_layers: int, budget: Budget) -> tuple[float, float]:
    """(seconds per token, share of that time on the CPU) with `gpu_layers` layers on the GPU."""
    per_layer = size / (model.n_layer + 1)  # embeddings + output count as one more layer
    gpu_bytes = per_layer * gpu_layers if budget.has_gpu else 0.0
    cpu_bytes = size - gpu_bytes
    t_gpu = (gpu_bytes / (budget.gpu_bandwidth * GPU_EFFICIENCY) + GPU_LAYER_OVERHEAD_S * gpu_layers
             if gpu_layers and budget.has_gpu else 0.0)
    t_cpu = cpu_bytes / budget.cpu_bytes_per_s
    total = t_gpu + t_cpu
    return total, (t_cpu / total if total else 0.0)


def place(target: CatalogModel, tfile: CatalogFile, draft: CatalogModel, dfile: CatalogFile,
          n_ctx: int, budget: Budget) -> Placement | None:
    """The best placement of the pair at `n_ctx`, or None when it fits nowhere."""
    kv_t, kv_d = target.kv_bytes(n_ctx), draft.kv_bytes(n_ctx)
    buf_t, buf_d = compute_buffer_bytes(target), compute_buffer_bytes(draft)
    vram = budget.vram_bytes * VRAM_USABLE_FRACTION
    ram = budget.ram_bytes * RAM_USABLE_FRACTION
    all_gpu_t = _token_s(target, tfile.size, target.n_layer + 1, budget)[0] if budget.has_gpu else math.inf
    if budget.has_gpu:
        need = CUDA_CONTEXT_BYTES + tfile.size + kv_t + buf_t + dfile.size + kv_d + buf_d
        if need <= vram:
            t, _ = _token_s(target, tfile.size, target.n_layer + 1, budget)
            d, _ = _token_s(draft, dfile.size, draft.n_layer + 1, budget)
            return Placement("gpu", target.n_layer + 1, target.n_layer + 1, int(need), 0, t, d, GPU_BATCH_SLOPE, all_gpu_t)
        draft_gpu = CUDA_CONTEXT_BYTES + dfile.size + kv_d + buf_d + buf_t
        per_layer = tfile.size / (target.n_layer + 1) + target.kv_bytes(n_ctx, 1)
        layers = min(target.n_layer, int((vram - draft_gpu) // per_layer)) if vram > draft_gpu else -1
        if layers >= 0:
            cpu_need = tfile.size - layers * tfile.size / (target.n_layer + 1) + target.kv_bytes(n_ctx, target.n_layer - layers)
            if cpu_need <= ram:
                t, cpu_share = _token_s(target, tfile.size, layers, budget)
                d, _ = _token_s(draft, dfile.size, draft.n_layer + 1, budget)
                slope = GPU_BATCH_SLOPE * (1 - cpu_share) + CPU_BATCH_SLOPE * cpu_share
                vram_used = int(draft_gpu + layers * per_layer)
                return Placement("partial", layers, target.n_layer + 1, vram_used, int(cpu_need), t, d, slope, all_gpu_t)
    need = tfile.size + kv_t + buf_t + dfile.size + kv_d + buf_d
    if need > ram:
        return None
    t, _ = _token_s(target, tfile.size, 0, budget)
    d, _ = _token_s(draft, dfile.size, 0, budget)
    return Placement("cpu", 0, target.n_layer + 1, 0, int(need), t, d, CPU_BATCH_SLOPE, all_gpu_t)
