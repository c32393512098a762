"""Adaptive speculation: before each step, pick the drafter and γ that maximise expected
tokens per second, from what this engine has measured on this machine.

Expected tokens of a step drafting k tokens: 1 + Σ_{j=1..k} Π_{i<=j} r_i, where r_i is the
estimated conditional acceptance at position i (estimators.Acceptance). Prompt lookup is
tracked per matched suffix length (longer matches predict better); the estimate for one
length starts from what the other lengths showed, so every match informs the others.
Expected time: the target's verify of k+1 rows (estimators.BatchCost, measured per batch
size as a ratio to one row, so it holds on a GPU's flat curve and a CPU's steep one) + the
drafter's decode cost (estimators.DraftCost, one per drafter: its one-token calls, and its
batches — the prompt's prefill and the catch-up after steps that did not use it) + the
measured per-step overhead. Plain decoding (k = 0) is always a candidate.

Drafters. The policy knows them through the `Drafter` interface only: a drafter's
`decode_log` feeds its cost model, `pending(context)` says how much it must catch up before
drafting, `sequential` whether each further draft token costs one more call (chain drafting)
or the whole block comes from one call, and `prior_acceptance` seeds its estimate. Prompt
lookup (a `PromptLookupDrafter`) is the one kind treated apart: it drafts only where its
index matches, and its acceptance is tracked per matched suffix length.

Prompt lookup's shadow drafts. On a step that does not use prompt lookup but where its
index matches, the policy keeps the guesses and checks them against the tokens the step and
the next ones commit. A prompt-lookup draft carries no q, so a verify would accept each
guess with the probability that the target emits it there: the guesses the committed tokens
confirm are distributed as the drafts a verify would have accepted, at T = 0 and when
sampling. Its acceptance is therefore learned on every step with a match, at no cost, and
on a CPU whose verify batches cost about what short drafts save, it is not tried blind.
Guesses that come true are counted as their tokens come (the wrong ones are decided at
once; holding the right ones back until the whole guess is decided would keep the estimate
below the truth by the guesses in flight).

Caution with prompt lookup. It drafts only where that beats plain decoding even at the
pessimistic end of its estimate (estimators.LOWER_SDS posterior standard deviations down),
then the best option by the estimate itself. On recorded real text (tests/engine/replay_policy.py)
the drafts that lose are those chosen on an estimate resting on a few outcomes — carried over
from a request of another kind, or just risen on a short run of hits; with its evidence free,
waiting for a few more outcomes costs little. On a GPU's flat verify curve every draft passes
this test, so it changes nothing there.

Exploration. Estimates of the other drafters only change when they are used, so a drafter
whose prior looks worse than plain decoding would never be tried. The policy therefore makes *trials* of
a drafter that is not the best choice but could be at the optimistic end of its estimate
(UPPER_SDS standard deviations up): its option with the least expected cost over the best
choice (its regret), prompt lookup only where a match exists. Trials are paid from a budget
of EXPLORE_BUDGET of the measured time (each pays what it really lost), so exploring never
costs more than that share; a trial that did at least as well as expected is followed by
another at the next chance, one that did worse waits TRIAL_BACKOFF times longer. The debt
stops at MAX_DEBT_STEPS plain steps: a trial that ran while another process hogged the
machine must not use up the budget for thousands of steps. Prompt
lookup's trials bet on its cost alone (its acceptance is known from the shadow drafts): where
the verify cost of a size is LOADED times the lowest it ever had (measured while another
process loaded the machine) and a draft would pay at that lowest cost, the cheapest such
draft is made, to measure it again. The model drafter's trial also
pays its catch-up over the skipped tokens, so on a CPU it is tried early in a request or not
at all.

Cost models persist in the engine across requests (they describe the hardware);
acceptance estimates carry over with reduced weight so a new request adapts quickly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.engine.drafters import Drafter, NoDrafter, PromptLookupDrafter
from localspec.engine.estimators import PRIOR_WEIGHT, Acceptance, BatchCost, DraftCost, expected_from_rates
from localspec.types import SamplingParams

log = logging.getLogger(__name__)

EXPLORE_BUDGET = 0.02
"""Share of the generation's time that trials of drafters not (yet) worth using may cost."""
MAX_TRIAL_INTERVAL = 512
MAX_DEBT_STEPS = 3.0
"""The most the exploration budget can owe, in plain steps (see `observe`)."""
LOADED = 1.5
"""A verify batch size whose running cost ratio is this many times the lowest it had is
taken as measured under another load (prompt lookup's trials measure it again)."""
TRIAL_BACKOFF = 1.5
"""Growth of the wait between trials after one that did worse than expected."""
NGRAM_PRIOR = 0.5
"""Prior per-position acceptance of prompt lookup. It is tracked per matched suffix length n;
the estimate for one n starts from what the other lengths showed (each observation counted
once). Other drafters bring their own prior (`Drafter.prior_acceptance`)."""
NGRAM_KEYS = ("ngram2", "ngram3", "ngram4")
SHADOW_GUESSES = 4
"""Guesses kept of a prompt-lookup draft checked on a step that did not use it: a shadow is
decided within this many tokens, so the estimate follows the text with little lag (later
positions share one estimate: deeper guesses would add little)."""
FORGET_EVIDENCE = 1.0
FORGET_MARGIN = 0.3
"""Prompt lookup's acceptance carried over from earlier requests is forgotten, but for
FORGET_EVIDENCE steps' worth, once this request's own first drafts are accepted FORGET_MARGIN
less often than the estimate says: it depends on the text (90 % on a summary says little
about free writing), and a request of another kind should not draft deep until its own
failures outweigh many carried successes. A drafter model's acceptance is a property of the
pair more than of the text: it carries over in full."""


def _acceptance_table() -> dict[str, Acceptance]:
    return {name: Acceptance(NGRAM_PRIOR) for name in NGRAM_KEYS}


@dataclass
class PolicyState:
    """What the engine remembers between requests (one per sampling mode: greedy / sampled)."""

    verify: BatchCost = field(default_factory=BatchCost)
    drafts: dict[str, DraftCost] = field(default_factory=dict)
    """Decode cost model per drafter name (drafters with a decode cost of their own)."""
    ngram_cost: float = 0.0
    overhead: float = 0.0
    intervals: dict[str, int] = field(default_factory=dict)
    """Chances between trials per drafter (grows while trials keep losing)."""
    credit: float = 0.0
    """Seconds of regret trials may still spend: EXPLORE_BUDGET of every step's time, less
    what trials cost (down to one plain step in debt, so the first trials need no wait)."""
    acceptance: dict[str, Acceptance] = field(default_factory=_acceptance_table)

    def draft_cost(self, name: str) -> DraftCost:
        """The cost model of drafter `name` (created empty on first use)."""
        cost = self.drafts.get(name)
        if cost is None:  # not setdefault: it would build a DraftCost on every call
            cost = self.drafts[name] = DraftCost()
        return cost


@dataclass
class _Trials:
    """When a drafter that is not the best choice may be tried again."""

    base: int
    interval: int
    since: int = 0
    """Chances (steps where it could have drafted) since it last drafted."""
    pending: bool = False
    """A trial was made and its drafter has not been available since."""

    def judge(self, promising: bool) -> None:
        """After a trial: try again at the next chance if its drafts did at least as well
        as expected (the drafter is still in step with the text, so the next trial is the
        cheapest one), else wait TRIAL_BACKOFF times as long."""
        self.pending = True
        grown = math.ceil(max(self.base, self.interval) * TRIAL_BACKOFF)
        self.interval = 1 if promising else min(grown, MAX_TRIAL_INTERVAL)

    def settle(self, won: bool) -> None:
        """The first chance after a trial: back to the base pace if it made its drafter the best."""
        self.pending = False
        if won:
            self.interval = self.base


@dataclass(frozen=True)
class _Option:
    drafter: str
    """A drafter's name, or "none"."""
    k: int
    tokens: float
    """Expected tokens of the step."""
    seconds: float
    """Predicted seconds of the step."""
    extra: float = 0.0
    """Expected tokens of the other sequences verified in the same batch."""

    @property
    def rate(self) -> float:
        return (self.tokens + self.extra) / self.seconds if self.seconds > 0 else 0.0


class AdaptivePolicy:
    """Chooses (drafter, γ) per step to maximise expected tokens per second."""

    name = "adaptive"

    def __init__(
        self,
        drafters: Sequence[Drafter],
        gamma: int,
        params: SamplingParams,
        state: PolicyState | None = None,
        probe_every: int = 4,
    ) -> None:
        self.max_gamma = gamma
        self.none = NoDrafter()
        self.drafters: list[Drafter] = [d for d in drafters if d.name != "none"]
        lookups = [d for d in self.drafters if isinstance(d, PromptLookupDrafter)]
        self.ngram: PromptLookupDrafter | None = lookups[0] if lookups else None
        self.costed: dict[str, Drafter] = {d.name: d for d in self.drafters if not isinstance(d, PromptLookupDrafter)}
        """Drafters with a decode cost of their own (models, heads), by name."""
        self.state = state if state is not None else PolicyState()
        for key in NGRAM_KEYS:  # states saved before a key existed
            self.state.acceptance.setdefault(key, Acceptance(NGRAM_PRIOR))
        for name, d in self.costed.items():
            self.state.acceptance.setdefault(name, Acceptance(d.prior_acceptance))
        self.acceptance = {k: v.carried() for k, v in self.state.acceptance.items()}
        """This request's acceptance estimates (each sequence of a batch has its own); the
        state keeps the latest, for the next request to carry over."""
        self.state.acceptance = self.acceptance
        iv = self.state.intervals
        self._trials = {name: _Trials(probe_every, max(probe_every, iv.get(name, 0))) for name in self.costed}
        if self.ngram is not None:
            self._trials[self.ngram.name] = _Trials(1, max(1, iv.get(self.ngram.name, 0)))
        self._context: Sequence[int] = ()
        self._steps = 0
        self._trial: tuple[str, float, float, float, float] | None = None
        """(drafter, expected accepted drafts, the best choice's tokens/s, expected regret
        in seconds, the batch's other expected tokens) of a trial in flight."""
        self._batch = (0, 0.0)
        self._shadows: list[tuple[str, int, tuple[int, ...], int]] = []
        """Prompt lookup's drafts on steps that did not use it, waiting for the tokens they
        guessed: (acceptance key, context position of the first guess, the guesses, the
        guesses already counted as accepted)."""
        self.expected_tokens = 1.0
        """Expected tokens of the step last chosen (what a batch driver tells the others)."""
        self.split_batches = False
        """The target splits a batch whose sequences have unequal rows into several ubatches
        (llama.cpp's non-unified KV cache, exact numerics): a sequence's drafts then cost a
        call of their own, not just more rows in the shared one."""
        """(rows, expected tokens) of the other sequences in the next verify batch."""

    def bind(self, context: Sequence[int]) -> None:
        """The committed context the policy may read (n-gram matches); called after the
        drafters began the request, so the model drafter's prompt prefill is measured too
        (the only large batch it decodes before its first catch-up)."""
        self._context = context
        for name, d in self.costed.items():
            cost = self.state.draft_cost(name)
            for n, sec in d.decode_log:
                cost.observe(n, sec)
            d.decode_log.clear()

    @staticmethod
    def _ngram_key(n: int) -> str:
        return f"ngram{min(max(n, 2), 4)}"

    # -- predictions -------------------------------------------------------------------
    def _seconds(self, drafter: str, k: int, low: bool = False) -> float:
        """Predicted seconds of a step drafting k tokens (`low`: at the lowest verify costs
        ever measured, see `BatchCost.ratio`)."""
        s = self.state
        base = self._batch[0]
        if base and k and self.split_batches:
            # llama.cpp evaluates rows beyond the other sequences' in a ubatch of their own
            t = s.verify.predict(base + 1, low) + s.verify.predict(k, low) + s.overhead
        else:
            t = s.verify.predict(base + k + 1, low) + s.overhead
            if base and k and not low:
                # in a batch a draft's rows are priced at least at the slope per row through
                # the sizes around the batch, not by the next size's own running ratio alone
                # (see `BatchCost.row_slope`): drafts chosen where that one looked cheap lost
                # 5-12 % of their steps in four-sequence batches on a 2-core CPU
                rows = base + 1
                slope = s.verify.row_slope(max(2, rows - self.max_gamma), rows + self.max_gamma)
                t = max(t, s.verify.predict(rows) + k * slope * s.verify.t1 + s.overhead)
        d = self.costed.get(drafter)
        if d is not None and k > 0:
            cost = s.draft_cost(drafter)
            t += cost.predict(max(1, d.pending(self._context)))
            if d.sequential:
                t += (k - 1) * cost.predict(1)
        elif self.ngram is not None and drafter == self.ngram.name and k > 0:
            t += s.ngram_cost
        return t

    def _loaded(self, k: int) -> bool:
        """True when the verify batch of a k-token draft now costs LOADED times the least it
        ever did: likely measured while another process loaded the machine."""
        rows = self._batch[0] + k + 1
        verify = self.state.verify
        return verify.ratio(rows) > LOADED * verify.ratio(rows, low=True)

    def _rates(self, drafter: str, k: int, match_len: int = 0, upper: bool = False,
               lower: bool = False) -> list[float]:
        acc = self.acceptance
        if self.ngram is not None and drafter == self.ngram.name:
            key = self._ngram_key(match_len)
            others = [acc[o] for o in NGRAM_KEYS if o != key]
            a = sum(o.accepted[0] for o in others if o.accepted)
            r = sum(o.evidence for o in others)
            prior: float | None = (a + PRIOR_WEIGHT * acc[key].prior) / (r + PRIOR_WEIGHT)
        else:
            key, prior = drafter, None
        est = acc[key]
        return est.upper(k, prior) if upper else est.lower(k, prior) if lower else est.rates(k, prior)

    def _options(self, drafter: str, k_max: int, match_len: int = 0, upper: bool = False,
                 low: bool = False, lower: bool = False) -> list[_Option]:
        """Options drafting 1..k_max tokens with `drafter` (`upper`/`lower`: at optimistic /
        pessimistic acceptance; `low`: at the lowest verify costs measured)."""
        rates = self._rates(drafter, k_max, match_len, upper, lower)
        extra = self._batch[1]
        return [_Option(drafter, k, expected_from_rates(rates[:k]), self._seconds(drafter, k, low), extra)
                for k in range(1, k_max + 1)]

    @staticmethod
    def _regret(option: _Option, best: _Option) -> float:
        """Expected seconds lost by taking `option` instead of `best` (>= 0)."""
        return max(0.0, option.seconds - (option.tokens + option.extra) / best.rate) if best.rate > 0 else option.seconds

    # -- the choice --------------------------------------------------------------------
    def choose(self, k_cap: int, *, batch_rows: int = 0, batch_tokens: float = 0.0) -> tuple[Drafter, int]:
        """The best (drafter, k) by expected tokens per second; k <= k_cap. In a batch,
        `batch_rows` and `batch_tokens` are the other sequences' verify rows and expected
        tokens: the choice maximises the whole batch's tokens per second, so drafting
        shrinks as the batch makes each verify row dearer (a CPU's steep cost per row) and
        grows back when the batch empties."""
        k_cap = min(k_cap, self.max_gamma)
        self._batch = (max(0, batch_rows), max(0.0, batch_tokens))
        self.expected_tokens = 1.0
        self._steps += 1
        s = self.state
        self._resolve_shadows()
        if k_cap <= 0 or not s.verify.known:
            return self._pick("none", 0)
        if self._batch[0] == 0 and s.verify.t1_stale:  # re-measure plain decoding's own cost
            return self._pick("none", 0)
        in_batch = self._batch[0] > 0
        unknown = [name for name in self.costed if not s.draft_cost(name).known]
        if unknown and not in_batch:
            return self._pick(unknown[0], min(2, k_cap))  # measure each drafter once, alone
        lookup = self.ngram.name if self.ngram is not None else ""
        cont, n = self.ngram.match(self._context, k_cap) if self.ngram is not None and self._context else ((), 0)
        options = [_Option("none", 0, 1.0, self._seconds("none", 0), self._batch[1])]
        for name in self.costed:
            if name not in unknown:
                options += self._options(name, k_cap)
        candidates = options
        if cont:
            looks = self._options(lookup, len(cont), n)
            options = options + looks
            # prompt lookup drafts only where that beats plain decoding even at the pessimistic
            # end of its estimate: its evidence is free (shadow drafts), so waiting for more
            # costs little, while on a CPU a wrong draft of a few tokens costs a few one-row
            # steps and a draft chosen on an estimate that just rose is most often the wrong one
            plain = options[0].rate
            safe = {o.k for o in self._options(lookup, len(cont), n, lower=True) if o.rate >= plain}
            candidates = options[: -len(looks)] + [o for o in looks if o.k in safe]
        best = max(candidates, key=lambda o: o.rate)
        available = {name: name not in unknown for name in self.costed}
        if self.ngram is not None:
            available[lookup] = bool(cont)
        for name, tr in self._trials.items():
            if not available[name]:
                continue
            if tr.pending:
                tr.settle(best.drafter == name)
                s.intervals[name] = tr.interval
            tr.since = 0 if best.drafter == name else tr.since + 1
        choice, why = best, "best"
        # no trials in a batch that splits: a sequence's drafts would cost a call of their
        # own, which every sequence of the batch waits for; they resume when it is alone
        explore = not (in_batch and self.split_batches)
        # prompt lookup first: its trials cost only the larger verify batch
        for name in sorted(self._trials, key=lambda nm: nm != lookup) if explore else ():
            tr = self._trials[name]
            if best.drafter == name or not available[name] or tr.since < tr.interval:
                continue
            if name == lookup:
                # its acceptance is known (shadow drafts): the hope is in a verify cost that
                # was measured high (another process loaded the machine) and is lower now
                hopes = [o for o in self._options(name, len(cont), n, low=True) if self._loaded(o.k)]
            else:
                hopes = self._options(name, k_cap, upper=True)
            promising = {o.k for o in hopes if o.rate > best.rate}
            if not promising:
                continue  # even at the optimistic end of its estimate it would not be chosen
            trial = min((o for o in options if o.drafter == name and (name != lookup or o.k in promising)),
                        key=lambda o: self._regret(o, best))
            cost = self._regret(trial, best)
            # alone, the first trials may go one plain step into debt; in a batch a trial's
            # loss is every sequence's wait, so it must be paid for in full
            if cost <= s.credit + (0.0 if in_batch else s.verify.predict(1)):
                tr.since = 0
                self._trial = (name, trial.tokens - 1.0, best.rate, cost, trial.extra)
                choice, why = trial, "trial"
                break
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "step %d %s %s k=%d E=%.2f T=%.1fms (best %s k=%d %.1f tok/s) match=%d credit=%.1fms",
                self._steps, why, choice.drafter, choice.k, choice.tokens, choice.seconds * 1e3,
                best.drafter, best.k, best.rate, n, s.credit * 1e3,
            )
        self.expected_tokens = choice.tokens
        if cont and choice.drafter != lookup:
            self._shadows.append((self._ngram_key(n), len(self._context), tuple(cont[:SHADOW_GUESSES]), 0))
        return self._pick(choice.drafter, choice.k)

    def _resolve_shadows(self) -> None:
        """Learn from prompt lookup's shadow drafts as the committed tokens decide them. A
        draft carries no q, so the verify accepts its i-th token with the probability
        p_i(d_i) that the target itself emits d_i there (one-hot rule; at T = 0, when d_i is
        the argmax): the number of guesses the committed tokens match has the distribution of
        the number a verify would have accepted. Prompt lookup's acceptance is thus learned on
        every step with a match, for free, and it drafts only when that pays at this machine's
        measured verify cost (its trials bet on the cost alone).

        A shadow whose guesses are right so far counts those positions at once (reached and
        accepted) and the rest when decided: were it held back whole, the right guesses would
        be counted a step or more after the wrong ones, and the estimate would lag below the
        truth by the shadows in flight."""
        if not self._shadows:
            return
        context, pending = self._context, []
        for key, start, guesses, counted in self._shadows:
            seen = context[start : start + len(guesses)]
            hits = next((i for i, (g, t) in enumerate(zip(guesses, seen)) if g != t), len(seen))
            if hits == len(seen) < len(guesses):  # every guess so far right, more to see
                if hits > counted:
                    self._learn(key, len(guesses), hits, counted, final=False)
                pending.append((key, start, guesses, hits))
            else:
                self._learn(key, len(guesses), hits, counted)
        self._shadows = pending

    def _pick(self, name: str, k: int) -> tuple[Drafter, int]:
        if name in self.costed:
            return self.costed[name], k
        if self.ngram is not None and name == self.ngram.name:
            return self.ngram, k
        return self.none, 0

    # -- learning ----------------------------------------------------------------------
    def observe(self, drafter: str, k: int, num_accepted: int, t_draft_s: float, t_verify_s: float, *,
                batch_rows: int | None = None, batch: int = 1) -> None:
        """Update costs and acceptance from the finished step. `batch_rows`: the rows of the
        verify call when it held other sequences too (0: another sequence reports its cost);
        `batch`: the sequences that shared it (they share the state, and the step's time)."""
        s = self.state
        seconds = t_draft_s + t_verify_s + s.overhead
        s.credit += EXPLORE_BUDGET * seconds / max(1, batch)
        if self._trial is not None:
            # the trial pays what it really lost against the best choice's rate, so the
            # budget holds even when the estimates that chose it were too hopeful
            name, expected, best_rate, regret, extra = self._trial
            self._trial = None
            lost = max(0.0, seconds - (num_accepted + 1 + extra) / best_rate) if best_rate > 0 else seconds
            # the debt stops at a few plain steps: a larger loss is the machine's load (another
            # process), not the trial's, and charging it would stop exploration for good
            s.credit = max(s.credit - lost, -MAX_DEBT_STEPS * s.verify.predict(1))
            self._trials[name].judge(k > 0 and num_accepted >= expected)
            s.intervals[name] = self._trials[name].interval
        if batch_rows is None:
            s.verify.observe(k + 1, t_verify_s)
        elif batch_rows > 0:
            s.verify.observe(batch_rows, t_verify_s)
        d = self.costed.get(drafter)
        if d is not None:
            cost = s.draft_cost(drafter)
            for n, sec in d.decode_log:
                cost.observe(n, sec)
        is_lookup = self.ngram is not None and drafter == self.ngram.name
        if is_lookup:
            s.ngram_cost = 0.8 * s.ngram_cost + 0.2 * t_draft_s if s.ngram_cost else t_draft_s
        key = self._ngram_key(self.ngram.last_match) if is_lookup and self.ngram is not None else drafter
        if k > 0:
            self._learn(key, k, num_accepted)

    def _learn(self, key: str, k: int, num_accepted: int, counted: int = 0, final: bool = True) -> None:
        """A draft of k tokens under acceptance `key` had its first `num_accepted` accepted
        (`counted`: of them, those already learned; `final=False`: more may follow)."""
        if key in self.acceptance:
            acc = self.acceptance[key]
            acc.observe(k, num_accepted, counted=counted, final=final)
            if final and key in NGRAM_KEYS and acc.forget_carried(FORGET_EVIDENCE, FORGET_MARGIN):
                log.debug("%s: this request's drafts contradict the carried estimate, forgot it", key)
                for other in NGRAM_KEYS:  # the matched lengths share the text
                    self.acceptance[other].forget_carried(FORGET_EVIDENCE, FORGET_MARGIN, force=True)
            self.state.acceptance = self.acceptance

    def observe_overhead(self, seconds: float) -> None:
        """Per-step time outside draft and verify (acceptance, detokenizing, bookkeeping)."""
        s = self.state
        s.overhead = 0.9 * s.overhead + 0.1 * seconds if s.overhead else seconds
