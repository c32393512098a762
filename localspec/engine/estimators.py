"""What the adaptive policy measures: costs of model calls and acceptance per draft position.

- `LinearCost`: seconds = a + s·(n − 1), a decayed least-squares fit; for the drafter model,
  whose catch-up batches after steps without it can be of any length.
- `BatchCost`: the target's verify cost per batch size, as a ratio to one row times a running
  one-row time. The ratio is the hardware's shape (≈ 1 on a GPU; on a CPU a jump from one row
  to two, then a smaller step per row) and is stable; the one-row time follows the machine's
  load. Unmeasured sizes are interpolated between measured ones, and beyond the largest one
  extrapolated along the last measured segment (on a concave CPU curve that overestimates,
  so longer drafts are reached one measured size at a time, never by a guess; from one row,
  only the default slope per row, not the CPU's jump from one row to two). A size not
  measured in the last STALE_CALLS calls falls back to the lowest ratio it ever had, so
  costs measured while another process loaded the machine expire instead of keeping
  speculation off for good (and a steep CPU's known costs are not forgotten for a guess).
- `Acceptance`: decayed per-position counts on a Beta prior; the first position and the
  later ones (pooled) are estimated apart, the later ones shrinking toward the first.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

DECAY = 0.97
"""Per-observation decay of acceptance counts (≈ the last 30 steps matter)."""
CARRY_OVER = 0.3
"""Weight kept from earlier requests' acceptance counts."""
PRIOR_WEIGHT = 2.0
"""Pseudo-observations behind each prior."""
UPPER_SDS = 2.0
"""Standard deviations above the estimate that `Acceptance.upper` reports."""
LOWER_SDS = 0.5
"""Standard deviations below the estimate that `Acceptance.lower` reports (the adaptive
policy's caution with prompt lookup)."""
MIN_OWN = 1
STALE_CALLS = 200
"""Target calls after which a batch size's running ratio gives way to the lowest one it ever
had, unless measured again: a ratio measured while another process loaded the machine must
not keep speculation off for good."""
T1_REFRESH_CALLS = 64
"""A one-row time older than this many calls is stale: the policy takes a plain step to
measure it again (a policy that always drafts would otherwise compare every draft against
the one-row time of long ago, e.g. of the first calls, slowed by weights still paging in)."""


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
class DraftCost:
    """The drafter model's decode seconds: one-token calls (its drafts) apart from batches
    (catch-up over skipped tokens, the prompt's prefill), which cost far less per token."""

    single: float = 0.0
    """Running seconds of a one-token call (0 until measured)."""
    batch: LinearCost = field(default_factory=lambda: LinearCost(decay=0.9))

    @property
    def known(self) -> bool:
        """True once a one-token call was measured."""
        return self.single > 0

    def observe(self, n: int, seconds: float) -> None:
        """Add one measured call of n tokens."""
        if n <= 1:
            self.single = 0.8 * self.single + 0.2 * seconds if self.single else seconds
        else:
            self.batch.observe(n, seconds)

    def predict(self, n: int) -> float:
        """Seconds for a call of n tokens: measured batches, or the line from one token to
        the one batch size seen, or a cautious 0.25·single per extra token."""
        if n <= 1 or not self.batch.known:
            return self.single * (1.0 + 0.25 * max(0, n - 1))
        b = self.batch
        var = b.sxx / b.sw - (b.sx / b.sw) ** 2
        if var > 1e-6:
            return max(self.single, b.predict(n))
        x0, y0 = b.sx / b.sw + 1.0, b.sy / b.sw  # one size seen: (n0, t0)
        slope = max(0.0, (y0 - self.single) / (x0 - 1.0)) if self.single else 0.0
        return max(self.single, y0 + slope * (n - x0))


@dataclass
class BatchCost:
    """Seconds of a target call of n rows = t1 · ratio(n), both learned from measured calls."""

    t1_decay: float = 0.9
    """Per-observation decay of the one-row time (follows the machine's load)."""
    ratio_decay: float = 0.8
    """Per-observation decay of one size's ratio."""
    default_slope: float = 0.25
    """Ratio added per row while only one batch size has been measured."""
    t1: float = 0.0
    """Running one-row seconds (0 until measured)."""
    _w: dict[int, float] = field(default_factory=dict)
    _r: dict[int, float] = field(default_factory=dict)
    _pending: list[tuple[int, float]] = field(default_factory=list)
    """Calls of n > 1 rows seen before any one-row call (no t1 to divide by yet)."""
    _calls: int = 0
    _seen: dict[int, int] = field(default_factory=dict)
    """Batch size -> `_calls` when it was last measured."""
    _t1_call: int = 0
    """`_calls` at the last one-row measurement."""
    _low: dict[int, float] = field(default_factory=dict)
    """Batch size -> the lowest running ratio it ever had (never dropped): what it costs when
    nothing else loads the machine, for deciding whether to measure it again."""
    _memo: dict[tuple[object, ...], float] = field(default_factory=dict, repr=False, compare=False)
    """`ratio` and `row_slope` answers since the last call was observed (`_memo_calls`): the policy asks for
    the same sizes many times a step, and nothing they depend on changes between calls."""
    _memo_calls: int = field(default=-1, repr=False, compare=False)

    @property
    def t1_stale(self) -> bool:
        """True when the one-row time was measured, but not in the last T1_REFRESH_CALLS calls."""
        return self.t1 > 0 and self._calls - self._t1_call > T1_REFRESH_CALLS

    @property
    def known(self) -> bool:
        """True once anything was measured."""
        return self.t1 > 0 or bool(self._pending)

    def observe(self, n: int, seconds: float) -> None:
        """Add one measured call of n rows."""
        self._calls += 1
        if n <= 1:
            self._t1_call = self._calls
            self.t1 = self.t1_decay * self.t1 + (1 - self.t1_decay) * seconds if self.t1 else seconds
            pending, self._pending = self._pending, []
            for m, sec in pending:
                self.observe(m, sec)
            return
        if self.t1 <= 0:
            self._pending.append((n, seconds))
            return
        d = self.ratio_decay
        w = self._w.get(n, 0.0) if self._calls - self._seen.get(n, 0) <= STALE_CALLS else 0.0  # stale: start over
        self._seen[n] = self._calls
        self._w[n] = w * d + 1.0
        self._r[n] = (self._r.get(n, 0.0) * w * d + seconds / self.t1) / self._w[n]
        self._low[n] = min(self._low.get(n, math.inf), self._r[n])

    def ratio(self, n: int, low: bool = False) -> float:
        """b = seconds(n rows) / seconds(1 row), measured (within the last STALE_CALLS
        calls), interpolated or extrapolated; `low`: from the lowest ratio each size ever
        had instead (what it may cost again once measured anew)."""
        if n <= 1:
            return 1.0
        return self._memoized(("ratio", n, low), lambda: self._ratio(n, low))

    def _memoized(self, key: tuple[object, ...], compute: Callable[[], float]) -> float:
        """`compute()`, remembered until the next observed call."""
        if self._memo_calls != self._calls:
            self._memo.clear()
            self._memo_calls = self._calls
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = compute()
        return got

    def _ratio(self, n: int, low: bool) -> float:
        # a batch never costs less than a smaller one (noise and load changes can make a
        # rarely measured size look cheap): use the running maximum over sizes
        # a ratio not measured in the last STALE_CALLS calls may have been taken under another
        # load: the size's lowest ratio stands in for it until it is measured again
        lows = self._lows()
        values = {m: lows[m] if low or self._calls - self._seen.get(m, 0) > STALE_CALLS else r
                  for m, r in sorted(self._r.items())}
        points = [(1, 1.0)]
        for m, r in values.items():
            points.append((m, max(r, points[-1][1])))
        exact = [y for x, y in points if x == n]
        if exact:
            return exact[0]
        lower = max(p for p in points if p[0] < n)
        upper = [p for p in points if p[0] > n]
        if upper:
            (x0, y0), (x1, y1) = lower, upper[0]
            return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
        if len(points) == 1:
            return 1.0 + self.default_slope * (n - 1)
        (x0, y0), (x1, y1) = points[-2], points[-1]
        slope = max(0.0, (y1 - y0) / (x1 - x0))
        if x0 == 1:  # from one row: a CPU's jump to two rows, not its slope per row after it
            slope = min(slope, self.default_slope)
        return y1 + slope * (n - x1)

    def _lows(self) -> dict[int, float]:
        """Each size's lowest ratio, at most any larger size's (a size first measured under
        load has a high lowest ratio; a larger size measured without load bounds it)."""
        out: dict[int, float] = {}
        bound = math.inf
        for m in sorted(self._low, reverse=True):
            bound = min(bound, self._low[m])
            out[m] = bound
        return out

    def row_slope(self, lo: int, hi: int) -> float:
        """Ratio added per row around sizes lo..hi: the least-squares slope through the
        running ratios of the sizes measured there (each weighted by its evidence), 0 with
        fewer than two sizes. One size's running ratio carries the noise of a few calls (on a
        2-core CPU a 4-row call varies by ±30 % under a load of threads), and a batch policy
        that drafts where the next size *looks* cheap keeps hitting the sizes whose noise
        went low; the slope through all the neighbouring sizes is the steadier price of a row."""
        return self._memoized(("slope", lo, hi), lambda: self._row_slope(lo, hi))

    def _row_slope(self, lo: int, hi: int) -> float:
        pts = [(m, r, self._w.get(m, 0.0)) for m, r in self._r.items()
               if lo <= m <= hi and self._calls - self._seen.get(m, 0) <= STALE_CALLS]
        total = sum(w for _, _, w in pts)
        if len(pts) < 2 or total <= 0:
            return 0.0
        mx = sum(m * w for m, _, w in pts) / total
        my = sum(r * w for _, r, w in pts) / total
        var = sum(w * (m - mx) ** 2 for m, _, w in pts)
        return max(0.0, sum(w * (m - mx) * (r - my) for m, r, w in pts) / var) if var > 0 else 0.0

    def predict(self, n: int, low: bool = False) -> float:
        """Seconds for a call of n rows (0 before any measurement); `low`: see `ratio`."""
        if self.t1 <= 0:
            if not self._pending:
                return 0.0
            m, sec = self._pending[-1]  # only batches seen: assume the default shape
            return sec / (1.0 + self.default_slope * (m - 1)) * self.ratio(n)
        return self.t1 * self.ratio(n, low)


@dataclass
class Acceptance:
    """Decayed per-position counts: reached[i] steps tested position i, accepted[i] passed."""

    prior: float
    reached: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)
    own: tuple[int, int] = (0, 0)
    """(steps, first drafts accepted) of this request alone, undecayed (`forget_carried`)."""

    def observe(self, k: int, num_accepted: int, *, counted: int = 0, final: bool = True) -> None:
        """A step drafted k tokens and the first num_accepted passed. In parts: `final=False`
        counts positions < num_accepted as reached and accepted (the outcome beyond is not
        known yet); a later call with `counted` = that number adds the rest of the outcome."""
        if counted == 0:
            for lst in (self.reached, self.accepted):
                lst[:] = [v * DECAY for v in lst]
                if len(lst) < k:
                    lst.extend([0.0] * (k - len(lst)))
        if final and k > 0:
            self.own = (self.own[0] + 1, self.own[1] + (num_accepted > 0))
        for i in range(counted, min(k, num_accepted + 1) if final else num_accepted):
            self.reached[i] += 1.0
        for i in range(counted, num_accepted):
            self.accepted[i] += 1.0

    @property
    def evidence(self) -> float:
        """Decayed number of steps behind the estimate of position 0."""
        return self.reached[0] if self.reached else 0.0

    def rate(self, i: int, prior: float | None = None) -> float:
        """Estimated conditional acceptance at position i (posterior mean)."""
        return self.rates(i + 1, prior)[i]

    def rates(self, n: int, prior: float | None = None) -> list[float]:
        """Estimated conditional acceptance at positions 0..n-1.

        Two numbers: the first position, shrunk toward the prior (`prior` overrides the
        fixed one), and every later position pooled, shrunk toward the first. Per-position
        estimates would each rest on a few decayed counts and make the expected tokens of
        neighbouring draft lengths jump; pooling keeps what matters: after a hit the next
        token is accepted at least as often (a draft that is right once is in an easy
        stretch), and a policy that mostly drafts one token still learns that longer
        drafts pay, because the later positions start from the first one's estimate.
        """
        return self._estimate(n, prior, 0.0)

    def upper(self, n: int, prior: float | None = None) -> list[float]:
        """Like `rates`, each estimate raised by UPPER_SDS posterior standard deviations: what
        the drafter might still be worth, given how little has been seen."""
        return self._estimate(n, prior, UPPER_SDS)

    def lower(self, n: int, prior: float | None = None) -> list[float]:
        """Like `rates`, each estimate lowered by LOWER_SDS posterior standard deviations: what
        the drafter is worth at the pessimistic end of what has been seen."""
        return self._estimate(n, prior, -LOWER_SDS)

    def _estimate(self, n: int, prior: float | None, sds: float) -> list[float]:
        p = self.prior if prior is None else prior
        r0 = self.reached[0] if self.reached else 0.0
        a0 = self.accepted[0] if self.accepted else 0.0
        first = _raised((a0 + PRIOR_WEIGHT * p) / (r0 + PRIOR_WEIGHT), r0, sds)
        if n <= 1:
            return [first][:n]
        r1 = sum(self.reached[1:])
        later = _raised((sum(self.accepted[1:]) + PRIOR_WEIGHT * first) / (r1 + PRIOR_WEIGHT), r1, sds)
        return [first] + [later] * (n - 1)

    def expected_tokens(self, k: int, prior: float | None = None) -> float:
        """1 + expected accepted drafts out of k."""
        return expected_from_rates(self.rates(k, prior))

    def carried(self) -> Acceptance:
        """A copy with reduced weight, for the next request."""
        return Acceptance(self.prior, [v * CARRY_OVER for v in self.reached], [v * CARRY_OVER for v in self.accepted])

    def forget_carried(self, max_evidence: float, margin: float, *, force: bool = False) -> bool:
        """When this request's own first-position outcomes fall `margin` below the estimate
        (or `force`), keep at most `max_evidence` steps' worth of what was carried over: the
        text is of another kind than the last request's. True when it forgot."""
        n, hits = self.own
        r0 = self.reached[0] if self.reached else 0.0
        if r0 <= max_evidence + n or not (force or (n >= MIN_OWN and hits / n < self.rate(0) - margin)):
            return False
        w = (max_evidence + n) / r0
        self.reached[:] = [v * w for v in self.reached]
        self.accepted[:] = [v * w for v in self.accepted]
        return True


def _raised(mean: float, reached: float, sds: float) -> float:
    """`mean` plus `sds` (< 0: minus) standard deviations of its Beta posterior, in [0, 1]."""
    if sds == 0:
        return mean
    return min(1.0, max(0.0, mean + sds * math.sqrt(mean * (1.0 - mean) / (reached + PRIOR_WEIGHT + 1.0))))


def expected_from_rates(rates: list[float]) -> float:
    """1 + Σ_j Π_{i<=j} r_i: expected tokens of a step drafting len(rates) tokens."""
    total, run = 1.0, 1.0
    for r in rates:
        run *= r
        total += run
    return total
