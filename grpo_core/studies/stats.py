"""The statistics of a study report: intervals over seeds, paired differences, verdicts.

The unit of replication is the training seed. A cell's accuracy on a set of questions is the
mean over those questions of each question's avg@k. A difference between two variants is
paired by seed and question: for each seed both were evaluated with the same eval seed on the
same questions, so per seed d_s = mean over the questions both have of (a_q - b_q); the
interval is Student's t over the seeds' d_s (scipy.stats), n - 1 degrees of freedom. With
one seed there is no interval and every verdict is inconclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float  # nan with fewer than 2 values
    hi: float
    n: int

    def fmt(self, scale: float = 100.0, signed: bool = False) -> str:
        sign = "+" if signed else ""
        if math.isnan(self.lo):
            return f"{self.mean * scale:{sign}.1f} (n={self.n})"
        lo, hi = self.lo * scale, self.hi * scale
        return f"{self.mean * scale:{sign}.1f} [{lo:{sign}.1f}, {hi:{sign}.1f}]"


def t_interval(values: list[float] | np.ndarray, confidence: float = CONFIDENCE) -> Interval:
    """Mean of `values` and its Student-t interval (scipy.stats.t, df = n - 1)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, math.nan, math.nan, int(x.size))
    sem = float(stats.sem(x))
    if sem == 0.0:
        return Interval(mean, mean, mean, int(x.size))
    lo, hi = stats.t.interval(confidence, x.size - 1, loc=mean, scale=sem)
    return Interval(mean, float(lo), float(hi), int(x.size))


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
            out[seed] = float(np.mean([a[seed][q] - b[seed][q] for q in qs]))
    return out


def paired_interval(
    a: dict[int, dict[str, float]],
    b: dict[int, dict[str, float]],
    questions: set[str] | None = None,
) -> Interval:
    """The mean paired difference a - b and its t interval over seeds."""
    return t_interval(list(paired_differences(a, b, questions).values()))


Outcome = str  # "holds" | "contradicted" | "inconclusive"


def check_outcome(interval: Interval, expect: str, margin: float) -> Outcome:
    """Whether a difference's interval supports `expect`:
    - better: holds when lo > 0; contradicted when hi <= 0; else inconclusive;
    - worse: the mirror image;
    - equal: holds when [lo, hi] lies inside [-margin, margin] (two one-sided tests at the
      interval's level); contradicted when it lies wholly outside (lo > margin or
      hi < -margin); else inconclusive."""
    lo, hi = interval.lo, interval.hi
    if math.isnan(lo):
        return "inconclusive"
    if expect == "better":
        return "holds" if lo > 0 else "contradicted" if hi <= 0 else "inconclusive"
    if expect == "worse":
        return "holds" if hi < 0 else "contradicted" if lo >= 0 else "inconclusive"
    if expect == "equal":
        if -margin <= lo and hi <= margin:
            return "holds"
        return "contradicted" if lo > margin or hi < -margin else "inconclusive"
    raise ValueError(f"unknown expectation {expect!r}")


def verdict(outcomes: list[Outcome]) -> str:
    """A claim's verdict from its checks: reproduced when every check holds; not reproduced
    when any is contradicted; else inconclusive."""
    if outcomes and all(o == "holds" for o in outcomes):
        return "reproduced"
    if any(o == "contradicted" for o in outcomes):
        return "not reproduced"
    return "inconclusive"
