"""Adaptive speculation: before each step, pick the drafter and γ that maximise expected
tokens per second, from what this engine has measured on this machine.

Expected tokens of a step drafting k tokens: 1 + Σ_{j=1..k} Π_{i<=j} r_i, where r_i is the
estimated conditional acceptance at position i (accepted at i / steps that reached i),
kept per drafter as decayed counts on a Beta prior. Expected time: the drafter's decode
cost (a linear model t(n) = a + s·(n-1) fitted to its own decode calls, including the
catch-up batch after steps that did not use it) + the target's verify cost for k+1 tokens
(the same kind of model fitted to verify calls) + the measured per-step overhead. Plain
decoding (k = 0) is always a candidate, so on hardware where drafting does not pay the
policy settles on it; after `probe_every` steps without the model drafter it drafts one
or two tokens to notice when the text has become predictable again, doubling the interval
after each probe that does not win the model drafter back. A probe also pays the
drafter's catch-up over the skipped tokens, so it is only made once its predicted extra
time is within PROBE_BUDGET of the time spent since the model drafter last ran: on a GPU
that is every few steps, on a CPU a short reply is never slowed down by exploring.

Cost models persist in the engine across requests (they describe the hardware);
acceptance estimates carry over with reduced weight so a new request adapts quickly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.engine.drafting import Drafter, ModelDrafter, NoDrafter
from localspec.engine.ngram import PromptLookupDrafter
from localspec.types import SamplingParams

DECAY = 0.97
"""Per-observation decay of acceptance counts (≈ the last 30 steps matter)."""
CARRY_OVER = 0.3
"""Weight kept from earlier requests' acceptance counts."""
PRIOR_WEIGHT = 2.0
MAX_PROBE_INTERVAL = 512
PROBE_BUDGET = 0.03
"""Share of generation time a re-probe of the model drafter may cost."""
PRIORS = {"model": 0.7, "ngram2": 0.35, "ngram3": 0.5, "ngram4": 0.65}
"""Prior per-position acceptance; n-gram drafts are tracked by matched suffix length."""


@dataclass
class LinearCost:
    """Decayed least squares fit of seconds = a + s·(n - 1) over (n tokens, seconds) points."""

    decay: float = 0.98
    sw: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    default_slope_ratio: float = 0.25
    """Slope as a share of `a` until two batch sizes have been seen (CPU-like, cautious)."""

    def observe(self, n: int, seconds: float) -> None:
        """Add one measured call."""
        d, x = self.decay, float(n - 1)
        self.sw = self.sw * d + 1.0
        self.sx = self.sx * d + x
        self.sy = self.sy * d + seconds
        self.sxx = self.sxx * d + x * x
        self.sxy = self.sxy * d + x * seconds

    @property
    def known(self) -> bool:
        """True once anything was measured."""
        return self.sw > 0

    def predict(self, n: int) -> float:
        """Seconds for a call of n tokens (0 before any measurement)."""
        if self.sw <= 0:
            return 0.0
        var = self.sxx / self.sw - (self.sx / self.sw) ** 2
        if var > 1e-6:
            slope = (self.sxy / self.sw - self.sx * self.sy / self.sw**2) / var
            a = self.sy / self.sw - slope * self.sx / self.sw
            slope = max(slope, 0.0)
            a = max(a, 1e-6)
        else:
            mean_x = self.sx / self.sw
            a = (self.sy / self.sw) / (1.0 + self.default_slope_ratio * mean_x)
            slope = self.default_slope_ratio * a
        return a + slope * (n - 1)


@dataclass
class Acceptance:
    """Decayed per-position counts: reached[i] steps tested position i, accepted[i] passed."""

    prior: float
    reached: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)

    def observe(self, k: int, num_accepted: int) -> None:
        """A step drafted k tokens and the first num_accepted passed."""
        for lst in (self.reached, self.accepted):
            lst[:] = [v * DECAY for v in lst]
            if len(lst) < k:
                lst.extend([0.0] * (k - len(lst)))
        for i in range(min(k, num_accepted + 1)):
            self.reached[i] += 1.0
        for i in range(num_accepted):
            self.accepted[i] += 1.0

    def rate(self, i: int) -> float:
        """Estimated conditional acceptance at position i (posterior mean).

        Position 0 shrinks toward the fixed prior; a later position shrinks toward the
        estimate of the position before it. A policy that mostly drafts one token observes
        only position 0, and a fixed prior behind it would keep every longer draft looking
        worse than the evidence says (conditional acceptance rarely drops after a hit).
        """
        rates = self._rates(i + 1)
        return rates[i]

    def _rates(self, n: int) -> list[float]:
        out: list[float] = []
        prior = self.prior
        for i in range(n):
            r = self.reached[i] if i < len(self.reached) else 0.0
            a = self.accepted[i] if i < len(self.accepted) else 0.0
            prior = (a + PRIOR_WEIGHT * prior) / (r + PRIOR_WEIGHT)
            out.append(prior)
        return out

    def expected_tokens(self, k: int) -> float:
        """1 + expected accepted drafts out of k."""
        total, run = 1.0, 1.0
        for r in self._rates(k):
            run *= r
            total += run
        return total

    def carried(self) -> Acceptance:
        """A copy with reduced weight, for the next request."""
        return Acceptance(self.prior, [v * CARRY_OVER for v in self.reached], [v * CARRY_OVER for v in self.accepted])


@dataclass
class PolicyState:
    """What the engine remembers between requests (one per sampling mode: greedy / sampled)."""

    verify: LinearCost = field(default_factory=LinearCost)
    draft: LinearCost = field(default_factory=LinearCost)
    ngram_cost: float = 0.0
    overhead: float = 0.0
    probe_interval: int = 0
    """Steps between re-probes of the model drafter (grows while probes keep losing)."""
    acceptance: dict[str, Acceptance] = field(
        default_factory=lambda: {name: Acceptance(p) for name, p in PRIORS.items()}
    )


class AdaptivePolicy:
    """Chooses (drafter, γ) per step to maximise expected tokens per second."""

    name = "adaptive"

    def __init__(
        self,
        model: ModelDrafter | None,
        ngram: PromptLookupDrafter,
        gamma: int,
        params: SamplingParams,
        state: PolicyState | None = None,
        probe_every: int = 24,
    ) -> None:
        self.model, self.ngram, self.max_gamma = model, ngram, gamma
        self.none = NoDrafter()
        self.drafters: list[Drafter] = [d for d in (model, ngram) if d is not None]
        self.state = state if state is not None else PolicyState()
        self.state.acceptance = {k: v.carried() for k, v in self.state.acceptance.items()}
        self.probe_every = probe_every
        self._interval = max(probe_every, self.state.probe_interval)
        self._since_model = 0
        self._time_since_model = 0.0
        self._probing = False
        self._context: Sequence[int] = ()

    def bind(self, context: Sequence[int]) -> None:
        """The committed context the policy may read (n-gram matches)."""
        self._context = context

    def _ngram_key(self, n: int) -> str:
        return f"ngram{min(max(n, 2), 4)}"

    def _step_time(self, drafter: str, k: int) -> float:
        s = self.state
        t = s.verify.predict(k + 1) + s.overhead
        if drafter == "model" and k > 0 and self.model is not None:
            lag = max(1, len(self._context) - self.model.backend.n_past)
            t += s.draft.predict(lag) + (k - 1) * s.draft.predict(1)
        elif drafter.startswith("ngram"):
            t += s.ngram_cost
        return t

    def _score(self, drafter: str, k: int) -> float:
        tokens = 1.0 if k == 0 else self.state.acceptance[drafter].expected_tokens(k)
        t = self._step_time(drafter, k)
        return tokens / t if t > 0 else 0.0

    def choose(self, k_cap: int) -> tuple[Drafter, int]:
        """The best (drafter, k) by expected tokens per second; k <= k_cap."""
        k_cap = min(k_cap, self.max_gamma)
        s = self.state
        if k_cap <= 0 or not s.verify.known:
            return self._pick("none", 0)
        model_ok = self.model is not None
        if model_ok and not s.draft.known:
            return self._pick("model", min(2, k_cap))  # measure the drafter once
        best, best_score = ("none", 0), self._score("none", 0)
        if model_ok:
            for k in range(1, k_cap + 1):
                sc = self._score("model", k)
                if sc > best_score:
                    best, best_score = ("model", k), sc
        cont, n = self.ngram.match(self._context, k_cap) if self._context else ((), 0)
        key = self._ngram_key(n)
        for k in range(1, len(cont) + 1):
            sc = self._score(key, k)
            if sc > best_score:
                best, best_score = ("ngram", k), sc
        if model_ok and best[0] != "model" and self._probe_due(min(2, k_cap)):
            # re-probe: the text may have become predictable again
            self._probing = True
            return self._pick("model", min(2, k_cap))
        if self._probing:
            self._probing = False
            won = best[0] == "model"
            self._interval = self.probe_every if won else min(self._interval * 2, MAX_PROBE_INTERVAL)
            self.state.probe_interval = self._interval
        return self._pick(*best)

    def _probe_due(self, k: int) -> bool:
        """Enough steps and enough time since the model drafter last ran to afford a probe."""
        if self._since_model < self._interval:
            return False
        extra = self._step_time("model", k) - self._step_time("none", 0)
        return extra <= PROBE_BUDGET * self._time_since_model

    def _pick(self, name: str, k: int) -> tuple[Drafter, int]:
        if name == "model" and self.model is not None:
            return self.model, k
        if name == "ngram":
            return self.ngram, k
        return self.none, 0

    def observe(self, drafter: str, k: int, num_accepted: int, t_draft_s: float, t_verify_s: float) -> None:
        """Update costs and acceptance from the finished step."""
        s = self.state
        s.verify.observe(k + 1, t_verify_s)
        if drafter == "model" and self.model is not None:
            for n, sec in self.model.decode_log:
                s.draft.observe(n, sec)
            self._since_model = 0
            self._time_since_model = 0.0
        else:
            self._since_model += 1
            self._time_since_model += t_draft_s + t_verify_s + s.overhead
        if drafter == "ngram":
            s.ngram_cost = 0.8 * s.ngram_cost + 0.2 * t_draft_s if s.ngram_cost else t_draft_s
        key = self._ngram_key(self.ngram.last_match) if drafter == "ngram" else drafter
        if k > 0 and key in s.acceptance:
            s.acceptance[key].observe(k, num_accepted)

    def observe_overhead(self, seconds: float) -> None:
        """Per-step time outside draft and verify (acceptance, detokenizing, bookkeeping)."""
        s = self.state
        s.overhead = 0.9 * s.overhead + 0.1 * seconds if s.overhead else seconds
