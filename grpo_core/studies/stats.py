"""The statistics of a study report: intervals over seeds, paired differences, verdicts.

The unit of replication is the training seed. A cell's accuracy on a set of questions is the
mean over those questions of each question's avg@k. A difference between two variants is
paired by seed and question: for each seed both were evaluated with the same eval seed on the
same questions, so per seed d_s = mean over the questions both have of (a_q - b_q); the
interval is Student's t over the seeds' d_s (scipy.stats), n - 1 degrees of freedom. With
one seed there is no interval and every verdict is inconclusive. A verdict (`check_outcome`)
says what the interval rules in or out against the claim's smallest effect of interest.

Three seeds estimate their own spread poorly. Two rules keep an interval honest at three:
- a claim with several checks, any one of which can decide it, widens each check's interval
  for multiplicity (`bonferroni`: confidence 1 - 0.05 / m for m checks);
- where the spread between seeds is below the evaluation's own noise in a seed's value (k
  samples per question), which it contains, the interval uses that noise instead (`sd_floor`
  of `t_interval`), and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
POWER = 0.8  # of "detectable" and of the seeds that would decide a check


def bonferroni(checks: int, confidence: float = CONFIDENCE) -> float:
    """The confidence of each of `checks` intervals whose family errs with at most
    1 - `confidence` (Bonferroni): 1 - (1 - confidence) / checks. 3 checks: 0.9833."""
    if checks < 1:
        raise ValueError(f"a claim has at least one check, got {checks}")
    return 1.0 - (1.0 - confidence) / checks


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float  # nan with fewer than 2 values
    hi: float
    n: int
    confidence: float = CONFIDENCE
    seed_sd: float = math.nan  # the sd between the values; nan: read it from the width
    floored: bool = False  # the width uses `t_interval`'s sd_floor, above the values' sd

    def fmt(self, scale: float = 100.0, signed: bool = False) -> str:
        sign = "+" if signed else ""
        if math.isnan(self.lo):
            return f"{self.mean * scale:{sign}.1f} (n={self.n})"
        lo, hi = self.lo * scale, self.hi * scale
        return f"{self.mean * scale:{sign}.1f} [{lo:{sign}.1f}, {hi:{sign}.1f}]"


def t_interval(
    values: list[float] | np.ndarray,
    confidence: float = CONFIDENCE,
    sd_floor: float = math.nan,
) -> Interval:
    """Mean of `values` and its Student-t interval (scipy.stats.t, df = n - 1), at
    `confidence`. With `sd_floor` above the values' sd (the evaluation's own noise in each
    value, which the spread between them contains), the interval's sd is `sd_floor`:
    mean +- t * sd_floor / sqrt(n), marked `floored`."""
    x = np.asarray(values, dtype=float)
    n = int(x.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, confidence)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n, confidence)
    sd = float(x.std(ddof=1))
    floored = sd_floor > sd  # False for a nan floor
    scale = (sd_floor if floored else sd) / math.sqrt(n)
    if scale == 0.0:
        return Interval(mean, mean, mean, n, confidence, sd)
    lo, hi = stats.t.interval(confidence, n - 1, loc=mean, scale=scale)
    return Interval(mean, float(lo), float(hi), n, confidence, sd, floored)


def seed_means(
    acc: dict[int, dict[str, float]], questions: set[str] | None = None
) -> dict[int, float]:
    """Per seed, the mean accuracy over its questions (or over `questions` among them)."""
    out = {}
    for seed, by_q in acc.items():
        qs = [q for q in by_q if questions is None or q in questions]
        if qs:
            out[seed] = float(np.mean([by_q[q] for q in qs]))
    return out


def paired_differences(
    a: dict[int, dict[str, float]],
    b: dict[int, dict[str, float]],
    questions: set[str] | None = None,
) -> dict[int, float]:
    """Per seed both have: the mean over the questions both have (and in `questions`, if
    given) of a - b. `a`, `b`: seed -> question id -> accuracy."""
    out = {}
    for seed in sorted(set(a) & set(b)):
        qs = set(a[seed]) & set(b[seed])
        if questions is not None:
            qs &= questions
        if qs:
            # sorted: one summation order whatever PYTHONHASHSEED orders the set by
            out[seed] = float(np.mean([a[seed][q] - b[seed][q] for q in sorted(qs)]))
    return out


def paired_interval(
    a: dict[int, dict[str, float]],
    b: dict[int, dict[str, float]],
    questions: set[str] | None = None,
    confidence: float = CONFIDENCE,
    sd_floor: float = math.nan,
) -> Interval:
    """The mean paired difference a - b and its t interval over seeds (`t_interval`)."""
    diffs = list(paired_differences(a, b, questions).values())
    return t_interval(diffs, confidence, sd_floor)


REPRODUCED = "reproduced"
NO_EFFECT = "no effect"
CONTRADICTED = "contradicted"
INCONCLUSIVE = "inconclusive"
NOT_TESTABLE = "not testable here"
EXPECTS = ("better", "worse", "different", "equal")
MAX_SEEDS = 1000  # seeds_to_decide gives up beyond this


@dataclass(frozen=True)
class Outcome:
    """A check's or a claim's verdict, why where it needs saying, and for an inconclusive
    check the seeds that would decide it at the observed mean and spread."""

    verdict: str
    note: str = ""
    seeds_to_decide: int | None = None

    def __str__(self) -> str:
        return self.verdict + (f" ({self.note})" if self.note else "")


def _t(confidence: float, df: int) -> float:
    return float(stats.t.ppf(0.5 + confidence / 2, df))


def width_sd(interval: Interval) -> float:
    """The sd behind the interval's width: its half width / t(confidence, n - 1) * sqrt(n)
    (the seeds' sd, or the floor that replaced it); nan with fewer than 2 seeds."""
    if interval.n < 2 or math.isnan(interval.lo):
        return math.nan
    return (
        (interval.hi - interval.mean)
        / _t(interval.confidence, interval.n - 1)
        * math.sqrt(interval.n)
    )


def seed_spread(interval: Interval) -> float:
    """The spread between seeds: the sd of the per-seed values (read from the width when the
    interval does not record it); nan with fewer than 2 seeds."""
    if not math.isnan(interval.seed_sd):
        return interval.seed_sd
    return width_sd(interval)


def detectable_effect(interval: Interval, power: float = POWER) -> float:
    """The smallest true difference that `interval.n` seeds detect (the interval, at its
    confidence, excludes 0) with probability `power`, at the sd behind its width:
    (t_{conf, n-1} + t_{power, n-1}) * sd / sqrt(n). nan with fewer than 2 seeds."""
    sd = width_sd(interval)
    if math.isnan(sd):
        return math.nan
    df = interval.n - 1
    t = _t(interval.confidence, df) + stats.t.ppf(power, df)
    return float(t * sd / math.sqrt(interval.n))


def seeds_to_decide(
    interval: Interval, expect: str, effect: float, power: float = POWER
) -> int | None:
    """The fewest seeds that would give a verdict other than inconclusive with probability
    `power` (80%), were the true difference the observed mean and the sd the one behind the
    width; None beyond MAX_SEEDS or without a spread. With se = sd / sqrt(n), the estimate
    lands a distance (t_{conf, n-1} + t_{power, n-1}) * se short of a bound no more often than
    1 - power, so that distance must be below h*: for better and worse (m the mean in the
    claimed direction, E the smallest effect of interest) max(m, E - m), since lo > 0
    reproduces and hi < E contradicts; for different max(|m|, E - |m|); for equal |E - |m||.
    At power 0.5 the t_power term is 0: the half width alone, the seeds that decide it about
    half the time."""
    sd = width_sd(interval)
    if math.isnan(sd) or sd <= 0:
        return None
    m = interval.mean * (-1 if expect == "worse" else 1)
    if expect in ("better", "worse"):
        target = max(m, effect - m)
    elif expect == "different":
        target = max(abs(m), effect - abs(m))
    else:
        target = abs(effect - abs(m))
    if target <= 0:
        return None
    for n in range(2, MAX_SEEDS + 1):
        t = _t(interval.confidence, n - 1) + stats.t.ppf(power, n - 1)
        if t * sd / math.sqrt(n) < target:
            return n
    return None


def check_outcome(interval: Interval, expect: str, effect: float) -> Outcome:
    """What a difference's interval [lo, hi] (95%, or wider for multiplicity: `bonferroni`)
    says of a claim that expects `expect`, with `effect` > 0 the smallest effect of interest
    (for `equal`: the equivalence margin). The rules apply in this order:

    better (worse mirrors it, on -hi and -lo):
      - reproduced: lo > 0; "smaller than the smallest effect of interest" when also hi < E;
      - no effect: -E <= lo <= 0 <= hi <= E (holds zero, inside +-E);
      - contradicted: hi < E (the interval rules out the effect claimed, or lies below 0);
      - inconclusive: otherwise.
    different (two-sided): reproduced when the interval excludes 0 (a two-sided test);
      no effect when it holds 0 inside +-E; else inconclusive.
    equal: reproduced inside [-E, E]; contradicted wholly outside it; else inconclusive.

    With fewer than two seeds there is no interval, and an interval of zero width (every
    seed gave the same value: no spread to estimate) is refused; both are inconclusive."""
    if expect not in EXPECTS:
        raise ValueError(f"unknown expectation {expect!r}; known: {EXPECTS}")
    if not effect > 0:
        raise ValueError(f"the smallest effect of interest must be > 0, got {effect}")
    lo, hi = interval.lo, interval.hi
    if math.isnan(lo):
        return Outcome(INCONCLUSIVE, f"{interval.n} seed{'s' * (interval.n != 1)}: no interval")
    if hi - lo <= 1e-12:
        return Outcome(INCONCLUSIVE, "identical at every seed: a zero-width interval is refused")
    decide = seeds_to_decide(interval, expect, effect)
    undecided = Outcome(
        INCONCLUSIVE,
        f"about {decide} seeds would decide it at {POWER:.0%} power"
        if decide
        else "no seed count would decide it",
        decide,
    )
    if expect == "equal":
        if -effect <= lo and hi <= effect:
            return Outcome(REPRODUCED)
        if lo > effect or hi < -effect:
            return Outcome(CONTRADICTED, "the interval lies outside the margin")
        return undecided
    inside = -effect <= lo <= 0 <= hi <= effect
    if expect == "different":
        if lo > 0 or hi < 0:
            small = max(abs(lo), abs(hi)) < effect
            return Outcome(REPRODUCED, "smaller than the smallest effect of interest" * small)
        return Outcome(NO_EFFECT) if inside else undecided
    a, b = (lo, hi) if expect == "better" else (-hi, -lo)  # in the claimed direction
    if a > 0:
        return Outcome(REPRODUCED, "smaller than the smallest effect of interest" * (b < effect))
    if inside:
        return Outcome(NO_EFFECT)
    if b < effect:
        why = (
            "wholly on the other side of 0"
            if b < 0
            else "rules out the smallest effect of interest"
        )
        return Outcome(CONTRADICTED, why)
    return undecided


# A claim's verdict is its weakest check's: the first of these that any check has.
_PRECEDENCE = (NOT_TESTABLE, CONTRADICTED, NO_EFFECT, INCONCLUSIVE, REPRODUCED)


def verdict(outcomes: list[Outcome]) -> Outcome:
    """A claim's verdict from its checks' outcomes: contradicted when any check is, else no
    effect when any check finds none where the claim expects one, else inconclusive when any
    is, else reproduced ("smaller than the smallest effect of interest" when a check says so).
    No checks: inconclusive."""
    if not outcomes:
        return Outcome(INCONCLUSIVE, "no checks")
    worst = min(outcomes, key=lambda o: _PRECEDENCE.index(o.verdict))
    if worst.verdict == REPRODUCED:
        small = [o.note for o in outcomes if o.note]
        return Outcome(REPRODUCED, small[0] if small else "")
    notes = {o.note for o in outcomes if o.verdict == worst.verdict and o.note}
    return Outcome(worst.verdict, notes.pop() if len(notes) == 1 else "")
