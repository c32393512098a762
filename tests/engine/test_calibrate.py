"""The warm-up at load (engine/calibrate.py) with fake models: what it measures, that both
models end empty, that it runs only before the first request and changes no output, and
that a batched engine warms up too."""

from __future__ import annotations

from localspec.engine import Engine, GenerationRequest
from localspec.engine.fake import FakeBackend

SCRIPT = "The quick brown fox jumps over the lazy dog. Then it runs home and sleeps. The end."


def make(parallel: int = 1) -> Engine:
    return Engine(FakeBackend(SCRIPT, n_seq=parallel), FakeBackend(SCRIPT, error_rate=0.25, seed=3, n_seq=parallel),  # type: ignore[arg-type]
                  check_invariants=True, parallel=parallel, gamma=4)


def text(engine: Engine, prompt: str, **kw: object) -> str:
    return "".join(ev.text for ev in engine.generate(GenerationRequest(prompt=prompt, max_tokens=30, **kw)))  # type: ignore[arg-type]


def test_warm_up_measures_the_costs_and_leaves_both_models_empty() -> None:
    engine = make()
    try:
        assert engine.warm_up()
        state = engine._policy_states[True]
        assert state.verify.known and state.verify.predict(1) > 0
        assert set(state.verify._r) >= {2, 3, 4, 5}  # every verify size up to γ + 1
        assert state.draft_cost("model").known
        assert engine.target.n_past == 0 and engine.draft is not None and engine.draft.n_past == 0
        assert not engine.warm_up()  # once
    finally:
        engine.close()


def test_outputs_do_not_change_and_no_step_is_spent_measuring() -> None:
    prompts = ["The quick", "Then it", "runs home"]
    cold, warm = make(), make()
    try:
        assert warm.warm_up()
        for p in prompts:
            for kw in ({"drafter": "adaptive", "temperature": 0.0}, {"drafter": "adaptive", "temperature": 0.9, "seed": 5}):
                assert text(warm, p, **kw) == text(cold, p, **kw)
    finally:
        cold.close()
        warm.close()


def test_warm_up_after_a_request_does_nothing() -> None:
    engine = make()
    try:
        text(engine, "The quick", drafter="adaptive")
        assert not engine.warm_up()
    finally:
        engine.close()


def test_a_batched_engine_warms_up_on_its_first_sequence() -> None:
    engine = make(parallel=3)
    try:
        assert engine.warm_up() and engine.target.n_past == 0
        assert text(engine, "The quick", drafter="model", temperature=0.0) == text(make(), "The quick", drafter="model", temperature=0.0)
    finally:
        engine.close()
