"""`localspec recommend --measure`: measure α, c and b on real local models with the engine.

Two greedy generations of the same prompt on one loaded pair: plain decoding (drafter
"none") gives the target's cost per token; the model drafter at a fixed γ gives the
per-position acceptance counts (→ α, theory.estimate_alpha), the drafter's cost per draft
token (→ c) and the verify batch cost (→ b(γ)). The theory then predicts the speedup from
those three numbers, and the ratio of the two runs' tokens/s is the measured speedup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from localspec.theory import best_gamma, estimate_alpha, fit_batch_slope, linear_batch_cost, speedup
from localspec.types import ChatMessage, GenerationRequest, ModelSpec

TASK_PROMPTS: dict[str, str] = {
    "code": "Write a Python function `parse_duration(text: str) -> int` that turns strings like "
            "'1h30m', '45s' or '2h' into seconds, raising ValueError on bad input. Include a docstring "
            "and a few pytest tests.",
    "chat": "Explain to a new programmer the difference between a process and a thread, with an example of each.",
    "summarize": "Summarize in five bullet points: Speculative decoding speeds up language model inference by "
                 "letting a small draft model propose several tokens that a large target model verifies in one "
                 "forward pass. Accepted tokens are kept, the first rejected one is resampled, and the output "
                 "distribution stays exactly the target's. The gain depends on how often the target agrees "
                 "with the drafter, how cheap the drafter is, and how cheap a batched verification is.",
    "math": "Solve step by step: a train leaves at 9:40 and travels 210 km at 84 km/h. When does it arrive?",
}


@dataclass(frozen=True)
class Measurement:
    """Measured inputs of the speed model and the speedup they predict vs the one observed."""

    task: str
    gamma: int
    alpha: float
    acceptance_rate: float
    mean_acceptance_length: float
    c: float
    b_gamma: float
    """Verify-batch cost at γ relative to one target token."""
    b_slope: float
    t_target_token_s: float
    t_draft_token_s: float
    plain_tokens_per_s: float
    spec_tokens_per_s: float
    measured_speedup: float
    predicted_speedup: float
    best_gamma: int
    best_gamma_speedup: float
    num_tokens: int

    @property
    def prediction_error(self) -> float:
        """(predicted − measured) / measured."""
        return (self.predicted_speedup - self.measured_speedup) / self.measured_speedup if self.measured_speedup else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (with the prediction error)."""
        return {**asdict(self), "prediction_error": self.prediction_error}


def _run(engine: Any, request: GenerationRequest) -> Any:
    for _ in engine.generate(request):
        pass
    return engine.stats()


def calibrate(
    target_path: str,
    draft_path: str,
    *,
    task: str = "code",
    gamma: int = 4,
    max_tokens: int = 128,
    n_ctx: int = 2048,
    n_gpu_layers: int = 0,
    engine_factory: Callable[[ModelSpec, ModelSpec], Any] | None = None,
) -> Measurement:
    """Load the pair once, run plain then speculative decoding, return the measurement."""
    if engine_factory is None:
        from localspec.engine import Engine

        engine_factory = Engine
    prompt = TASK_PROMPTS.get(task, TASK_PROMPTS["chat"])
    messages = (ChatMessage("user", prompt),)
    target = ModelSpec(target_path, n_gpu_layers=n_gpu_layers, n_ctx=n_ctx, name="target")
    draft = ModelSpec(draft_path, n_gpu_layers=n_gpu_layers, n_ctx=n_ctx, name="draft")
    engine = engine_factory(target, draft)
    try:
        plain = _run(engine, GenerationRequest(messages=messages, max_tokens=max_tokens, temperature=0.0, seed=0,
                                               drafter="none", gamma=0))
        # the draft model evaluates a prompt at its first draft (lazily): one short request
        # first, so the measured run's draft time is drafting, as the target's is decoding
        _run(engine, GenerationRequest(messages=messages, max_tokens=2, temperature=0.0, seed=0,
                                       drafter="model", gamma=1))
        spec = _run(engine, GenerationRequest(messages=messages, max_tokens=max_tokens, temperature=0.0, seed=0,
                                              drafter="model", gamma=gamma))
    finally:
        close = getattr(engine, "close", None)
        if close:
            close()
    return measurement_from(task, gamma, plain, spec)


def measurement_from(task: str, gamma: int, plain: Any, spec: Any) -> Measurement:
    """The measurement from the SpecStats of a plain run and a fixed-γ model-drafter run."""
    if plain.num_steps == 0 or spec.num_draft_tokens == 0:
        raise ValueError("calibration produced no steps or no draft tokens; use a longer max_tokens")
    t_target = plain.t_verify_s / plain.num_steps
    t_draft = spec.t_draft_s / spec.num_draft_tokens
    t_verify = spec.t_verify_s / spec.num_steps
    alpha = estimate_alpha(spec.accepted_per_position, spec.drafted_per_position)
    c = t_draft / t_target
    b_gamma = t_verify / t_target
    slope = fit_batch_slope(gamma, b_gamma)
    predicted = speedup(alpha, gamma, c, lambda g: b_gamma if g == gamma else 1.0 + slope * g)
    best = best_gamma(alpha, c, linear_batch_cost(slope))
    measured = spec.tokens_per_s / plain.tokens_per_s if plain.tokens_per_s else 0.0
    return Measurement(
        task=task, gamma=gamma, alpha=alpha, acceptance_rate=spec.acceptance_rate,
        mean_acceptance_length=spec.mean_acceptance_length, c=c, b_gamma=b_gamma, b_slope=slope,
        t_target_token_s=t_target, t_draft_token_s=t_draft, plain_tokens_per_s=plain.tokens_per_s,
        spec_tokens_per_s=spec.tokens_per_s, measured_speedup=measured, predicted_speedup=predicted,
        best_gamma=best.gamma, best_gamma_speedup=best.speedup, num_tokens=spec.num_generated_tokens,
    )
