"""Settings of the TUI: how it starts (`TuiSettings`) and how the chat generates (`ChatSettings`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from localspec.types import DRAFTER_KINDS, NUMERICS_MODES


@dataclass(frozen=True)
class ChatSettings:
    """Sampling and drafting settings of the chat screen (edited in the settings dialog)."""

    system_prompt: str = ""
    """Sent as the first message when not empty."""
    temperature: float = 0.0
    """0 = greedy (output identical to the target alone)."""
    top_p: float = 1.0
    seed: int | None = None
    """None = fresh randomness per reply."""
    gamma: int | None = None
    """Draft length γ; None = the engine's default (the maximum for `adaptive`)."""
    drafter: str = "adaptive"
    """One of localspec.types.DRAFTER_KINDS."""
    max_tokens: int = 512
    show_accepted: bool = True
    """Colour the tokens that came from accepted drafts in the transcript."""
    json_schema: str | None = None
    """Every reply must match this JSON schema (its JSON text; `tui --json-schema FILE`)."""

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTER_KINDS:
            raise ValueError(f"drafter must be one of {', '.join(DRAFTER_KINDS)}, not {self.drafter!r}")


@dataclass(frozen=True)
class TuiSettings:
    """How the app starts: which pair to load (llama.cpp flag names in comments)."""

    target: str | None = None
    """Target GGUF path (`-m`); None = the offline default pair when installed."""
    draft: str | None = None
    """Drafter GGUF path (`-md`); None with `target` set = plain decoding / n-gram drafting only."""
    n_gpu_layers: int = 0
    """Target layers on the GPU (`-ngl`); -1 = all."""
    n_gpu_layers_draft: int = 0
    """Drafter layers on the GPU (`-ngld`)."""
    n_ctx: int = 4096
    """Context window (`-c`)."""
    n_threads: int | None = None
    """CPU threads (`-t`); None = physical cores."""
    flash_attn: bool | None = None
    """Flash attention (`-fa`); None = llama.cpp decides."""
    numerics: str = "exact"
    """How the models compute (`--numerics`), one of NUMERICS_MODES; the settings dialog changes it."""
    kernel: str | None = None
    """Acceptance backend; None = LOCALSPEC_KERNEL or auto."""
    rpc: tuple[str, ...] = ()
    """RPC workers for the target's offloaded layers (`--rpc`)."""
    auto_load: bool = True
    """Load `target`/`draft` (or the default pair) at start when no engine is given."""
    added_paths: tuple[str, ...] = ()
    """Extra GGUF files to list on the models screen."""
    hub_endpoint: str | None = None
    """Hugging Face Hub URL for downloads (None = HF_ENDPOINT or huggingface.co)."""
    hf_cache_dir: str | None = None
    """HF cache to download into and list (None = the standard HF_HUB_CACHE)."""
    memory_budget_bytes: int | None = None
    """Memory a model may use when judging what fits (None = measure VRAM/RAM now)."""
    stats_interval_s: float = 0.5
    """How often the stats panel polls the running generation's stats."""
    snapshot: bool = False
    """Hide volatile numbers (timings, tok/s, memory) so screenshots are deterministic."""
    chat: ChatSettings = field(default_factory=ChatSettings)

    def __post_init__(self) -> None:
        if self.numerics not in NUMERICS_MODES:
            raise ValueError(f"numerics must be one of {', '.join(NUMERICS_MODES)}, not {self.numerics!r}")
