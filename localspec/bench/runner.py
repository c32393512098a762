"""Run the benchmark: every arm on every prompt, interleaved, one process.

For each prompt, every (temperature, arm) pair runs back to back, in an order rotated by
one per prompt, so slow phases of the machine (other processes, thermal) hit all arms
alike. `repeat` > 1 runs the whole prompt list again, each later round in the reverse
order of the one before (a prompt's first arm of round 0 is its last of round 1), so the
host's timing noise per cell shrinks and an arm's place in the sequence cancels out. Multi-turn prompts feed each arm's own answer back as the assistant turn. Every
generation is one `Sample` holding the engine's raw `SpecStats.to_dict()`.

Ctrl-C stops at once: the generation in flight is dropped, everything finished is kept,
and `BenchRun.interrupted` is set so the caller can still write its report.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from localspec.engine import ChatMessage, Engine, GenerationRequest
from localspec.prompts import BenchPrompt

log = logging.getLogger(__name__)

SWEEP_GAMMAS = (1, 2, 3, 4, 6, 8)
"""`--sweep`: the draft lengths of the full sweep."""

WARMUP_PROMPT = "Count from one to ten in words:"

ProgressFn = Callable[[int, str], None]
"""progress(units_done_now, description); one unit = one planned output token."""


@dataclass(frozen=True)
class Arm:
    """One way of decoding: a drafter kind and a draft length (plain decoding: none, 0)."""

    drafter: str
    """"none", "model", "ngram", "mtp" or "adaptive"."""
    gamma: int
    """Draft length; for adaptive the maximum it may use."""

    @property
    def key(self) -> str:
        """Stable name used in the JSON and tables: "plain", "model@4", "adaptive@8"."""
        return "plain" if self.drafter == "none" else f"{self.drafter}@{self.gamma}"


def make_arms(drafters: Sequence[str], gammas: Sequence[int]) -> list[Arm]:
    """Plain decoding first, then each drafter at each γ (adaptive once, at the largest γ)."""
    arms = [Arm("none", 0)]
    for d in drafters:
        if d == "adaptive":
            arms.append(Arm("adaptive", max(gammas)))
        elif d != "none":
            arms.extend(Arm(d, g) for g in gammas)
    return list(dict.fromkeys(arms))


@dataclass(frozen=True)
class BenchConfig:
    """What to measure. Defaults are a quick run; `--sweep` gives SWEEP_GAMMAS."""

    gammas: tuple[int, ...] = (1, 2, 4, 8)
    temperatures: tuple[float, ...] = (0.0,)
    drafters: tuple[str, ...] = ("model",)
    max_tokens: int = 128
    """Per turn."""
    prompts_per_category: int | None = 2
    categories: tuple[str, ...] | None = None
    seed: int = 0
    top_p: float = 1.0
    top_k: int = 0
    warmup_tokens: int = 8
    """Tokens generated per drafter kind before measuring (not recorded); 0 = no warm-up."""
    repeat: int = 1
    """Rounds over the whole prompt list (same seeds each round; the summary pools them)."""
    lockstep: bool = False
    """Arms of a prompt run at once, an engine each (bench/lockstep.py), not one after another."""

    @property
    def arms(self) -> list[Arm]:
        """The arms this config runs."""
        return make_arms(self.drafters, self.gammas)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "gammas": list(self.gammas), "temperatures": list(self.temperatures),
            "drafters": list(self.drafters), "max_tokens": self.max_tokens,
            "prompts_per_category": self.prompts_per_category,
            "categories": list(self.categories) if self.categories else None,
            "seed": self.seed, "top_p": self.top_p, "top_k": self.top_k,
            "warmup_tokens": self.warmup_tokens, "repeat": self.repeat,
            "lockstep": self.lockstep, "arms": [a.key for a in self.arms],
        }


@dataclass(frozen=True)
class Sample:
    """One generation: one turn of one prompt, on one arm, at one temperature."""

    temperature: float
    category: str
    question_id: str
    arm: str
    drafter: str
    gamma: int
    turn: int
    seed: int
    position: int
    """Where this (temperature, arm) ran among the prompt's arms (0 = first)."""
    stats: dict[str, Any]
    """`SpecStats.to_dict()` of the generation: every raw count and timing."""
    text_chars: int
    t_wall_s: float
    """Wall time of the whole request (prefill included)."""
    round: int = 0
    """Which pass over the prompt list (`BenchConfig.repeat`) this generation belongs to."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "temperature": self.temperature, "category": self.category, "question_id": self.question_id,
            "arm": self.arm, "drafter": self.drafter, "gamma": self.gamma, "turn": self.turn,
            "seed": self.seed, "position": self.position, "text_chars": self.text_chars,
            "t_wall_s": self.t_wall_s, "round": self.round, "stats": self.stats,
        }


@dataclass
class BenchRun:
    """Everything measured (so far)."""

    config: BenchConfig
    prompts: list[BenchPrompt]
    samples: list[Sample] = field(default_factory=list)
    interrupted: bool = False
    t_wall_s: float = 0.0

    def complete_samples(self) -> list[Sample]:
        """Samples of (round, temperature, prompt) groups where every arm finished every
        turn: the only ones the summary uses, so an interrupted run compares arms fairly."""
        turns = {p.question_id: len(p.turns) for p in self.prompts}
        need = len(self.config.arms)
        count: dict[tuple[int, float, str], int] = {}
        for s in self.samples:
            k = (s.round, s.temperature, s.question_id)
            count[k] = count.get(k, 0) + 1
        done = {k for k, n in count.items() if n == need * turns[k[2]]}
        return [s for s in self.samples if (s.round, s.temperature, s.question_id) in done]


def planned_units(prompts: Sequence[BenchPrompt], config: BenchConfig) -> int:
    """Progress units (planned output tokens) of a whole run."""
    per_turn = len(config.arms) * len(config.temperatures) * config.max_tokens
    return sum(len(p.turns) for p in prompts) * per_turn * config.repeat


def round_robin(prompts: Sequence[BenchPrompt]) -> list[BenchPrompt]:
    """First prompt of every category, then the second of every category, ...: an
    interrupted run still covers every category."""
    rank: dict[str, int] = {}
    keyed = []
    for i, p in enumerate(prompts):
        k = rank.get(p.category, 0)
        rank[p.category] = k + 1
        keyed.append((k, i, p))
    cat_order = {c: n for n, c in enumerate(dict.fromkeys(p.category for p in prompts))}
    keyed.sort(key=lambda t: (t[0], cat_order[t[2].category], t[1]))
    return [p for _, _, p in keyed]


def turn_seed(base: int, question_id: str, turn: int, temperature: float) -> int:
    """Seed of one turn: the same for every arm, stable across runs and machines."""
    return zlib.crc32(f"{base}:{question_id}:{turn}:{temperature:g}".encode()) & 0x7FFFFFFF


def warm_up(engine: Engine, config: BenchConfig, kinds: Sequence[str] | None = None) -> None:
    """A few unrecorded tokens per drafter kind (default: every kind of the config's arms)."""
    for kind in dict.fromkeys(kinds if kinds is not None else [a.drafter for a in config.arms]):
        req = GenerationRequest(
            prompt=WARMUP_PROMPT, max_tokens=config.warmup_tokens, temperature=0.0,
            drafter=kind, gamma=0 if kind == "none" else max(config.gammas), seed=0,
        )
        with engine.generate(req) as generation:
            for _ in generation:
                pass


def _generate(
    engine: Engine, request: GenerationRequest, progress: ProgressFn | None, label: str
) -> tuple[str, dict[str, Any], float]:
    t0 = time.perf_counter()
    parts: list[str] = []
    emitted = 0
    with engine.generate(request) as generation:  # Ctrl-C inside gives the engine back
        for ev in generation:
            parts.append(ev.text)
            if ev.token_id >= 0:
                emitted += 1
                if progress is not None:
                    progress(1, label)
    if progress is not None and request.max_tokens > emitted:
        progress(request.max_tokens - emitted, label)
    return "".join(parts), generation.stats.to_dict(), time.perf_counter() - t0


def arm_request(config: BenchConfig, arm: Arm, history: Sequence[ChatMessage], temp: float, seed: int) -> GenerationRequest:
    """The request of one turn on one arm: the conversation so far, the config's sampling."""
    return GenerationRequest(
        messages=tuple(history), max_tokens=config.max_tokens, temperature=temp,
        top_p=config.top_p, top_k=config.top_k, seed=seed, drafter=arm.drafter, gamma=arm.gamma,
    )


def arm_order(units: Sequence[Any], prompt_index: int, round_index: int) -> list[Any]:
    """The order of a prompt's (temperature, arm) units: rotated by the prompt's index,
    reversed in odd rounds."""
    rot = prompt_index % len(units)
    order = list(units[rot:]) + list(units[:rot])
    return order[::-1] if round_index % 2 else order


def run_bench(
    engine: Engine,
    prompts: Sequence[BenchPrompt],
    config: BenchConfig,
    progress: ProgressFn | None = None,
) -> BenchRun:
    """Measure every arm of `config` on `prompts` (already selected), interleaved; prompts
    run round-robin over categories.

    Returns a BenchRun; on KeyboardInterrupt it returns what finished, `interrupted=True`.
    """
    prompts = round_robin(prompts)
    run = BenchRun(config=config, prompts=list(prompts))
    arms = config.arms
    units = [(t, arm) for t in config.temperatures for arm in arms]
    t_start = time.perf_counter()
    try:
        if config.warmup_tokens > 0:
            warm_up(engine, config)
        for r, j, prompt in ((r, j, p) for r in range(config.repeat) for j, p in enumerate(prompts)):
            for position, (temp, arm) in enumerate(arm_order(units, j, r)):
                history: list[ChatMessage] = []
                for turn, user_text in enumerate(prompt.turns):
                    history.append(ChatMessage("user", user_text))
                    seed = turn_seed(config.seed, prompt.question_id, turn, temp)
                    req = arm_request(config, arm, history, temp, seed)
                    label = f"{prompt.category} {prompt.question_id} T={temp:g} {arm.key}"
                    if config.repeat > 1:
                        label = f"{r + 1}/{config.repeat} {label}"
                    text, stats, wall = _generate(engine, req, progress, label)
                    history.append(ChatMessage("assistant", text))
                    run.samples.append(
                        Sample(
                            temperature=temp, category=prompt.category, question_id=prompt.question_id,
                            arm=arm.key, drafter=arm.drafter, gamma=arm.gamma, turn=turn, seed=seed,
                            position=position, stats=stats, text_chars=len(text), t_wall_s=wall, round=r,
                        )
                    )
    except KeyboardInterrupt:
        log.warning("interrupted: keeping %d finished generations", len(run.samples))
        run.interrupted = True
    run.t_wall_s = time.perf_counter() - t_start
    return run
