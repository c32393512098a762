"""`SpecStats`: counters and timings of speculative decoding, plus the rates derived from them.

Data only: front ends format it, none computes rates of its own. Names follow vLLM's
SpecDecodingStats and llama.cpp's counters; AL (acceptance length) = tokens emitted per
target forward = 1 + accepted / steps (plain decoding: 1.0).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field


@dataclass
class SpecStats:
    """Counters of one generation (or a running total over many, see `merge`)."""

    num_steps: int = 0
    """Target forward passes (speculative steps), drafting or not."""
    num_drafts: int = 0
    """Steps that drafted at least one token."""
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_output_tokens: int = 0
    """Tokens the acceptance rule produced (= accepted + steps)."""
    num_generated_tokens: int = 0
    """Tokens delivered to the caller (output cut at EOG / stop strings / max_tokens)."""
    num_prompt_tokens: int = 0
    num_cached_prompt_tokens: int = 0
    """Prompt tokens whose KV was reused from the previous request."""
    num_requests: int = 0
    drafted_per_position: list[int] = field(default_factory=list)
    """[i] = steps that drafted more than i tokens."""
    accepted_per_position: list[int] = field(default_factory=list)
    """[i] = steps whose draft at position i was accepted."""
    gamma_counts: dict[int, int] = field(default_factory=dict)
    """How often each draft length was used."""
    drafter_counts: dict[str, int] = field(default_factory=dict)
    """Steps per drafter actually used (model / ngram / eagle3 / dflash / dspark / none)."""
    t_prefill_s: float = 0.0
    t_draft_s: float = 0.0
    t_verify_s: float = 0.0
    t_accept_s: float = 0.0
    t_generate_s: float = 0.0
    """Wall time of the generation loop (after prefill)."""
    t_decode_target_s: float = 0.0
    """Seconds inside llama_decode on the target during the loop."""
    t_decode_draft_s: float = 0.0
    """Seconds inside llama_decode on the drafter during the loop."""
    t_mask_s: float = 0.0
    """Seconds computing grammar masks (constrained requests; engine/constraint.py)."""
    num_masks: int = 0
    """Grammar masks computed (one per verify row and per guided draft position)."""
    kernel: str = ""
    numerics: str = ""
    """Numerics mode the target ran in (exact / fast, see types.NUMERICS_MODES)."""
    drafter: str = ""
    gamma: int = 0
    """Draft length used by the last step."""
    batch_sequences: int = 0
    """Sum over steps of the sequences verified in the step's target call (1 per step when
    generations run one at a time; more under `--parallel`)."""
    finish_reason: str | None = None

    def observe_step(
        self,
        num_draft_tokens: int,
        num_accepted_tokens: int,
        t_draft_s: float,
        t_verify_s: float,
        t_accept_s: float,
        drafter: str,
        batch: int = 1,
    ) -> None:
        """Record one speculative step (`batch`: sequences verified in the same target call)."""
        self.num_steps += 1
        self.batch_sequences += batch
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        self.num_output_tokens += num_accepted_tokens + 1
        self.gamma = num_draft_tokens
        self.gamma_counts[num_draft_tokens] = self.gamma_counts.get(num_draft_tokens, 0) + 1
        self.drafter_counts[drafter] = self.drafter_counts.get(drafter, 0) + 1
        if num_draft_tokens:
            self.num_drafts += 1
            _grow(self.drafted_per_position, num_draft_tokens)
            _grow(self.accepted_per_position, num_draft_tokens)
            for i in range(num_draft_tokens):
                self.drafted_per_position[i] += 1
            for i in range(num_accepted_tokens):
                self.accepted_per_position[i] += 1
        self.t_draft_s += t_draft_s
        self.t_verify_s += t_verify_s
        self.t_accept_s += t_accept_s

    # -- derived --------------------------------------------------------------------
    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted (0 when nothing was drafted)."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """AL = tokens per target forward = 1 + accepted / steps (1.0 for plain decoding)."""
        return 1.0 + self.num_accepted_tokens / self.num_steps if self.num_steps else 0.0

    @property
    def mean_batch_size(self) -> float:
        """Sequences per target call over this generation's steps (1.0 one at a time)."""
        return self.batch_sequences / self.num_steps if self.num_steps else 0.0

    @property
    def mean_gamma(self) -> float:
        """Draft tokens per step (0 for plain decoding)."""
        return self.num_draft_tokens / self.num_steps if self.num_steps else 0.0

    @property
    def per_position_acceptance(self) -> list[float]:
        """[i] = accepted at position i / steps that drafted more than i tokens."""
        return [a / d if d else 0.0 for a, d in zip(self.accepted_per_position, self.drafted_per_position)]

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of the generation loop (prefill excluded)."""
        return self.num_generated_tokens / self.t_generate_s if self.t_generate_s > 0 else 0.0

    @property
    def t_other_s(self) -> float:
        """Loop time outside draft, verify and accept (detokenizing, stops, bookkeeping)."""
        return max(0.0, self.t_generate_s - self.t_draft_s - self.t_verify_s - self.t_accept_s)

    @property
    def overhead_share(self) -> float:
        """Share of loop time spent outside llama_decode (Python + acceptance)."""
        if self.t_generate_s <= 0:
            return 0.0
        inside = self.t_decode_target_s + self.t_decode_draft_s
        return max(0.0, 1.0 - inside / self.t_generate_s)

    def snapshot(self) -> SpecStats:
        """A deep copy, safe to read while the engine keeps counting."""
        return copy.deepcopy(self)

    def merge(self, other: SpecStats) -> None:
        """Add another generation's counters (for running totals)."""
        for name in (
            "num_steps", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_output_tokens",
            "num_generated_tokens", "num_prompt_tokens", "num_cached_prompt_tokens", "num_requests",
            "t_prefill_s", "t_draft_s", "t_verify_s", "t_accept_s", "t_generate_s",
            "t_decode_target_s", "t_decode_draft_s", "t_mask_s", "num_masks", "batch_sequences",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for dst, src in ((self.drafted_per_position, other.drafted_per_position),
                         (self.accepted_per_position, other.accepted_per_position)):
            _grow(dst, len(src))
            for i, v in enumerate(src):
                dst[i] += v
        for k, v in other.gamma_counts.items():
            self.gamma_counts[k] = self.gamma_counts.get(k, 0) + v
        for name, v in other.drafter_counts.items():
            self.drafter_counts[name] = self.drafter_counts.get(name, 0) + v
        self.kernel = other.kernel or self.kernel
        self.numerics = other.numerics or self.numerics
        self.drafter = other.drafter or self.drafter
        self.gamma = other.gamma
        self.finish_reason = other.finish_reason

    def to_dict(self) -> dict[str, object]:
        """Every counter and derived rate, JSON-ready."""
        out: dict[str, object] = {k: copy.deepcopy(v) for k, v in vars(self).items()}
        out["gamma_counts"] = {str(k): v for k, v in self.gamma_counts.items()}
        out.update(
            acceptance_rate=self.acceptance_rate,
            mean_acceptance_length=self.mean_acceptance_length,
            per_position_acceptance=self.per_position_acceptance,
            tokens_per_s=self.tokens_per_s,
            t_other_s=self.t_other_s,
            overhead_share=self.overhead_share,
        )
        return out


def _grow(values: list[int], n: int) -> None:
    if len(values) < n:
        values.extend([0] * (n - len(values)))
