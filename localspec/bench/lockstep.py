"""The lockstep schedule (`localspec bench --lockstep`): a prompt's arms run at once, one
event each in turn, every arm on its own engine.

One after another, two arms of the same prompt run seconds apart, and on a shared machine
its speed drifts between them (other tenants, clock changes): on a 2-core cloud host the
time per token of the *same* work differs by ~9 % between neighbouring generations, which
is the whole margin a per-category comparison has to resolve. In lockstep the runner pulls
one event from each arm's generation in turn, so each slice of the host's speed is shared
by every arm within a step or two (~0.1 s on a CPU), and the paired ratio keeps the
policy's cost and loses most of the drift.

Each arm is charged only its own calls: the other arms' calls made while an arm's
generation ran are subtracted from its `t_generate_s` (recorded as `t_other_arms_s`), and
its wall time is the sum of its own calls. No timing inside the engine spans a yield (a
step's draft, verify and acceptance are timed between two events), so the engine's own
measurements, the adaptive policy's included, are unaffected.

Each arm needs its own engine (loaded once per arm: memory for one model pair per arm);
its state (caches, the adaptive policy's estimates) is its own, as in a real deployment of
that arm. Everything else — prompts, seeds, rounds, the summary — is `runner.run_bench`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field

from localspec.bench.runner import (
    Arm, BenchConfig, BenchRun, ProgressFn, Sample, arm_order, arm_request, round_robin, turn_seed, warm_up,
)
from localspec.engine import ChatMessage, Engine, Generation
from localspec.prompts import BenchPrompt

log = logging.getLogger(__name__)


@dataclass
class _Lane:
    """One arm's generation within a lockstep turn."""

    arm: Arm
    generation: Generation
    label: str
    max_tokens: int
    parts: list[str] = field(default_factory=list)
    own_s: float = 0.0
    """Seconds inside this lane's own `next()` calls (prefill included)."""
    other_s: float = 0.0
    """Seconds of other lanes' calls between this lane's first call and its last."""
    started: bool = False
    emitted: int = 0


def run_turn(lanes: Sequence[_Lane], progress: ProgressFn | None) -> None:
    """Pull one event from each unfinished lane in turn until all have ended."""
    active = list(lanes)
    while active:
        for lane in list(active):
            t0 = time.perf_counter()
            ev = next(lane.generation, None)
            dt = time.perf_counter() - t0
            lane.own_s += dt
            for other in active:
                if other is not lane and other.started:
                    other.other_s += dt
            lane.started = True
            if ev is not None:
                lane.parts.append(ev.text)
                if ev.token_id >= 0:
                    lane.emitted += 1
                    if progress is not None:
                        progress(1, lane.label)
            if ev is None or ev.finish_reason is not None:
                active.remove(lane)
                if progress is not None and lane.max_tokens > lane.emitted:
                    progress(lane.max_tokens - lane.emitted, lane.label)


def run_lockstep(
    engines: Mapping[str, Engine],
    prompts: Sequence[BenchPrompt],
    config: BenchConfig,
    progress: ProgressFn | None = None,
) -> BenchRun:
    """`run_bench` with every arm of a (prompt, temperature) running at once, `engines[arm.key]`
    serving each arm. Temperatures run one after another (reversed in odd rounds); within a
    turn the arms take turns in `arm_order`, reversed for every other prompt (so no arm always
    runs right after the same one). On KeyboardInterrupt returns what finished,
    `interrupted=True` (a turn in flight is dropped for every arm)."""
    prompts = round_robin(prompts)
    run = BenchRun(config=config, prompts=list(prompts))
    arms = config.arms
    if missing := [a.key for a in arms if a.key not in engines]:
        raise ValueError(f"lockstep needs an engine per arm; none for {', '.join(missing)}")
    t_start = time.perf_counter()
    try:
        if config.warmup_tokens > 0:
            for arm in arms:
                warm_up(engines[arm.key], config, (arm.drafter,))
        for r, j, prompt in ((r, j, p) for r in range(config.repeat) for j, p in enumerate(prompts)):
            temps = config.temperatures[::-1] if r % 2 else config.temperatures
            for temp in temps:
                order: list[Arm] = arm_order(arms, j, r)
                if j % 2:  # every arm's predecessor in the cycle changes too, not only who starts
                    order.reverse()
                history: dict[str, list[ChatMessage]] = {a.key: [] for a in arms}
                for turn, user_text in enumerate(prompt.turns):
                    seed = turn_seed(config.seed, prompt.question_id, turn, temp)
                    with ExitStack() as stack:
                        lanes = []
                        for arm in order:
                            history[arm.key].append(ChatMessage("user", user_text))
                            req = arm_request(config, arm, history[arm.key], temp, seed)
                            label = f"{prompt.category} {prompt.question_id} T={temp:g} lockstep"
                            if config.repeat > 1:
                                label = f"{r + 1}/{config.repeat} {label}"
                            gen = stack.enter_context(engines[arm.key].generate(req))
                            lanes.append(_Lane(arm, gen, label, config.max_tokens))
                        run_turn(lanes, progress)
                    for position, lane in enumerate(lanes):
                        text = "".join(lane.parts)
                        history[lane.arm.key].append(ChatMessage("assistant", text))
                        stats = lane.generation.stats
                        stats.t_generate_s = max(0.0, stats.t_generate_s - lane.other_s)
                        record = stats.to_dict()
                        record["t_other_arms_s"] = lane.other_s
                        run.samples.append(
                            Sample(
                                temperature=temp, category=prompt.category, question_id=prompt.question_id,
                                arm=lane.arm.key, drafter=lane.arm.drafter, gamma=lane.arm.gamma, turn=turn,
                                seed=seed, position=position, stats=record, text_chars=len(text),
                                t_wall_s=lane.own_s, round=r,
                            )
                        )
    except KeyboardInterrupt:
        log.warning("interrupted: keeping %d finished generations", len(run.samples))
        run.interrupted = True
    run.t_wall_s = time.perf_counter() - t_start
    return run
