"""Drafting policies: the adaptive choice on synthetic costs, the n-gram matcher, p_min."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.engine.adaptive import EXPLORE_BUDGET, TRIAL_BACKOFF, AdaptivePolicy, PolicyState, _Option
from localspec.engine.estimators import Acceptance, LinearCost
from localspec.engine.drafters import ModelDrafter
from localspec.engine.fake import FakeBackend
from localspec.engine.drafters.ngram import PromptLookupDrafter
from localspec.types import SamplingParams

GREEDY = SamplingParams()


def _state(t1: float, slope: float, draft_per_token: float, alpha: float, weight: float = 200) -> PolicyState:
    """Costs from a known linear model and acceptance α at every position."""
    s = PolicyState()
    for n in (1, 3, 5, 9):
        s.verify.observe(n, t1 + slope * (n - 1))
        s.draft_cost("model").observe(n, draft_per_token * (1 + 0.1 * (n - 1)))
    for name in ("model", "ngram2", "ngram3", "ngram4"):
        acc = Acceptance(alpha)
        acc.reached = [weight] * 16
        acc.accepted = [weight * alpha] * 16
        s.acceptance[name] = acc
    return s


def _policy(state: PolicyState, context: list[int] | None = None, probe_every: int = 1000) -> AdaptivePolicy:
    drafter = ModelDrafter(FakeBackend())
    p = AdaptivePolicy([drafter, PromptLookupDrafter()], 8, GREEDY, state, probe_every=probe_every)
    ctx = context if context is not None else [1, 2, 3]
    drafter.backend.tokens = list(ctx[:-1])  # drafter in sync: lag 1
    p.bind(ctx)
    # undo the carry-over shrink so the synthetic estimates hold exactly
    for name, acc in state.acceptance.items():
        acc.reached = [v / 0.3 for v in acc.reached]
        acc.accepted = [v / 0.3 for v in acc.accepted]
    return p


def test_linear_cost_recovers_its_model() -> None:
    c = LinearCost()
    for n in (1, 2, 5, 9, 1, 5):
        c.observe(n, 0.077 + 0.024 * (n - 1))
    assert c.predict(1) == pytest.approx(0.077, rel=1e-6)
    assert c.predict(17) == pytest.approx(0.077 + 0.024 * 16, rel=1e-6)


def test_expected_tokens_matches_theory() -> None:
    acc = Acceptance(0.8)
    acc.reached, acc.accepted = [1e6] * 8, [0.8e6] * 8
    alpha, g = 0.8, 4
    assert acc.expected_tokens(g) == pytest.approx((1 - alpha ** (g + 1)) / (1 - alpha), rel=1e-4)


def test_later_positions_follow_the_observed_first_one() -> None:
    """A policy that drafts one token at a time only sees position 0; later positions must
    not stay stuck at the prior (that kept n-gram drafts at k = 1 on summarization)."""
    acc = Acceptance(0.65)
    acc.observe(3, 3)
    for _ in range(40):
        acc.observe(1, 1)
    assert acc.rate(0) > 0.9
    assert acc.rate(1) > 0.9 and acc.rate(3) > 0.9
    # and evidence at a later position still counts
    for _ in range(40):
        acc.observe(2, 1)
    assert acc.rate(1) < 0.2 < 0.9 < acc.rate(0)


def test_ngram_drafts_deep_after_single_token_hits() -> None:
    """CPU costs (verify +0.4·t1 per token) and n-gram drafts that always hit at k = 1:
    the policy must lengthen the draft, not stay at one token."""
    context = list(range(10, 30)) + list(range(10, 14))
    state = _state(0.083, 0.034, 0.044, 0.6)
    acc = Acceptance(0.65)
    acc.observe(3, 3)
    for _ in range(40):
        acc.observe(1, 1)
    acc.reached = [v * 0.3 for v in acc.reached]  # _policy undoes the carry-over
    acc.accepted = [v * 0.3 for v in acc.accepted]
    state.acceptance["ngram4"] = acc
    state.ngram_cost = 1e-5
    p = _policy(state, context)
    assert p.ngram is not None
    p.ngram.begin(context)
    drafter, k = p.choose(8)
    assert drafter.name == "ngram" and k >= 4


def test_cpu_regime_picks_plain_decoding() -> None:
    """c·γ + b(γ) > expected tokens for every γ: the policy must choose γ = 0."""
    # this machine: 77 ms per token, +24 ms per extra verify token, drafter 44 ms/token, α = 0.6
    p = _policy(_state(0.077, 0.024, 0.044, 0.6))
    for k in range(1, 9):
        c, b = 0.044 / 0.077, (0.077 + 0.024 * k) / 0.077
        assert c * k + b > (1 - 0.6 ** (k + 1)) / (1 - 0.6)  # the premise
    drafter, k = p.choose(8)
    assert k == 0 and drafter.name == "none"


def test_gpu_regime_picks_long_drafts() -> None:
    """Verify batches nearly free and a cheap drafter with α = 0.85: speculate deeply."""
    p = _policy(_state(0.020, 0.0003, 0.002, 0.85))
    drafter, k = p.choose(8)
    assert drafter.name == "model" and k >= 5


def test_ngram_chosen_when_the_context_repeats() -> None:
    context = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7]
    state = _state(0.077, 0.024, 0.044, 0.6)
    state.acceptance["ngram3"].accepted = [200 * 0.95] * 16
    state.ngram_cost = 1e-5
    p = _policy(state, context)
    assert p.ngram is not None
    p.ngram.begin(context)
    drafter, k = p.choose(8)
    assert drafter.name == "ngram" and 1 <= k <= 8


def test_failed_trials_back_off() -> None:
    """Little evidence of useless drafts (α = 0.01) and plenty of budget: the policy tries
    the model drafter now and then, and after every trial that finds nothing it waits
    longer (and stops once the evidence rules the drafter out)."""
    state = _state(0.020, 0.0003, 0.0002, 0.01, weight=1)
    state.credit = 10.0
    p = _policy(state, probe_every=3)
    trials = []
    for step in range(200):
        d, k = p.choose(8)
        if d.name == "model":
            trials.append(step)
            p.observe("model", k, 0, 0.0004, 0.0206)
        else:
            assert k == 0
            p.observe("none", 0, 0, 0.0, 0.020)
    gaps = [b - a for a, b in zip(trials, trials[1:])]
    assert len(gaps) >= 2
    assert all(g2 >= TRIAL_BACKOFF * g1 - 1 for g1, g2 in zip(gaps, gaps[1:])), gaps


def test_trials_wait_for_the_budget() -> None:
    """CPU costs and a debt of 0.1 s: the model drafter's trial (its regret over plain
    decoding, ~0.05 s here) waits until EXPLORE_BUDGET of the time spent since has paid the
    debt down to one plain step less than that regret."""
    state = _state(0.077, 0.024, 0.044, 0.6, weight=1)  # uncertain: it might pay
    state.credit = -0.1
    p = _policy(state, probe_every=1)
    plain = _Option("none", 0, 1.0, p._seconds("none", 0))
    regret = min(p._regret(o, plain) for o in p._options("model", 8))
    assert 0.01 < regret < 0.2  # the premise: a trial costs something
    for step in range(1000):
        d, k = p.choose(8)
        if d.name == "model":
            break
        p.observe("none", 0, 0, 0.0, 0.077)
    else:
        raise AssertionError("never tried the model drafter")
    allowed = [-0.1 + n * 0.077 * EXPLORE_BUDGET + state.verify.predict(1) for n in (step - 1, step)]
    assert allowed[0] < regret <= allowed[1] + 1e-12


class TestPromptLookup:
    def test_longest_match_first_most_recent(self) -> None:
        d = PromptLookupDrafter(n_min=1, n_max=3)
        ctx = [1, 2, 3, 9, 2, 3, 4, 5, 1, 2, 3]
        d.begin(ctx)
        # suffix (1,2,3) occurs at 0..2 followed by 9; (2,3) occurs later followed by 4
        assert d.lookup(ctx, 4) == (9, 2, 3, 4)

    def test_falls_back_to_shorter_ngrams(self) -> None:
        d = PromptLookupDrafter(n_min=1, n_max=3)
        ctx = [7, 8, 4, 5, 6, 1, 8]
        d.begin(ctx)
        assert d.lookup(ctx, 3) == (4, 5, 6)

    def test_no_match_gives_nothing(self) -> None:
        d = PromptLookupDrafter(n_min=2, n_max=3)
        ctx = [1, 2, 3, 4]
        d.begin(ctx)
        assert d.lookup(ctx, 5) == ()
        assert d.propose(ctx, 5, GREEDY, np.random.default_rng()).tokens == ()

    def test_index_grows_incrementally(self) -> None:
        d = PromptLookupDrafter(n_min=2, n_max=2)
        ctx = [1, 2, 3]
        d.begin(ctx)
        assert d.lookup(ctx, 2) == ()
        ctx += [4, 1, 2]
        d.observe(ctx)
        assert d.lookup(ctx, 2) == (3, 4)
        assert len(d._index) == 4  # (1,2) (2,3) (3,4) (4,1): each n-gram indexed once

    def test_observe_indexes_only_new_positions(self) -> None:
        """No rescans: each observe touches only the new tokens (count the index writes)."""
        d = PromptLookupDrafter(n_min=2, n_max=4)
        ctx = list(np.random.default_rng(0).integers(0, 50, size=5000))
        d.begin(ctx[:1000])
        writes = {"n": 0}
        real = d._index

        class Counting(dict):  # type: ignore[type-arg]
            def __setitem__(self, key, value):  # type: ignore[no-untyped-def]
                writes["n"] += 1
                super().__setitem__(key, value)

        d._index = Counting(real)
        for end in range(1003, 5000, 3):
            d.observe(ctx[:end])
        assert writes["n"] <= 3 * (5000 - 1000)  # 3 n-gram sizes per new position, nothing more


def test_p_min_stops_drafting_on_low_confidence() -> None:
    low = ModelDrafter(FakeBackend(confidence=0.5, noise=1.0))
    high = ModelDrafter(FakeBackend(confidence=20.0, noise=0.1))
    ctx = list(b"Hello! I am")
    for d in (low, high):
        d.begin(ctx)
    rng = np.random.default_rng(0)
    assert low.propose(ctx, 6, GREEDY, rng, p_min=0.9).tokens == ()
    assert len(high.propose(ctx, 6, GREEDY, rng, p_min=0.9).tokens) == 6


def test_verify_cost_never_falls_with_batch_size() -> None:
    """A size measured during a quiet moment must not make longer batches look cheaper than
    shorter ones (load changes between measurements of different sizes)."""
    from localspec.engine.estimators import BatchCost

    c = BatchCost()
    c.observe(1, 0.1)
    c.observe(5, 0.25)
    c.observe(3, 0.02)  # a glitch
    ratios = [c.ratio(n) for n in range(1, 10)]
    assert ratios == sorted(ratios) and ratios[0] == 1.0
    assert c.ratio(5) == pytest.approx(2.5) and c.ratio(9) >= c.ratio(5)


def test_verify_cost_answers_follow_every_new_measurement() -> None:
    """`ratio` remembers its answers between measurements (the policy asks for the same sizes
    many times a step); every observed call, one-row ones included (they age the other sizes'
    ratios), must make it answer anew."""
    from localspec.engine.estimators import STALE_CALLS, BatchCost

    c = BatchCost()
    c.observe(1, 0.1)
    c.observe(3, 0.2)
    assert c.ratio(3) == pytest.approx(2.0) and c.ratio(3, low=True) == pytest.approx(2.0)
    c.observe(3, 0.4)  # a loaded machine: the running ratio rises, the lowest one stays
    loaded = c.ratio(3)
    assert loaded > 2.0 and c.ratio(3, low=True) == pytest.approx(2.0)
    for _ in range(STALE_CALLS + 1):  # one-row steps only: size 3's loaded ratio goes stale
        c.observe(1, 0.1)
    assert c.ratio(3) == pytest.approx(2.0) and loaded > 2.1


class _HeadDrafter:
    """A drafter the policy has never heard of: a cheap head drafting a whole block in one call
    (like DFlash), or a chain of cheap calls (like an EAGLE head) with `sequential`."""

    kv_cache = None

    def __init__(self, name: str, sequential: bool, prior: float = 0.8) -> None:
        self.name, self.sequential, self.prior_acceptance = name, sequential, prior
        self.decode_log: list[tuple[int, float]] = []

    def begin(self, context: list[int]) -> None:
        """Nothing to prepare."""

    def propose(self, context, k, params, rng, p_min=0.0):  # type: ignore[no-untyped-def]
        raise AssertionError("the policy only chooses")

    def observe(self, context: list[int]) -> None:
        """Nothing to follow."""

    def pending(self, context: list[int]) -> int:
        return 1


@pytest.mark.parametrize("sequential", [True, False])
def test_any_drafter_is_chosen_through_its_interface(sequential: bool) -> None:
    """A third drafter, cheap and accurate, beats the costly model drafter on CPU costs; the
    policy learns its cost from `decode_log` like any other (first choice: measure it)."""
    state = _state(0.077, 0.024, 0.044, 0.6)
    head = _HeadDrafter("head", sequential)
    acc = Acceptance(0.9)
    acc.reached, acc.accepted = [200 / 0.3] * 16, [200 * 0.9 / 0.3] * 16
    state.acceptance["head"] = acc
    model = ModelDrafter(FakeBackend())
    model.backend.tokens = [1, 2]
    p = AdaptivePolicy([model, PromptLookupDrafter(), head], 8, GREEDY, state)
    p.bind([1, 2, 3])
    drafter, k = p.choose(8)
    assert drafter is head and k == 2  # unmeasured: measure it once
    head.decode_log = [(1, 0.077 * 0.05)]
    p.observe("head", 2, 2, 0.077 * 0.05, 0.077 + 0.048)
    drafter, k = p.choose(8)
    assert drafter is head and k >= 3
    # its cost is the one it reported: a block costs one call, a chain one call per token
    one_call = state.draft_cost("head").predict(1)
    extra = p._seconds("head", 6) - p._seconds("head", 1) - (state.verify.predict(7) - state.verify.predict(2))
    assert extra == pytest.approx(5 * one_call if sequential else 0.0, abs=1e-12)


def test_a_policy_without_prompt_lookup_or_model() -> None:
    """Only the head: the policy must not need a model drafter or prompt lookup."""
    state = _state(0.020, 0.0003, 0.002, 0.85)
    head = _HeadDrafter("head", True, prior=0.85)
    head.decode_log = [(1, 0.001)]
    p = AdaptivePolicy([head], 8, GREEDY, state)
    p.bind([1, 2, 3])
    drafter, k = p.choose(8)
    assert drafter is head and k >= 5



def test_a_request_forgets_carried_acceptance_its_own_drafts_contradict() -> None:
    acc = Acceptance(0.5)
    for _ in range(40):
        acc.observe(4, 4)
    carried = acc.carried()
    assert carried.own == (0, 0) and carried.evidence > 5 and carried.rate(0) > 0.8
    agrees = carried.carried()
    agrees.observe(4, 3)
    assert not agrees.forget_carried(1.0, 0.3) and agrees.evidence > 2
    carried.observe(4, 0)  # the first draft of this request fails
    before = carried.rate(0)
    assert carried.forget_carried(1.0, 0.3)
    assert carried.evidence == pytest.approx(2.0) and carried.rate(0) < before - 0.1
    assert not carried.forget_carried(1.0, 0.3)  # nothing left to forget


def _steps(p: AdaptivePolicy, context: list[int], text: list[int], t1: float) -> list[int]:
    """Steps that commit `text` (a greedy target's tokens), as the loop does: a draft's
    guesses are accepted while they match it. Returns each step's k."""
    assert p.ngram is not None
    ks = []
    while text:
        d, k = p.choose(4)
        guesses = list(p.ngram.propose(context, k, GREEDY, np.random.default_rng(0)).tokens) if k else []
        hits = next((i for i, (g, t) in enumerate(zip(guesses, text)) if g != t), min(len(guesses), len(text)))
        context.extend(text[: hits + 1])
        del text[: hits + 1]
        p.ngram.observe(context)
        p.observe(d.name if k else "none", k, hits, 0.0, p.state.verify.predict(k + 1))
        ks.append(k)
    return ks


def test_shadow_drafts_learn_prompt_lookup_without_drafting() -> None:
    """A CPU where a verify of two rows costs twice one row, and no acceptance measured yet:
    prompt lookup is not tried blind. Its guesses on plain steps are checked against the
    tokens committed after them: where the reply quotes the prompt they come true, its
    acceptance rises, and it drafts deep; where the reply goes elsewhere its guesses fail and
    it stops."""
    state = PolicyState()
    for n, ratio in ((1, 1.0), (2, 2.05), (3, 2.6), (4, 3.2), (5, 3.8)):
        for _ in range(3):
            state.verify.observe(n, 0.04 * ratio)
    prompt = list(range(100, 160))
    context = prompt + prompt[:4]  # the reply starts quoting the prompt
    lookup = PromptLookupDrafter()
    lookup.begin(context)
    p = AdaptivePolicy([lookup], 4, GREEDY, state)
    p.bind(context)
    ks = _steps(p, context, prompt[4:40], 0.04)
    first = next(i for i, k in enumerate(ks) if k)
    assert first >= 2  # not tried blind: the first guesses were checked on plain steps
    assert ks[-3:] == [4, 4, 4]  # then deep drafts while the quote goes on
    rate = p.acceptance["ngram4"].rate(0)
    ks = _steps(p, context, [2000 + i for i in range(30)], 0.04)  # new text
    assert p.acceptance["ngram4"].rate(0) < rate  # the draft into it failed
    assert ks[1:] == [0] * 29  # and no more drafts (no more matches)


def test_a_verify_cost_measured_under_load_is_measured_again() -> None:
    """Prompt lookup's acceptance is known (shadow drafts) and would pay at the verify cost
    first measured, but the last measurements of that size were 3× slower (another process
    loaded the machine): the policy makes a trial of it, to see whether it is cheap again."""
    state = PolicyState()
    for n, ratio in ((1, 1.0), (2, 1.1), (3, 1.15), (4, 1.2), (5, 1.25)):
        state.verify.observe(n, 0.04 * ratio)
    for n, ratio in ((2, 1.1), (3, 1.15), (4, 1.2), (5, 1.25)):
        for _ in range(20):
            state.verify.observe(n, 0.04 * 3 * ratio)  # under load
    state.verify.observe(1, 0.04)
    for key in ("ngram2", "ngram3", "ngram4"):
        acc = Acceptance(0.5)
        acc.reached, acc.accepted = [200.0] * 4, [160.0] * 4  # 80 %
        state.acceptance[key] = acc
    context = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7]
    lookup = PromptLookupDrafter()
    lookup.begin(context)
    p = AdaptivePolicy([lookup], 4, GREEDY, state)
    p.bind(context)
    assert state.verify.ratio(4) > 3 and state.verify.ratio(4, low=True) < 1.3  # the premise
    d, k = p.choose(4)
    assert d.name == "ngram" and k >= 1


def test_an_outcome_observed_in_parts_counts_as_the_whole() -> None:
    """A shadow draft right so far counts its seen positions at once; the rest of its outcome
    added later gives exactly the counts of observing it whole."""
    whole, parts = Acceptance(0.5), Acceptance(0.5)
    for acc in (whole, parts):
        acc.observe(4, 1)
    whole.observe(4, 3)
    parts.observe(4, 2, final=False)
    assert parts.own == (1, 1)  # not a new outcome until it is decided
    assert parts.accepted[:2] == pytest.approx(whole.accepted[:2]) and parts.accepted[2] < whole.accepted[2]
    parts.observe(4, 3, counted=2)
    assert parts.reached == pytest.approx(whole.reached)
    assert parts.accepted == pytest.approx(whole.accepted)
    assert parts.own == whole.own == (2, 2)


def test_a_shadow_draft_right_so_far_is_learned_before_it_is_decided() -> None:
    """Shadow guesses that come true are counted as the tokens come, not only when the whole
    guess is decided: held back, every right guess would be counted a step or more after the
    wrong ones, and the estimate would lag below the truth (seen in the policy simulation:
    0.72 estimated where 0.8 was true)."""
    state = PolicyState()
    for n, ratio in ((1, 1.0), (2, 3.0), (3, 4.0), (4, 5.0), (5, 6.0)):  # drafting never pays
        for _ in range(3):
            state.verify.observe(n, 0.04 * ratio)
    prompt = list(range(100, 160))
    context = prompt + prompt[:4]
    lookup = PromptLookupDrafter()
    lookup.begin(context)
    p = AdaptivePolicy([lookup], 4, GREEDY, state)
    p.bind(context)
    before = p.acceptance["ngram4"].accepted[:1] or [0.0]
    assert _steps(p, context, prompt[4:5], 0.04) == [0]  # a plain step; its shadow guessed 4 tokens
    p.choose(4)  # the first guess came true: counted now, three guesses still open
    acc = p.acceptance["ngram4"]
    assert acc.accepted[0] > before[0] and acc.own == (0, 0)


def test_prompt_lookup_waits_for_evidence_where_a_draft_barely_pays() -> None:
    """On a CPU where a verify of 4 rows costs 2.6× one row, prompt lookup at an estimated
    80 % barely pays. On an estimate that rests on a few outcomes (most drafts chosen on a
    freshly risen estimate fail; measured on recorded real text) it does not draft; on the
    same estimate over many outcomes it does."""
    prompt = list(range(100, 160))
    context = prompt + prompt[:4]
    chosen = {}
    for weight in (3.0, 200.0):
        state = PolicyState()
        for n, ratio in ((1, 1.0), (2, 1.9), (3, 2.25), (4, 2.6), (5, 2.95)):
            for _ in range(3):
                state.verify.observe(n, 0.04 * ratio)
        for key in ("ngram2", "ngram3", "ngram4"):
            acc = Acceptance(0.5)
            acc.reached, acc.accepted = [weight / 0.3] * 4, [0.8 * weight / 0.3] * 4  # carried at 0.3
            state.acceptance[key] = acc
        lookup = PromptLookupDrafter()
        lookup.begin(context)
        p = AdaptivePolicy([lookup], 4, GREEDY, state)
        p.bind(context)
        d, k = p.choose(4)
        chosen[weight] = (d.name, k)
    assert chosen[3.0] == ("none", 0)
    assert chosen[200.0][0] == "ngram" and chosen[200.0][1] >= 3


def test_row_slope_is_the_fit_through_the_neighbouring_sizes() -> None:
    """`BatchCost.row_slope`: the least-squares ratio per row through the sizes around a
    batch; none with fewer than two sizes measured there."""
    from localspec.engine.estimators import BatchCost

    c = BatchCost()
    c.observe(1, 0.070)
    assert c.row_slope(2, 8) == 0.0
    for n in (2, 3, 4, 6):
        c.observe(n, 0.070 * (0.9 * n + 0.1))
    assert c.row_slope(2, 8) == pytest.approx(0.9)
    assert c.row_slope(5, 8) == 0.0  # only size 6 there


def test_a_draft_in_a_batch_is_not_priced_by_one_lucky_size() -> None:
    """On a 2-core CPU a row of a four-sequence batch costs ~0.9 of a one-row call, but the
    five-row size, measured only when some sequence drafted, can hold a running ratio that
    noise took low. A one-token prompt-lookup draft at α = 0.85 then looks like a gain; priced
    at the slope through the neighbouring sizes, plain decoding is chosen (measured: such drafts
    lost 5-12 % of their steps)."""
    context = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7]
    state = PolicyState()
    state.verify.observe(1, 0.070)
    for n in (2, 3, 4, 6, 7, 8):
        state.verify.observe(n, 0.070 * (0.9 * n + 0.1))
    state.verify.observe(5, 0.070 * 4.2)  # one lucky measurement: +0.5 row over four rows
    for name in ("ngram2", "ngram3", "ngram4"):
        acc = Acceptance(0.85)
        acc.reached = [1000.0] * 16
        acc.accepted = [850.0] * 16
        state.acceptance[name] = acc
    state.ngram_cost = 1e-6
    p = _policy(state, context)
    assert p.ngram is not None
    p.ngram.begin(context)
    assert 4.0 / state.verify.predict(4) < 4.85 / state.verify.predict(5)  # the premise: 5 rows look cheap
    drafter, k = p.choose(1, batch_rows=3, batch_tokens=3.0)
    assert (drafter.name, k) == ("none", 0)
    # alone the same costs still decide by the measured sizes (the slope is a batch's floor)
    alone = _policy(state, context)
    assert alone.ngram is not None
    alone.ngram.begin(context)
    assert alone._seconds("ngram", 1) == pytest.approx(state.verify.predict(2) + state.overhead + state.ngram_cost)
