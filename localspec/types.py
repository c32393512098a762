"""Plain data passed between layers: frozen dataclasses, stdlib only.

The engine takes and returns only these, so it never depends on pydantic, Textual or
FastAPI; front ends convert their own request models into them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

DRAFTER_KINDS = ("model", "ngram", "mtp", "eagle3", "dflash", "dspark", "none", "adaptive")
"""Drafting policies: the model drafter, prompt lookup, the target's own MTP layers, the heads
that read the target's hidden states (EAGLE-3, DFlash, DSpark), plain decoding, or chosen per step."""

DEFAULT_GAMMA = 4
"""Draft length γ when neither the engine nor the request sets one (`--spec-draft-n-max`)."""

MAX_GAMMA = 32
"""Longest draft (γ) a request may ask for and any drafter proposes (vLLM's MAX_SPEC_LEN);
also the upper end of the speed model's search for the best γ (theory.best_gamma)."""

MAX_STOP_STRINGS = 16
"""Most stop strings one request may give (OpenAI allows 4; llama.cpp any number)."""

NUMERICS_MODES = ("exact", "fast")
"""How the target computes: `exact` = batch-invariant kernels (a row's logits do not depend on
how many rows share its batch, so greedy speculative output is bit-identical to plain
decoding); `fast` = llama.cpp's fastest kernels (outputs may part from plain decoding where
the target's own batched and one-row evaluations disagree)."""


class TokenSource(enum.Enum):
    """Where an emitted token came from (vocabulary of arXiv 2211.17192 / vLLM)."""

    PLAIN = "plain"
    """Sampled from the target in a step that drafted nothing (γ = 0)."""
    ACCEPTED = "accepted"
    """A draft token the target accepted."""
    RECOVERED = "recovered"
    """Resampled from norm(max(0, p - q)) at the first rejected draft (greedy: the target's argmax)."""
    BONUS = "bonus"
    """Sampled from the target's last row after every draft token was accepted."""


@dataclass(frozen=True)
class ModelSpec:
    """How to load one GGUF model (llama.cpp flag names in comments)."""

    path: str
    """Local path of the .gguf file."""
    n_gpu_layers: int = 0
    """Layers offloaded to the GPU (`-ngl`); -1 = all."""
    n_ctx: int = 4096
    """Context window in tokens (`-c`)."""
    n_batch: int = 512
    """Maximum tokens per `llama_decode` (`-b`)."""
    n_threads: int | None = None
    """CPU threads (`-t`); None = physical cores."""
    flash_attn: bool | None = None
    """Flash attention (`-fa`); None = llama.cpp's automatic choice."""
    numerics: str = "exact"
    """One of NUMERICS_MODES (`--numerics`)."""
    rpc: tuple[str, ...] = ()
    """RPC workers ("host:port") that take the offloaded layers instead of a local GPU (`--rpc`)."""
    name: str | None = None
    """Display name; defaults to the file name."""

    @property
    def display_name(self) -> str:
        """The name shown to people: `name`, else the file name."""
        if self.name:
            return self.name
        return self.path.replace("\\", "/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class ToolCall:
    """A function call an assistant turn made (OpenAI's `tool_calls[i]`)."""

    id: str
    name: str
    arguments: str
    """The arguments as JSON text."""


@dataclass(frozen=True)
class ChatMessage:
    """One chat turn."""

    role: str
    """system, user, assistant (or tool)."""
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    """For assistant turns: the calls it made."""
    tool_call_id: str | None = None
    """For tool turns: the call this is the result of."""
    name: str | None = None
    """For tool turns: the function's name."""


@dataclass(frozen=True)
class Constraint:
    """What the output must match, enforced by token masks (engine/constraint.py)."""

    kind: str
    """`json_object` (any JSON object), `json_schema` (`source` is the schema as JSON text) or
    `lark` (`source` is a Lark grammar, llguidance's dialect)."""
    source: str | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """One generation. Exactly one of `prompt` (raw text) or `messages` (chat) is set."""

    prompt: str | None = None
    messages: tuple[ChatMessage, ...] | None = None
    max_tokens: int = 256
    temperature: float = 0.0
    """0 = greedy (bitwise-equal to the target alone)."""
    top_p: float = 1.0
    top_k: int = 0
    """0 = no top-k."""
    seed: int | None = None
    """Same seed, same prompt, same settings -> same text. None = fresh randomness."""
    stop: tuple[str, ...] = ()
    drafter: str = "adaptive"
    """One of DRAFTER_KINDS."""
    gamma: int | None = None
    """Draft length γ (`--spec-draft-n-max`); None = the engine default. For `adaptive` it is the maximum."""
    p_min: float = 0.0
    """Model drafter stops drafting when its own probability of a token is below this (`--spec-draft-p-min`)."""
    add_generation_prompt: bool = True
    """For `messages`: end the rendered chat with the assistant header."""
    constraint: Constraint | None = None
    """Output grammar (JSON object / JSON schema / Lark); None = free text."""
    tools: str | None = None
    """For `messages`: the tools offered, as the JSON text of OpenAI's `tools` list (rendered
    by the chat template's `tools` variable)."""


@dataclass(frozen=True)
class TokenEvent:
    """One emitted token, or the final event of a generation.

    `text` is the new text this token completes (may be empty while a UTF-8 character or a
    possible stop string is incomplete). The last event of every generation has
    `finish_reason` set; it may carry no token (`token_id == -1`) when the generation ended
    on a stop string, EOG, cancel or the context limit.
    """

    token_id: int
    text: str
    source: TokenSource
    step: int
    """Index of the target forward (speculative step) that produced the token."""
    finish_reason: str | None = None
    """None while generating; then 'stop', 'length' or 'cancelled'."""


@dataclass(frozen=True)
class SamplingParams:
    """How target and draft logits become probabilities, applied identically to p and q.

    Order: temperature, then top-k, then top-p (nucleus), then renormalise.
    `temperature <= 0` means greedy (argmax, lowest index on ties).
    """

    temperature: float = 0.0
    top_k: int = 0
    """Keep tokens whose logit is >= the k-th largest; 0 (or >= vocab) = off."""
    top_p: float = 1.0
    """Keep tokens whose probability is >= that of the last token of the shortest
    descending-sorted prefix with mass >= top_p (ties at the boundary are kept); 1 = off."""

    @property
    def greedy(self) -> bool:
        """True when decoding is argmax (temperature <= 0)."""
        return self.temperature <= 0.0


@dataclass(frozen=True)
class AcceptResult:
    """Outcome of the acceptance rule for one step.

    `tokens` = the accepted draft tokens followed by exactly one recovered, bonus or plain
    token, so `len(tokens) == num_accepted + 1 >= 1`.
    """

    tokens: tuple[int, ...]
    num_accepted: int
    last_source: TokenSource


@dataclass(frozen=True)
class VocabInfo:
    """What a GGUF header says about its tokenizer (read without loading weights)."""

    path: str
    name: str
    tokenizer_model: str
    """`tokenizer.ggml.model`, e.g. gpt2, llama."""
    tokenizer_pre: str | None
    n_vocab: int
    bos_token_id: int | None
    eos_token_id: int | None
    eog_token_ids: frozenset[int] = field(default_factory=frozenset)
    fingerprint: str = ""
    """sha256 over the token texts (see gguf_info.vocab_fingerprint)."""
    architecture: str | None = None
    chat_template: str | None = None
