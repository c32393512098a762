"""Memory fit and speed of one (target, drafter) choice on one machine.

Memory: GGUF weights + f16 KV cache at the context for both models + compute buffers + one
CUDA context. When the target does not fit in VRAM next to the drafter, as many target layers
as fit go to the GPU (llama.cpp `-ngl`) and the rest run from RAM.
With RPC workers (`--rpc`) the target's layers go to the workers, as many as fit in their free
memory (llama.cpp splits them by free memory), the rest to this machine's RAM; the drafter stays
local (on the GPU when one is planned and it fits). A worker's compute speed cannot be asked
over the protocol: it is taken to be this machine's (its GPU's when it has one, else its CPU's),
plus a round trip per worker and forward.
Speed: localspec.recommend.speed (memory-bound decode that follows active parameters, plus a
fixed launch cost per layer). The GPU is the probed one, a card named with `--gpu` (the table
in models/gpus.toml), or with `--vram` alone the typical card of that memory size. Every
constant is an estimate with its reason; `localspec recommend --measure` replaces α, c and b by
measured ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from localspec.catalog import CatalogFile, CatalogModel
from localspec.gpus import find_gpu, gpu_for_vram, match_probed
from localspec.hardware import HardwareReport
from localspec.recommend.speed import (
    CPU_BANDWIDTH,
    CPU_BATCH_SLOPE,
    CPU_BYTES_PER_S_PER_CORE,
    CPU_EFFICIENCY,
    DRAFT_STEP_OVERHEAD_S,
    GPU_BATCH_SLOPE,
    TokenTime,
    token_time,
)

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
"""Last resort when a probed GPU reports no bus width or clock and is not in the GPU table."""
RPC_USABLE_FRACTION = 0.9
"""Of a worker's free memory, leave the rest to allocator fragmentation and what else runs
there (estimated; the worker's compute buffer is counted apart)."""
RPC_ROUND_TRIP_S = 0.5e-3
"""Added to every target forward per worker: llama.cpp's RPC client sends the activations and
the graph and waits for the result, about two round trips of ~0.25 ms on gigabit Ethernet
(estimated; on loopback the cost was below what docs/bench/rpc.md could resolve)."""


@dataclass(frozen=True)
class RpcWorker:
    """An RPC worker the recommender may put target layers on (from `localspec worker`'s
    answer to the probe)."""

    endpoint: str
    free_bytes: int
    total_bytes: int


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
    """Where the figures came from ("NVML: ...", "--gpu RTX 4090 ...", "--vram 24: assuming ...")."""
    rpc_workers: tuple[RpcWorker, ...] = ()
    """Workers for the target's layers (`--rpc`); none: everything runs here."""

    @property
    def has_gpu(self) -> bool:
        """True when a GPU is planned for."""
        return self.vram_bytes > 0

    @property
    def rpc_free_bytes(self) -> int:
        """The workers' free memory together."""
        return sum(w.free_bytes for w in self.rpc_workers)


def budget_from(report: HardwareReport, vram_gb: float | None = None, ram_gb: float | None = None,
                gpu_name: str | None = None, rpc_workers: tuple[RpcWorker, ...] = ()) -> Budget:
    """A Budget from the probe; `gpu_name` plans for a card from the GPU table, `vram_gb` /
    `ram_gb` (GiB, as cards and DIMMs are sold) override the memory sizes; `rpc_workers` take
    the target's layers.

    With `vram_gb` and no GPU (probed or named), the bandwidth is that of the typical card of
    the size (gpus.gpu_for_vram) and `source` says which card was assumed."""
    return replace(_local_budget(report, vram_gb, ram_gb, gpu_name), rpc_workers=tuple(rpc_workers))


def _local_budget(report: HardwareReport, vram_gb: float | None, ram_gb: float | None,
                  gpu_name: str | None) -> Budget:
    gpu = report.best_gpu
    cores = max(1, report.cpu_cores_physical)
    cpu_bps = min(CPU_BANDWIDTH * CPU_EFFICIENCY, CPU_BYTES_PER_S_PER_CORE * cores)
    ram = int(ram_gb * GIB) if ram_gb is not None else report.ram_available_bytes
    if gpu_name is not None:
        spec = find_gpu(gpu_name, vram_gb)
        vram = int(vram_gb * GIB) if vram_gb is not None else spec.vram_bytes
        return Budget(vram, ram, spec.name, spec.bandwidth_bytes_s, cpu_bps,
                      f"--gpu {spec.name}: {vram / GIB:g} GiB, {spec.bandwidth_gbs:g} GB/s (GPU table)")
    if vram_gb is not None:
        if gpu is not None:
            bw = _probed_bandwidth(gpu.name, gpu.vram_total_bytes, gpu.memory_bandwidth_bytes_s)
            return Budget(int(vram_gb * GIB), ram, gpu.name, bw, cpu_bps, f"--vram {vram_gb:g} on {gpu.name}")
        spec = gpu_for_vram(vram_gb)
        return Budget(int(vram_gb * GIB), ram, None, spec.bandwidth_bytes_s, cpu_bps,
                      f"--vram {vram_gb:g}: assuming an {spec.name}-class card ({spec.bandwidth_gbs:g} GB/s); "
                      "--gpu names the card")
    if gpu is None:
        return Budget(0, ram, None, 0.0, cpu_bps, report.gpu_error or "no NVIDIA GPU found")
    bw = _probed_bandwidth(gpu.name, gpu.vram_total_bytes, gpu.memory_bandwidth_bytes_s)
    return Budget(gpu.vram_total_bytes, ram, gpu.name, bw, cpu_bps, f"NVML: {gpu.name}")


def _probed_bandwidth(name: str, vram_bytes: int, nvml_bandwidth: float | None) -> float:
    """NVML's bus width x clock, else the GPU table's figure for the card, else a default."""
    if nvml_bandwidth:
        return nvml_bandwidth
    spec = match_probed(name, vram_bytes)
    return spec.bandwidth_bytes_s if spec else DEFAULT_GPU_BANDWIDTH


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
    target_time: TokenTime | None = None
    """The target's step split into launches, GPU reads and CPU time (for b(γ))."""
    rpc_bytes: int = 0
    """Worker memory the target's layers and their KV cache take ("rpc": `target_gpu_layers`
    layers on the workers, the rest in RAM)."""


def _time(model: CatalogModel, size: int, gpu_layers: int, budget: Budget) -> TokenTime:
    return token_time(model, size, gpu_layers if budget.has_gpu else 0, budget.gpu_bandwidth, budget.cpu_bytes_per_s)


def _draft_s(draft: CatalogModel | None, dfile: CatalogFile | None, budget: Budget, on_gpu: bool) -> float:
    if draft is None or dfile is None:
        return 0.0
    t = _time(draft, dfile.size, draft.n_layer + 1 if on_gpu else 0, budget).total_s
    return t + (DRAFT_STEP_OVERHEAD_S if on_gpu else 0.0)


def place(target: CatalogModel, tfile: CatalogFile, draft: CatalogModel | None, dfile: CatalogFile | None,
          n_ctx: int, budget: Budget, extra_bytes: int = 0) -> Placement | None:
    """The best placement of the pair at `n_ctx`, or None when it fits nowhere. `draft=None`
    places the target alone; `extra_bytes` reserves room for a drafter head next to it."""
    kv_t = target.kv_bytes(n_ctx)
    kv_d = draft.kv_bytes(n_ctx) if draft is not None else 0
    buf_t = compute_buffer_bytes(target)
    buf_d = compute_buffer_bytes(draft) if draft is not None else 0
    d_size = (dfile.size if dfile is not None else 0) + extra_bytes
    vram = budget.vram_bytes * VRAM_USABLE_FRACTION
    ram = budget.ram_bytes * RAM_USABLE_FRACTION
    layers_all = target.n_layer + 1
    all_gpu_t = _time(target, tfile.size, layers_all, budget).total_s if budget.has_gpu else math.inf
    if budget.rpc_workers:
        return _place_rpc(target, tfile, draft, dfile, n_ctx, budget, d_size, kv_d, buf_d, all_gpu_t)
    if budget.has_gpu:
        need = CUDA_CONTEXT_BYTES + tfile.size + kv_t + buf_t + d_size + kv_d + buf_d
        if need <= vram:
            t = _time(target, tfile.size, layers_all, budget)
            d = _draft_s(draft, dfile, budget, True)
            return Placement("gpu", layers_all, layers_all, int(need), 0, t.total_s, d, GPU_BATCH_SLOPE, all_gpu_t, t)
        draft_gpu = CUDA_CONTEXT_BYTES + d_size + kv_d + buf_d + buf_t
        per_layer = tfile.size / layers_all + target.kv_bytes(n_ctx, 1)
        layers = min(target.n_layer, int((vram - draft_gpu) // per_layer)) if vram > draft_gpu else -1
        if layers >= 0:
            cpu_need = tfile.size - layers * tfile.size / layers_all + target.kv_bytes(n_ctx, target.n_layer - layers)
            if cpu_need <= ram:
                t = _time(target, tfile.size, layers, budget)
                d = _draft_s(draft, dfile, budget, True)
                slope = GPU_BATCH_SLOPE * (1 - t.cpu_share) + CPU_BATCH_SLOPE * t.cpu_share
                vram_used = int(draft_gpu + layers * per_layer)
                return Placement("partial", layers, layers_all, vram_used, int(cpu_need), t.total_s, d, slope,
                                 all_gpu_t, t)
    need = tfile.size + kv_t + buf_t + d_size + kv_d + buf_d
    if need > ram:
        return None
    t = _time(target, tfile.size, 0, budget)
    d = _draft_s(draft, dfile, budget, False)
    return Placement("cpu", 0, layers_all, 0, int(need), t.total_s, d, CPU_BATCH_SLOPE, all_gpu_t, t)


def rpc_layers(target: CatalogModel, tfile: CatalogFile, n_ctx: int, workers: tuple[RpcWorker, ...]) -> int:
    """How many of the target's n_layer + 1 layers (`-ngl`) the workers hold: each layer's
    weights and KV cache, after one compute buffer per worker, in RPC_USABLE_FRACTION of
    their free memory together (llama.cpp splits layers by free memory)."""
    usable = sum(w.free_bytes for w in workers) * RPC_USABLE_FRACTION - len(workers) * compute_buffer_bytes(target)
    per_layer = tfile.size / (target.n_layer + 1) + target.kv_bytes(n_ctx, 1)
    return max(0, min(target.n_layer + 1, int(usable // per_layer))) if usable > 0 else 0


def _place_rpc(target: CatalogModel, tfile: CatalogFile, draft: CatalogModel | None, dfile: CatalogFile | None,
               n_ctx: int, budget: Budget, d_size: int, kv_d: int, buf_d: int, all_gpu_t: float) -> Placement | None:
    """The target on the workers as far as they hold it, the rest in RAM; the drafter local."""
    workers = budget.rpc_workers
    layers_all = target.n_layer + 1
    layers = rpc_layers(target, tfile, n_ctx, workers)
    buf_t = compute_buffer_bytes(target)
    on_workers = int(layers * tfile.size / layers_all + target.kv_bytes(n_ctx, min(layers, target.n_layer)))
    local_target = tfile.size - layers * tfile.size / layers_all + target.kv_bytes(n_ctx, target.n_layer - min(layers, target.n_layer)) + buf_t
    draft_vram = CUDA_CONTEXT_BYTES + d_size + kv_d + buf_d
    draft_on_gpu = budget.has_gpu and draft_vram <= budget.vram_bytes * VRAM_USABLE_FRACTION
    ram_need = local_target + (0 if draft_on_gpu else d_size + kv_d + buf_d)
    if ram_need > budget.ram_bytes * RAM_USABLE_FRACTION:
        return None
    # worker layers at this machine's speed (GPU when it has one), RAM layers on its CPU
    t = _time(target, tfile.size, layers if budget.has_gpu else 0, budget)
    if layers:
        t = replace(t, fixed_s=t.fixed_s + RPC_ROUND_TRIP_S * len(workers))
    d = _draft_s(draft, dfile, budget, draft_on_gpu)
    slope = GPU_BATCH_SLOPE * (1 - t.cpu_share) + CPU_BATCH_SLOPE * t.cpu_share
    return Placement("rpc" if layers else "cpu", layers, layers_all, draft_vram if draft_on_gpu else 0, int(ram_need),
                     t.total_s, d, slope, all_gpu_t, t, rpc_bytes=on_workers if layers else 0)
