"""Continuous batching (engine/batch.py) on fake multi-sequence backends: outputs equal the
one-at-a-time engine's per request, one verify call per step holds every active sequence,
requests join and leave between steps, prompts prefill in chunks, a cancel or a failure ends
one generation only, and the adaptive policy drafts less as the batch makes rows dearer.
The same guarantees on real weights: tests/engine/test_batch_real.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from localspec.engine import Engine, Generation, GenerationRequest
from localspec.engine.adaptive import AdaptivePolicy, PolicyState
from localspec.engine.drafters import ModelDrafter, PromptLookupDrafter
from localspec.engine.fake import FakeBackend
from localspec.errors import EngineBusyError, InvalidRequestError
from localspec.types import SamplingParams
from tests.concurrency import concurrently

SCRIPT = "The quick brown fox jumps over the lazy dog. Then it runs home and sleeps. The end."
PROMPTS = ["The quick", "Then it", "The lazy", "runs home", "over the"]


def make_engine(parallel: int, **kw: object) -> Engine:
    return Engine(FakeBackend(SCRIPT, n_seq=parallel, **kw),  # type: ignore[arg-type]
                  FakeBackend(SCRIPT, error_rate=0.25, seed=3, n_seq=parallel, **kw),  # type: ignore[arg-type]
                  check_invariants=True, parallel=parallel, prefill_chunk=4)


def request(prompt: str, **kw: object) -> GenerationRequest:
    kw.setdefault("drafter", "model")
    kw.setdefault("max_tokens", 40)
    return GenerationRequest(prompt=prompt, **kw)  # type: ignore[arg-type]


def drain(gen: Generation, out: dict[int, str], key: int) -> None:
    out[key] = "".join(ev.text for ev in gen)


def run_together(engine: Engine, reqs: list[GenerationRequest]) -> tuple[list[str], list[Generation]]:
    gens = [engine.generate(r) for r in reqs]
    return concurrently(lambda g: "".join(ev.text for ev in g), gens, timeout=60), gens


def alone(reqs: list[GenerationRequest]) -> list[str]:
    engine = Engine(FakeBackend(SCRIPT), FakeBackend(SCRIPT, error_rate=0.25, seed=3), check_invariants=True)
    try:
        return ["".join(ev.text for ev in engine.generate(r)) for r in reqs]
    finally:
        engine.close()


@pytest.mark.parametrize("drafter", ["model", "ngram", "none", "adaptive"])
def test_each_request_gets_what_it_gets_alone(drafter: str) -> None:
    reqs = [request(p, drafter=drafter, temperature=0.0 if i % 2 else 0.9, seed=i) for i, p in enumerate(PROMPTS)]
    engine = make_engine(3)
    try:
        texts, gens = run_together(engine, reqs)
        assert texts == alone(reqs)
        assert all(g.finish_reason in ("stop", "length") for g in gens)
        for g, text in zip(gens, texts, strict=True):  # usage counts are this request's own
            assert g.stats.num_generated_tokens == len(text.encode())
        assert not engine.busy
    finally:
        engine.close()


def test_one_verify_call_holds_every_active_sequence() -> None:
    engine = make_engine(3, decode_delay_s=0.001)
    try:
        run_together(engine, [request(p, max_tokens=30) for p in PROMPTS[:3]])
        target = engine.target
        assert isinstance(target, FakeBackend)
        assert max(len({seq for seq, _ in parts}) for parts in target.batches) == 3
        batch = engine.batch_stats
        assert batch is not None and batch.mean_batch > 1.5 and batch.steps > 0
    finally:
        engine.close()


def test_every_call_lists_its_sequences_in_order() -> None:
    """Slots freed and taken again in another order still reach the target in ascending
    sequence ids: llama.cpp's per-sequence caches take a run of consecutive ids with equal rows
    in one pass, and sequences out of order cost a pass each (measured: 4 one-row sequences
    in order 0-3 take 124-147 ms, reversed or shuffled 138-183 ms)."""
    engine = make_engine(3, decode_delay_s=0.001)
    try:
        reqs = [request(p, max_tokens=n) for p, n in zip(PROMPTS, [30, 8, 20, 12, 25], strict=True)]
        texts, _ = run_together(engine, reqs)
        assert texts == alone(reqs)
        target = engine.target
        assert isinstance(target, FakeBackend)
        orders = [[seq for seq, _ in parts] for parts in target.batches]
        assert all(o == sorted(o) for o in orders)
        assert {seq for o in orders for seq in o} == {0, 1, 2} and max(map(len, orders)) == 3
    finally:
        engine.close()


def test_long_prompts_prefill_in_chunks_beside_the_others() -> None:
    engine = make_engine(2, decode_delay_s=0.001)
    try:
        long_prompt = "The quick brown fox jumps over the lazy dog. Then it"
        texts, _ = run_together(engine, [request("The quick", max_tokens=30), request(long_prompt, max_tokens=10)])
        assert texts == alone([request("The quick", max_tokens=30), request(long_prompt, max_tokens=10)])
        target = engine.target
        assert isinstance(target, FakeBackend)
        prompt_rows = [rows for parts in target.batches for _, rows in parts]
        assert max(prompt_rows) <= 4 + 1  # chunks of prefill_chunk=4; a verify has <= γ+1 rows
    finally:
        engine.close()


def test_the_policy_prices_drafts_against_the_verify_rows_not_the_prompt_chunks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt chunk rides in the same call as the other sequences' verify rows, but it is
    work the step does anyway: counted in the batch the policy weighs, it makes any drafting
    look cheap beside it (measured: a draft model's 1 s prompt catch-up chosen beside a
    128-row chunk). The policy is told the verify rows of the others only."""
    from localspec.engine.loop import StepLoop

    seen: list[int] = []
    plan = StepLoop.plan

    def spy(self, k_cap, *, batch_rows=0, batch_tokens=0.0):  # type: ignore[no-untyped-def]
        seen.append(batch_rows)
        return plan(self, k_cap, batch_rows=batch_rows, batch_tokens=batch_tokens)

    monkeypatch.setattr(StepLoop, "plan", spy)
    engine = Engine(FakeBackend(SCRIPT, n_seq=2, decode_delay_s=0.001),  # type: ignore[arg-type]
                    FakeBackend(SCRIPT, error_rate=0.25, seed=3, n_seq=2), check_invariants=True,  # type: ignore[arg-type]
                    parallel=2, prefill_chunk=16)
    try:
        long_prompt = "The quick brown fox jumps over the lazy dog. Then it runs home and sleeps."
        reqs = [request("The quick", max_tokens=40, gamma=2), request(long_prompt, max_tokens=5, gamma=2)]
        texts, _ = run_together(engine, reqs)
        assert texts == alone(reqs)
        target = engine.target
        assert isinstance(target, FakeBackend)
        # the long prompt really was prefilled in 16-row chunks beside the other's verify rows
        assert any(sorted(rows for _, rows in parts)[-1] == 16 and len(parts) == 2 for parts in target.batches)
        assert seen and max(seen) <= 3  # the other sequence's [last, d1, d2] at most
    finally:
        engine.close()


def test_requests_beyond_the_slots_wait_and_then_join() -> None:
    engine = make_engine(2, decode_delay_s=0.001)
    try:
        reqs = [request(p, max_tokens=25) for p in PROMPTS]
        texts, gens = run_together(engine, reqs)
        assert texts == alone(reqs)
        assert engine.total_stats().num_requests == len(PROMPTS)
    finally:
        engine.close()


def test_cancel_ends_one_generation_and_not_the_others() -> None:
    engine = make_engine(3, decode_delay_s=0.002)
    try:
        reqs = [request(p, max_tokens=60, drafter="none") for p in PROMPTS[:3]]
        gens = [engine.generate(r) for r in reqs]
        out: dict[int, str] = {}
        threads = [threading.Thread(target=drain, args=(g, out, i)) for i, g in enumerate(gens) if i != 1]
        for t in threads:
            t.start()
        seen = []
        for ev in gens[1]:
            seen.append(ev)
            if len(seen) == 3:
                gens[1].cancel()
        for t in threads:
            t.join(timeout=60)
        assert seen[-1].finish_reason == "cancelled"
        expected = alone([reqs[0], reqs[2]])
        assert [out[0], out[2]] == expected
        after = engine.generate(request("The lazy", max_tokens=20))
        assert "".join(ev.text for ev in after) == alone([request("The lazy", max_tokens=20)])[0]
    finally:
        engine.close()


def test_leaving_the_iterator_early_frees_the_slot() -> None:
    engine = make_engine(1 + 1, decode_delay_s=0.001)
    try:
        gen = engine.generate(request("The quick", max_tokens=60))
        next(iter(gen))
        gen.close()
        texts, _ = run_together(engine, [request(p, max_tokens=20) for p in PROMPTS[:2]])
        assert texts == alone([request(p, max_tokens=20) for p in PROMPTS[:2]])
    finally:
        engine.close()


def test_a_failing_sequence_ends_alone_and_the_engine_stays_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(2, decode_delay_s=0.001)
    try:
        calls = {"n": 0}
        original = ModelDrafter.propose

        def flaky(self: ModelDrafter, context: list[int], *args: object, **kw: object) -> object:
            if bytes(context[:9]) == b"The quick":  # only the first request's drafts break
                calls["n"] += 1
                if calls["n"] == 3:
                    raise RuntimeError("drafter broke")
            return original(self, context, *args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(ModelDrafter, "propose", flaky)
        g0, g1 = engine.generate(request("The quick", max_tokens=40)), engine.generate(request("Then it", max_tokens=40))
        out: dict[int, str] = {}
        t = threading.Thread(target=drain, args=(g1, out, 1))
        t.start()
        with pytest.raises(RuntimeError, match="drafter broke"):
            "".join(ev.text for ev in g0)
        t.join(timeout=60)
        assert out[1] == alone([request("Then it", max_tokens=40)])[0]
        monkeypatch.undo()
        again = engine.generate(request("The quick", max_tokens=40))
        assert "".join(ev.text for ev in again) == alone([request("The quick", max_tokens=40)])[0]
    finally:
        engine.close()


def test_busy_without_wait_only_when_every_slot_is_taken() -> None:
    engine = make_engine(2, decode_delay_s=0.005)
    try:
        gens = [engine.generate(request(p, max_tokens=50), wait=False) for p in PROMPTS[:2]]
        threads = [threading.Thread(target=lambda g=g: list(g)) for g in gens]
        for t in threads:
            t.start()
        with pytest.raises(EngineBusyError):
            engine.generate(request("The lazy"), wait=False)
        for g in gens:
            g.cancel()
        for t in threads:
            t.join(timeout=60)
    finally:
        engine.close()


def test_parallel_needs_a_multi_sequence_backend() -> None:
    with pytest.raises(InvalidRequestError, match="parallel"):
        Engine(FakeBackend(SCRIPT), parallel=0)


def _policy(verify: dict[int, float], accepted: tuple[int, ...] = (2, 2, 0)) -> AdaptivePolicy:
    """An adaptive policy with prompt lookup only, whose verify costs are measured as given and
    whose 4-token drafts had `accepted` tokens accepted, in turn, 10 times over."""
    state = PolicyState()
    for _ in range(30):
        for n, sec in verify.items():
            state.verify.observe(n, sec)
    lookup = PromptLookupDrafter()
    p = AdaptivePolicy([lookup], 4, SamplingParams(temperature=0.0), state)
    context = [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3]
    lookup.begin(context)
    p.bind(context)
    for _ in range(10):  # by default the first two accepted in 2 of 3 steps, none in the third
        for a in accepted:
            p.acceptance["ngram4"].observe(4, a)
            p.acceptance["ngram3"].observe(4, a)
    return p


def test_the_policy_drafts_less_as_the_batch_makes_rows_dearer() -> None:
    # a CPU: each row adds 60 % of a one-row call
    cpu = {n: 0.010 * (1 + 0.6 * (n - 1)) for n in range(1, 41)}
    ks = [_policy(cpu).choose(4, batch_rows=n, batch_tokens=float(n))[1] for n in (0, 1, 3, 7)]
    assert ks == sorted(ks, reverse=True) and ks[0] > 0 and ks[-1] < ks[0], ks
    p = _policy(cpu)
    p.choose(4, batch_rows=7, batch_tokens=7.0)
    # a GPU: rows nearly free at any batch size: drafting stays on in the batch
    gpu = {n: 0.010 * (1 + 0.01 * (n - 1)) for n in range(1, 41)}
    assert _policy(gpu).choose(4, batch_rows=7, batch_tokens=7.0)[1] == _policy(gpu).choose(4)[1] > 0
    assert np.isfinite(p.expected_tokens)


def test_a_lazy_draft_model_evaluates_the_prompt_only_when_it_drafts() -> None:
    draft = FakeBackend(SCRIPT)
    drafter = ModelDrafter(draft, lazy_begin=True)
    context = list(b"The quick brown")
    drafter.begin(context)
    assert draft.calls == [] and drafter.pending(context) == len(context)
    proposal = drafter.propose(context, 3, SamplingParams(temperature=0.0), np.random.default_rng(0))
    # the prompt in one batch, its last token alone (as plain decoding evaluates it)
    n = len(context)
    assert bytes(proposal.tokens) == b" fo" and draft.calls[:2] == [("decode", 0, n - 1), ("decode", n - 1, 1)]
    eager = FakeBackend(SCRIPT)
    ModelDrafter(eager).begin(context)
    assert eager.calls == [("decode", 0, len(context) - 1)]


def test_split_batches_price_drafts_as_a_call_of_their_own() -> None:
    """Exact numerics: llama.cpp runs a sequence's extra rows in a ubatch of their own, which on
    a CPU costs about a one-row call more: drafting that pays in a unified batch does not."""
    cpu = {n: 0.010 * (1 + 0.6 * (n - 1)) for n in range(1, 41)}
    good = (4, 4, 3)  # lookup drafts nearly always accepted: one draft row pays for itself
    unified = _policy(cpu, good).choose(4, batch_rows=1, batch_tokens=1.0)[1]
    split = _policy(cpu, good)
    split.split_batches = True
    assert unified > 0 and split.choose(4, batch_rows=1, batch_tokens=1.0)[1] == 0
    alone = _policy(cpu, good)
    alone.split_batches = True
    assert alone.choose(4)[1] > 0  # alone there is nothing to split


def test_a_policy_that_always_drafts_re_measures_plain_steps() -> None:
    """The one-row time goes stale after T1_REFRESH_CALLS calls of other sizes: the next
    choice is a plain step that measures it again, then drafting resumes."""
    from localspec.engine.estimators import T1_REFRESH_CALLS

    cpu = {n: 0.010 * (1 + 0.6 * (n - 1)) for n in range(1, 41)}
    p = _policy(cpu)
    assert p.choose(4)[1] > 0
    for _ in range(T1_REFRESH_CALLS + 1):
        p.state.verify.observe(3, cpu[3])
    assert p.choose(4)[1] == 0
    p.state.verify.observe(1, cpu[1])
    assert p.choose(4)[1] > 0



def _uncertain_model_policy(*, split: bool, alpha: float = 0.6) -> tuple[AdaptivePolicy, ModelDrafter]:
    """GPU-like costs (a row adds 2 %), a model drafter measured but barely tried (its drafts
    accepted at `alpha` so far; at the optimistic end of the estimate it pays even as a call of
    its own: a trial is due) and plenty of exploration budget."""
    from localspec.engine.adaptive import PolicyState
    from localspec.engine.estimators import Acceptance

    state = PolicyState()
    for n in (1, 3, 5, 9):
        state.verify.observe(n, 0.010 * (1 + 0.02 * (n - 1)))
        state.draft_cost("model").observe(n, 0.0005 * (1 + 0.1 * (n - 1)))
    acc = Acceptance(alpha)
    acc.reached, acc.accepted = [1.0] * 16, [alpha] * 16
    state.acceptance["model"] = acc
    state.credit = 10.0
    drafter = ModelDrafter(FakeBackend(SCRIPT))
    p = AdaptivePolicy([drafter], 4, SamplingParams(temperature=0.0), state, probe_every=1)
    p.split_batches = split
    context = list(b"The quick brown")
    drafter.begin(context)
    p.bind(context)
    return p, drafter


def test_no_trials_while_a_split_batch_holds_other_sequences() -> None:
    """Exact numerics: a trial's drafts would cost an extra ubatch that every sequence of the
    batch waits for, so in a batch the policy stays plain; alone, the same state tries the
    drafter; a unified batch (fast numerics) may try it too."""
    p, drafter = _uncertain_model_policy(split=True)
    assert [p.choose(4, batch_rows=1, batch_tokens=1.0)[1] for _ in range(20)] == [0] * 20
    p, drafter = _uncertain_model_policy(split=True)
    assert any(p.choose(4)[0] is drafter for _ in range(5))
    p, drafter = _uncertain_model_policy(split=False)
    assert any(p.choose(4, batch_rows=1, batch_tokens=1.0)[0] is drafter for _ in range(5))


def test_an_unmeasured_drafter_is_measured_alone_not_in_a_batch() -> None:
    from localspec.engine.adaptive import PolicyState

    state = PolicyState()
    for n in (1, 3, 5, 9):
        state.verify.observe(n, 0.010 * (1 + 0.6 * (n - 1)))
    drafter = ModelDrafter(FakeBackend(SCRIPT), lazy_begin=True)
    p = AdaptivePolicy([drafter], 4, SamplingParams(temperature=0.0), state)
    context = list(b"The quick brown")
    drafter.begin(context)
    p.bind(context)
    assert p.choose(4, batch_rows=2, batch_tokens=2.0) == (p.none, 0)
    assert p.choose(4) == (drafter, 2)


def test_sequences_of_a_batch_share_one_exploration_budget() -> None:
    """Each sequence reports the shared call's time: the budget grows by EXPLORE_BUDGET of
    the wall time, not of it times the batch."""
    from localspec.engine.adaptive import EXPLORE_BUDGET

    p, _ = _uncertain_model_policy(split=True)
    p.state.credit = 0.0
    p.state.overhead = 0.0
    for _ in range(4):
        p.observe("none", 0, 0, 0.0, 0.030, batch_rows=0, batch=4)
    assert p.state.credit == pytest.approx(EXPLORE_BUDGET * 0.030)


def test_one_at_a_time_the_draft_model_skips_prompts_it_does_not_draft_for() -> None:
    """`parallel=1` too: a request that never drafts with the model leaves the draft model
    untouched (no prompt prefill for a drafter the policy did not pick); one that drafts
    with it evaluates the prompt at its first proposal."""
    draft = FakeBackend(SCRIPT, error_rate=0.25, seed=3)
    engine = Engine(FakeBackend(SCRIPT), draft, check_invariants=True)  # type: ignore[arg-type]
    try:
        "".join(ev.text for ev in engine.generate(request("The quick", drafter="ngram", max_tokens=8)))
        assert [c for c in draft.calls if c[0] == "decode"] == []
        "".join(ev.text for ev in engine.generate(request("The quick", drafter="model", max_tokens=8)))
        n = len(b"The quick")
        assert draft.calls[:2] == [("decode", 0, n - 1), ("decode", n - 1, 1)]
    finally:
        engine.close()


def test_one_acceptance_call_per_step_for_every_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    """The acceptance backend gets the whole batch in one call (one kernel launch on a GPU);
    when that call fails, each sequence is accepted on its own and the outputs do not change."""
    reqs = [request(p, drafter="model", temperature=0.0 if i % 2 else 0.9, seed=i) for i, p in enumerate(PROMPTS[:3])]
    engine = make_engine(3)
    backend = engine._acceptor.backend
    sizes: list[int] = []
    real = backend.accept_batch

    def counting(items):  # type: ignore[no-untyped-def]
        sizes.append(len(items))
        return real(items)

    monkeypatch.setattr(backend, "accept_batch", counting)
    try:
        texts, _ = run_together(engine, reqs)
    finally:
        engine.close()
    assert texts == alone(reqs)
    assert max(sizes) == 3 and sum(sizes) >= 3 * 5
    engine = make_engine(3)

    def broken(items):  # type: ignore[no-untyped-def]
        raise RuntimeError("the device went away")

    monkeypatch.setattr(engine._acceptor.backend, "accept_batch", broken)
    try:
        texts, gens = run_together(engine, reqs)
        assert texts == alone(reqs) and all(g.finish_reason in ("stop", "length") for g in gens)
    finally:
        engine.close()


def test_in_a_batch_a_trial_must_be_paid_for_in_full() -> None:
    """Alone, a first trial may go one plain step into debt; in a (unified) batch, where its
    loss is every sequence's wait, it waits until the budget has paid for it."""
    # drafts rarely accepted: even on GPU-like costs plain steps are best, drafting only a trial
    p, drafter = _uncertain_model_policy(split=False, alpha=0.05)
    p.state.credit = 0.0
    assert [p.choose(4, batch_rows=1, batch_tokens=1.0)[1] for _ in range(5)] == [0] * 5
    p, drafter = _uncertain_model_policy(split=False, alpha=0.05)  # a budget that pays for it
    assert any(p.choose(4, batch_rows=1, batch_tokens=1.0)[0] is drafter for _ in range(5))
    p, drafter = _uncertain_model_policy(split=False, alpha=0.05)
    p.state.credit = 0.0
    assert any(p.choose(4)[0] is drafter for _ in range(5))
