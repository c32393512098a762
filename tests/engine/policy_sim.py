"""A simulated machine and text for the adaptive policy: the real `AdaptivePolicy` chooses,
this module plays the outcome on a virtual clock, with no weights and no sleeping.

The world is the speed model's: the target's verify of k+1 rows costs t1·b(k); the drafter
model decodes n tokens in c·t1·b(n−1) (the same batch shape); prompt lookup costs nothing
but finds a match only on a share of the steps. Every draft token is accepted with
probability α (i.i.d.; the model drafter and prompt lookup have their own α). The text is a
token stream: prompt lookup's guesses are the next tokens of it with probability α each (so
the policy can check its guesses on steps that did not draft, as it does on real text). The policy
sees measured seconds with multiplicative noise, exactly through the calls the step loop
makes (`choose`, `observe`, `observe_overhead`, and the model drafter's `decode_log`).

A run is judged by the *expected* tokens of each choice (not the sampled ones), so the
result measures the choices, not the luck of the draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from localspec.engine.adaptive import AdaptivePolicy, PolicyState
from localspec.engine.drafters import ModelDrafter
from localspec.engine.fake import FakeBackend
from localspec.engine.drafters.ngram import PromptLookupDrafter
from localspec.theory import expected_tokens_per_step
from localspec.types import SamplingParams

BatchCost = Callable[[int], float]


@dataclass(frozen=True)
class World:
    """A machine (t1, b, c, overhead) and a text (acceptance of each drafter, match rate)."""

    b: BatchCost
    """b(k): verify of k+1 rows relative to one row, b(0) = 1."""
    c: float
    """Drafter model cost per token relative to the target."""
    alpha_model: float
    alpha_ngram: float
    match_rate: float
    """Share of the text in which prompt lookup finds matches (in runs, as when the reply
    copies a stretch of the prompt)."""
    match_run: int = 24
    """Mean length in tokens of a run with (or without) matches."""
    match_len: int = 3
    """Matched suffix length of every match."""
    t1: float = 0.05
    overhead: float = 0.0005
    noise: float = 0.05
    """Sigma of the log-normal noise on every measured time."""
    has_model: bool = True

    def verify_s(self, k: int) -> float:
        """Seconds of a verify of k+1 rows."""
        return self.t1 * self.b(k)

    def draft_batch_s(self, n: int) -> float:
        """Seconds for the drafter model to decode n tokens in one call: the verify shape up
        to 9 tokens, then its last step per token (prefill-like)."""
        if n <= 9:
            return self.c * self.t1 * self.b(n - 1)
        return self.c * self.t1 * (self.b(8) + (self.b(8) - self.b(7)) * (n - 9))

    def draft_s(self, lag: int, k: int) -> float:
        """Seconds for the model drafter to catch up `lag` tokens and draft k."""
        return self.draft_batch_s(lag) + self.c * self.t1 * (k - 1)

    def fixed_speedup(self, drafter: str, gamma: int) -> float:
        """Expected speedup over plain of a fixed arm in the steady state."""
        if drafter == "none" or gamma == 0:
            return 1.0
        t_plain = self.t1 + self.overhead
        if drafter == "ngram":
            # per token: a share match_rate of the text at E/(verify + overhead), the rest plain
            e = expected_tokens_per_step(self.alpha_ngram, gamma)
            p = self.match_rate
            tokens = 1.0
            seconds = p * (self.verify_s(gamma) + self.overhead) / e + (1 - p) * t_plain
        else:
            e = expected_tokens_per_step(self.alpha_model, gamma)
            p_all = self.alpha_model**gamma  # all accepted: the drafter lags 2 tokens next step
            catch_up = p_all * self.draft_batch_s(2) + (1 - p_all) * self.draft_batch_s(1)
            tokens = e
            seconds = catch_up + self.c * self.t1 * (gamma - 1) + self.verify_s(gamma) + self.overhead
        return (tokens / seconds) * t_plain

    def best_fixed(self, max_gamma: int) -> tuple[str, int, float]:
        """The best fixed arm (plain included) and its expected speedup."""
        best = ("none", 0, 1.0)
        for d in ("model", "ngram") if self.has_model else ("ngram",):
            for g in range(1, max_gamma + 1):
                s = self.fixed_speedup(d, g)
                if s > best[2]:
                    best = (d, g, s)
        return best


class ScriptedLookup(PromptLookupDrafter):
    """Prompt lookup whose matches the world decides (the policy only calls `match`)."""

    def __init__(self) -> None:
        super().__init__()
        self.current: tuple[int, ...] = ()
        self.current_len = 0

    def match(self, context: Sequence[int], k: int) -> tuple[tuple[int, ...], int]:
        """The world's match for this step."""
        if not self.current:
            return (), 0
        return self.current[:k], self.current_len


@dataclass
class SimResult:
    """What a run did and what it was expected to gain."""

    speedup: float
    """Σ expected tokens / Σ seconds of the policy's choices, relative to plain decoding."""
    choices: dict[str, int]
    """Steps per "drafter@k"."""
    steps: int
    text: World
    """The world with `match_rate` set to the share of tokens that really had matches (to
    judge fixed arms on the same text)."""


def simulate(
    world: World,
    *,
    tokens: int = 128,
    requests: int = 3,
    max_gamma: int = 8,
    seed: int = 0,
    greedy: bool = True,
    state: PolicyState | None = None,
    spike: tuple[range, float] | None = None,
    last: int | None = None,
) -> SimResult:
    """Run `requests` generations of `tokens` tokens through one PolicyState (as an engine
    does) and return the expected speedup of the policy's choices over plain decoding.

    `spike` = (requests, factor): during those requests another process loads the machine
    and every step that drafted is measured `factor` times slower than it is (the worst
    case: batches measured under load, single rows not). `last`: judge only the last
    `last` requests (recovery after a spike)."""
    rng = np.random.default_rng(seed)
    rng_text = np.random.default_rng([seed, 1])
    matched_tokens = 0
    state = state if state is not None else PolicyState()
    params = SamplingParams() if greedy else SamplingParams(temperature=0.8)
    exp_tokens = 0.0
    seconds = 0.0
    choices: dict[str, int] = {}
    steps = 0
    for request in range(requests):
        if last is not None and request == requests - last:
            exp_tokens, seconds, choices, steps = 0.0, 0.0, {}, 0
        load = spike[1] if spike is not None and request in spike[0] else 1.0
        backend = FakeBackend()
        model = ModelDrafter(backend) if world.has_model else None
        lookup = ScriptedLookup()
        policy = AdaptivePolicy([d for d in (model, lookup) if d is not None], max_gamma, params, state)
        context = [0] * 64  # the prompt
        backend.tokens = [0] * 63  # the drafter has read it but its last token
        if model is not None:
            model.decode_log = [(63, _noisy(world.draft_batch_s(63), world, rng))]
        policy.bind(context)
        generated = 0
        runs = _match_runs(world, tokens + max_gamma + 1, rng_text)
        matched_tokens += sum(runs[:tokens])
        text = [int(t) for t in rng_text.integers(1, 1 << 30, tokens + max_gamma + 1)]
        """The tokens the target emits (what any lossless step commits)."""
        while generated < tokens:
            matched = runs[generated]
            lookup.current = _guesses(text[generated : generated + max_gamma], world.alpha_ngram, rng) if matched else ()
            lookup.current_len = world.match_len if matched else 0
            k_cap = min(max_gamma, tokens - generated - 1)
            drafter, k = policy.choose(k_cap)
            name = drafter.name if k > 0 else "none"
            if name == "ngram" and not matched:
                raise AssertionError("the policy drafted with prompt lookup without a match")
            num_accepted = 0
            if name == "ngram":  # the guesses the target's tokens confirm
                while num_accepted < k and lookup.current[num_accepted] == text[generated + num_accepted]:
                    num_accepted += 1
            else:
                while num_accepted < k and rng.random() < world.alpha_model:
                    num_accepted += 1
            t_draft = 0.0
            if name == "model":
                assert model is not None
                lag = len(context) - backend.n_past
                t_catch = world.draft_batch_s(lag)
                model.decode_log = [(lag, _noisy(t_catch, world, rng))] + [
                    (1, _noisy(world.c * world.t1, world, rng)) for _ in range(k - 1)
                ]
                t_draft_true = world.draft_s(lag, k)
                t_draft = sum(t for _, t in model.decode_log)
                # the drafter read the context and its own drafts but the last; rejected ones are dropped
                backend.tokens = [0] * (len(context) + min(num_accepted, k - 1))
            elif name == "ngram":
                lookup.last_match = lookup.current_len
                t_draft_true = 0.0
                t_draft = _noisy(2e-5, world, rng)
            else:
                t_draft_true = 0.0
            t_verify_true = world.verify_s(k)
            measured = _noisy(t_verify_true, world, rng) * (load if k > 0 else 1.0)
            policy.observe(name, k, num_accepted, t_draft, measured)
            policy.observe_overhead(_noisy(world.overhead, world, rng))
            context.extend(text[generated : generated + num_accepted + 1])
            generated += num_accepted + 1
            steps += 1
            key = f"{name}@{k}"
            choices[key] = choices.get(key, 0) + 1
            a = world.alpha_model if name == "model" else world.alpha_ngram
            exp_tokens += 1.0 if k == 0 else expected_tokens_per_step(a, k)
            seconds += t_draft_true + t_verify_true + world.overhead
    plain_rate = 1.0 / (world.t1 + world.overhead)
    share = matched_tokens / (tokens * requests)
    return SimResult((exp_tokens / seconds) / plain_rate, choices, steps, replace(world, match_rate=share))


def _match_runs(world: World, n: int, rng: np.random.Generator) -> list[bool]:
    """Per token position: does prompt lookup find a match there? Runs of mean length
    `match_run`, a share `match_rate` of them with matches."""
    out: list[bool] = []
    matched = bool(rng.random() < world.match_rate)
    for _ in range(n):
        if rng.random() < 1.0 / world.match_run:
            matched = bool(rng.random() < world.match_rate)
        out.append(matched)
    return out


def _guesses(truth: list[int], alpha: float, rng: np.random.Generator) -> tuple[int, ...]:
    """Prompt lookup's draft where it matches: each guess is the target's next token with
    probability α while the guesses before it were right; after the first wrong one, any."""
    out: list[int] = []
    right = True
    for t in truth:
        right = right and bool(rng.random() < alpha)
        out.append(t if right else -1 - len(out))
    return tuple(out)


def _noisy(seconds: float, world: World, rng: np.random.Generator) -> float:
    return seconds * math.exp(world.noise * float(rng.standard_normal()))


def linear_b(slope: float) -> BatchCost:
    """b(k) = 1 + slope·k."""
    return lambda k: 1.0 + slope * k


def concave_b(b1: float, slope: float) -> BatchCost:
    """A CPU-like shape: a jump from one row to two (b(1) = b1), then `slope` per row."""
    return lambda k: 1.0 if k <= 0 else b1 + slope * (k - 1)
