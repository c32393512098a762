"""Decode speed of a model on a placement, and the cost of verifying γ+1 tokens at once.

Decoding is memory-bound: one token reads the weights it uses once. A dense model reads all
of them; a mixture-of-experts (MoE) model reads its shared part plus the k experts the router
picks, so **decode cost follows active parameters**. Each layer also pays a fixed kernel-launch
cost; a MoE layer (router, top-k, expert gather) launches about a dense layer's worth more, a
Gated DeltaNet layer (recurrent update) about half of one.

Verification is where a MoE differs: the γ+1 tokens of one verify batch are routed
independently, so together they touch more experts than one token does. With E experts and
top-k routing, n tokens touch on average E·(1 − (1 − k/E)^n) distinct experts per layer
(each expert is missed by one token with probability 1 − k/E). A verify batch therefore reads
(1 − f) + f·distinct(n)/k times the bytes of one token, where f is the routed experts' share
of the active parameters. For Qwen3.5-35B-A3B (256 experts, top-8) a 5-token verify reads
4.7× the expert bytes of one token, so speculative decoding gains much less on small-active
MoE targets than on dense ones (published: no llama.cpp draft configuration beat plain decoding
of Qwen3.6-35B-A3B on an RTX 3090; see the README).

Constants are estimates with their reasons; the published-figures test in
tests/models/test_published.py holds the whole model against measurements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from localspec.catalog import CatalogModel

GPU_EFFICIENCY = 0.9
"""Share of peak memory bandwidth llama.cpp's quantized decode kernels reach. Fitted, with
GPU_LAYER_OVERHEAD_S, to published Llama-3-8B Q4_K_M decode speeds on seven RTX 30/40 cards
(XiongjieDai/GPU-Benchmarks-on-LLM-Inference): every card within 18 % (most within 6 %)."""
GPU_LAYER_OVERHEAD_S = 60e-6
"""Fixed kernel-launch and synchronisation cost of one dense layer in one decode step."""
EXTRA_LAUNCH_MOE = 1.0
"""A MoE layer adds about one dense layer's launches (router, top-k, expert gather; estimated).
In a verify batch this part is taken to grow with the experts the batch touches (estimated: it
is what reconciles the model with the published RTX 3090 Qwen3.6-35B-A3B results, where no
llama.cpp draft configuration beat plain decoding)."""
EXTRA_LAUNCH_RECURRENT = 0.5
"""A Gated DeltaNet layer adds about half a dense layer's launches (recurrent update; estimated)."""
CPU_BANDWIDTH = 40e9
"""Desktop dual-channel DDR4/DDR5 peak (estimated)."""
CPU_EFFICIENCY = 0.6
CPU_BYTES_PER_S_PER_CORE = 7.2e9
"""Measured here: Qwen2.5-Coder-1.5B Q4_K_M (1.12 GB) decodes at 13.0 t/s on 2 cores."""
GPU_BATCH_SLOPE = 0.12
"""Extra cost per extra token of a verify batch on the GPU's weight-reading time: llama.cpp's
quantized mat-vec kernels for batches of 2-8 are not free. Published: RTX 3090, llama 7B Q4_0,
batch 1 at 126 t/s and batch 4 at 384 t/s (llama.cpp PR #6646), i.e. 4 tokens cost 1.31x one."""
CPU_BATCH_SLOPE = 0.3
"""b(γ) = 1 + 0.3γ on the CPU: measured here, batch of 5 = 2.13x, batch of 9 = 3.48x one token."""
DRAFT_STEP_OVERHEAD_S = 0.2e-3
"""Per drafted token on a GPU: sampling on the CPU and one host-device round trip (estimated)."""
Q8_BYTES_PER_PARAM = 8.5 / 8
"""A drafter head stored at Q8_0 (the GGUF conversions of MTP/EAGLE-3 heads are Q8_0 or larger)."""

BatchCost = Callable[[int], float]


def launch_units(model: CatalogModel) -> tuple[float, float]:
    """(dense, MoE) layer-launch equivalents of one decode step: layers + output + the
    recurrent layers' extra, and the MoE layers' extra."""
    dense = model.n_layer + 1.0 + EXTRA_LAUNCH_RECURRENT * model.recurrent_layers
    return dense, (EXTRA_LAUNCH_MOE * model.n_layer if model.is_moe else 0.0)


def bytes_per_token(model: CatalogModel, file_size: int) -> float:
    """Weight bytes one decoded token reads: the file scaled by active / total parameters."""
    return file_size * model.active / model.params


def distinct_experts(n_tokens: int, n_expert: int, n_used: int) -> float:
    """Expected experts per layer that `n_tokens` independently routed tokens touch together,
    with top-`n_used` routing over `n_expert` experts: E·(1 − (1 − k/E)^n)."""
    if n_expert <= 0 or n_tokens <= 0:
        return 0.0
    return n_expert * (1.0 - (1.0 - n_used / n_expert) ** n_tokens)


def routed_share(model: CatalogModel) -> float:
    """Share of one token's weight reads that goes to routed experts (0 for dense models)."""
    if not model.is_moe or not model.expert_params:
        return 0.0
    return min(1.0, model.expert_params * model.n_expert_used / model.n_expert / model.active)


def expert_factor(model: CatalogModel, n_tokens: int) -> float:
    """Experts a batch of `n_tokens` touches per layer, relative to one token's k (1 if dense)."""
    if not model.is_moe or model.n_expert_used <= 0:
        return 1.0
    return distinct_experts(n_tokens, model.n_expert, model.n_expert_used) / model.n_expert_used


def read_factor(model: CatalogModel, n_tokens: int) -> float:
    """Weight bytes a batch of `n_tokens` reads, relative to one token (1 for a dense model)."""
    f = routed_share(model)
    if f == 0.0:
        return 1.0
    return (1.0 - f) + f * expert_factor(model, n_tokens)


@dataclass(frozen=True)
class TokenTime:
    """One decode step of one token, split by what it waits on."""

    fixed_s: float
    """Kernel launches of the dense part (GPU): does not grow with the batch."""
    moe_s: float
    """Extra launches of the MoE layers (GPU): grow with the experts a batch touches."""
    gpu_mem_s: float
    """Reading the GPU-resident weights."""
    cpu_s: float
    """Reading (and computing) the RAM-resident layers on the CPU."""

    @property
    def total_s(self) -> float:
        """Seconds per token."""
        return self.fixed_s + self.moe_s + self.gpu_mem_s + self.cpu_s

    @property
    def cpu_share(self) -> float:
        """Share of the time spent on the CPU."""
        return self.cpu_s / self.total_s if self.total_s else 0.0


def token_time(model: CatalogModel, file_size: int, gpu_layers: int, gpu_bandwidth: float,
               cpu_bytes_per_s: float) -> TokenTime:
    """Time of one token with `gpu_layers` of the model's n_layer + 1 layers on the GPU."""
    layers = model.n_layer + 1  # embeddings + output count as one more layer
    gpu_share = min(1.0, gpu_layers / layers) if gpu_bandwidth > 0 else 0.0
    read = bytes_per_token(model, file_size)
    gpu_mem = read * gpu_share / (gpu_bandwidth * GPU_EFFICIENCY) if gpu_share else 0.0
    dense, moe = launch_units(model)
    fixed = GPU_LAYER_OVERHEAD_S * dense * gpu_share
    moe_s = GPU_LAYER_OVERHEAD_S * moe * gpu_share
    cpu = read * (1.0 - gpu_share) / cpu_bytes_per_s
    return TokenTime(fixed, moe_s, gpu_mem, cpu)


def verify_cost(model: CatalogModel, t: TokenTime, gpu_slope: float = GPU_BATCH_SLOPE,
                cpu_slope: float = CPU_BATCH_SLOPE) -> BatchCost:
    """b(γ): time to verify γ+1 tokens in one batch relative to one token (b(0) = 1).

    Dense launches cost the same for any batch; MoE launches grow with the experts touched;
    weight reads grow by the MoE read factor and by the kernels' per-token slope
    (GPU_BATCH_SLOPE, CPU_BATCH_SLOPE)."""

    def b(gamma: int) -> float:
        if gamma <= 0:
            return 1.0
        rf = read_factor(model, gamma + 1)
        grown = (t.fixed_s + t.moe_s * expert_factor(model, gamma + 1) + t.gpu_mem_s * rf * (1 + gpu_slope * gamma)
                 + t.cpu_s * rf * (1 + cpu_slope * gamma))
        return grown / t.total_s if t.total_s else 1.0

    return b


def head_draft_time(params: float, bytes_per_param: float, layers: int, gpu_bandwidth: float,
                    cpu_bytes_per_s: float) -> float:
    """Seconds of one forward of a drafter head (MTP layer, EAGLE-3 head, DFlash block) that
    reads `params` parameters through `layers` layers, on the GPU when there is one."""
    read = params * bytes_per_param
    if gpu_bandwidth > 0:
        return read / (gpu_bandwidth * GPU_EFFICIENCY) + GPU_LAYER_OVERHEAD_S * (layers + 1) + DRAFT_STEP_OVERHEAD_S
    return read / cpu_bytes_per_s
