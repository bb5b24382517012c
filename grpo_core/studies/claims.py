"""A study's claims judged on its results (grpo_core.studies.results): each check's interval
and outcome (grpo_core.studies.stats), the preconditions, and each claim's verdict, read only
where something can move and only of arms that train."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grpo_core.studies import stats
from grpo_core.studies.results import (
    ALL,
    MINUS,
    Results,
    config_difference,
    metric_value,
)
from grpo_core.studies.spec import BASE, Check, Claim, Precondition, cell_key

# A trained arm whose groups almost never have reward spread (fewer than 1 in 20) gets almost
# no gradient from GRPO's group-relative advantages: a claim about it is not testable.
MIN_SIGNAL = 0.05


@dataclass(frozen=True)
class CheckResult:
    check: Check
    interval: stats.Interval
    outcome: stats.Outcome
    text: str
    eval_noise: float = math.nan  # sd of the difference from sampling k completions alone

    @property
    def detectable(self) -> float:
        """The smallest difference these seeds detect with 80% power (stats.detectable_effect)."""
        return stats.detectable_effect(self.interval)


@dataclass(frozen=True)
class PreconditionResult:
    precondition: Precondition
    value: float  # the mean over seeds; nan where no cell has the metric
    n: int  # seeds
    holds: bool
    text: str


def read_levels(results: Results, level: int | str) -> tuple[set[str], str, str | None]:
    """What an accuracy check at `level` reads: its questions, the words that say which
    levels (for ALL: the movable ones, where they are not every level), and why nothing can
    move there (the base outside the study's band at the level, or at every level for ALL),
    else None."""
    base = results.base_accuracy()
    lo, hi = results.study.band
    band = f"{lo:.0%}-{hi:.0%}"
    if level != ALL:
        acc = base.get(level)  # type: ignore[arg-type]
        if acc is None or lo <= acc <= hi:
            return results.questions(level), f" at level {level}", None
        where = "the floor" if acc < lo else "the ceiling"
        why = f"the base solves {acc:.1%} at level {level}: at {where}, outside {band}"
        return results.questions(level), f" at level {level}", why
    movable = results.movable_levels()
    if not movable:
        shown = ", ".join(f"{acc:.1%} at level {lv}" for lv, acc in base.items())
        why = f"every level at the floor or the ceiling (the base solves {shown}; outside {band})"
        return results.questions(ALL), " overall", why
    if movable == results.reported_levels():
        return results.questions(ALL), " overall", None
    questions = set().union(*(results.questions(lv) for lv in movable))
    named = ("levels " if len(movable) > 1 else "level ") + ", ".join(map(str, movable))
    return questions, f" at {named} (where the base solves {band})", None


def evaluate_check(results: Results, check: Check, checks: int = 1) -> CheckResult:
    """A check's interval over seeds, its outcome (stats.check_outcome) and a line of text:
    accuracy differences paired by seed and question, in points; another metric per seed (minus
    the baseline's at the same seed), printed raw.

    `checks`: how many of its claim's checks are read (`claim_results`). The claim takes its
    weakest read check's verdict, so any one of several can decide it: each interval is then
    Bonferroni's (stats.bonferroni).
    An accuracy check reads only the levels where something can move (`read_levels`: the base
    inside the study's band); at a level outside, it is "not testable here". Its interval's sd
    is the evaluation's own noise (`eval_noise`) where that is larger than the seeds' spread.
    Two arms whose cells ran with params that differ beyond their variants' overrides are not
    compared (`config_difference`): the check is "not testable here" and says which param
    differs."""
    confidence = stats.bonferroni(checks)
    subject = check.variant + (f" {MINUS} {check.baseline}" if check.baseline else "")
    pinned, noise = None, math.nan
    if check.metric == "accuracy":
        questions, where, pinned = read_levels(results, check.level)
        noise = eval_noise(results, check, questions)
        interval = stats.paired_interval(
            results.accuracy.get(check.variant, {}),
            results.accuracy.get(check.baseline, {}),
            questions,
            confidence,
            sd_floor=noise,
        )
        subject += where
        value, unit = interval.fmt(signed=True), " pts"
        effect = f"{check.effect * 100:.1f} pts"
    else:
        values, change = [], False
        for seed, summary in sorted(results.summaries.get(check.variant, {}).items()):
            x, change_x = metric_value(summary, check.metric)
            change |= change_x
            if check.baseline is not None:
                other = results.summaries.get(check.baseline, {}).get(seed)
                y = metric_value(other, check.metric)[0] if other is not None else None
                x = None if x is None or y is None else x - y
            if x is not None:
                values.append(x)
        interval = stats.t_interval(values, confidence)
        subject += f" {check.metric}" + (f" (last {MINUS} first)" if change else "")
        value, unit, effect = _raw(interval), "", f"{check.effect:.4g}"
    outcome = stats.check_outcome(interval, check.expect, check.effect)
    if pinned:
        outcome = stats.Outcome(stats.NOT_TESTABLE, pinned)
    apart = None
    if check.baseline is not None and check.baseline != BASE:
        apart = config_difference(results, check.variant, check.baseline)
        if apart:
            outcome = stats.Outcome(stats.NOT_TESTABLE, apart)
    if interval.n == 0:
        value, unit = "no data", ""
    claimed = (
        f"equal within ±{effect}"
        if check.expect == "equal"
        else f"expected {check.expect}, smallest effect of interest {effect}"
    )
    seeds = f"{interval.n} seed" + "s" * (interval.n != 1)
    if checks > 1:
        seeds += f", {confidence:.1%} interval (Bonferroni, {checks} checks)"
    if interval.floored:
        seeds += (
            f", sd = the evaluation's noise {noise * 100:.2f} pts, above the seeds' "
            f"{interval.seed_sd * 100:.2f}"
        )
    text = f"{subject}: {value}{unit} ({claimed}), {seeds} → {outcome}"
    return CheckResult(check, interval, outcome, text, noise)


def eval_noise(results: Results, check: Check, questions: set[str] | None = None) -> float:
    """The evaluation's own noise in a check's paired difference: per seed, the sd that
    sampling k completions per question gives the difference of the two means,
    sqrt(sum_q p_a(1-p_a)/(k_a-1) + p_b(1-p_b)/(k_b-1)) / |Q| (p: avg@k, an unbiased variance
    of a mean of k draws); the root mean square over seeds. Over `questions` (default: the
    check's level). nan where k is not recorded."""
    if questions is None:
        questions = results.questions(check.level)
    per_seed = []
    for seed, acc_a in results.accuracy.get(check.variant, {}).items():
        acc_b = results.accuracy.get(check.baseline, {}).get(seed)
        k_a = results.samples.get(check.variant, {}).get(seed)
        k_b = results.samples.get(check.baseline, {}).get(seed)
        if acc_b is None or k_a is None or k_b is None:
            continue
        qs = sorted(set(acc_a) & set(acc_b) & questions)  # one summation order, any hash seed
        if not qs:
            continue
        var = sum(
            acc[q] * (1 - acc[q]) / max(k[q] - 1, 1)
            for q in qs
            for acc, k in ((acc_a, k_a), (acc_b, k_b))
        )
        per_seed.append(var / len(qs) ** 2)
    return math.sqrt(float(np.mean(per_seed))) if per_seed else math.nan


def train_column_mean(folder: Path, column: str) -> float | None:
    """The mean over steps of a column of a cell's train.csv; None where it has none."""
    path = folder / "train.csv"
    if not path.exists():
        return None
    with path.open() as f:
        values = [float(r[column]) for r in csv.DictReader(f) if r.get(column) not in (None, "")]
    return float(np.mean(values)) if values else None


def _seed_values(results: Results, variant: str, metric: str, level: int | str) -> dict[int, float]:
    """Per seed, the value of a precondition's metric for `variant` (see Precondition)."""
    if metric == "accuracy":
        return stats.seed_means(results.accuracy.get(variant, {}), results.questions(level))
    out = {}
    for seed, summary in sorted(results.summaries.get(variant, {}).items()):
        if metric.startswith("train:"):
            folder = results.directory / "cells" / cell_key(variant, seed)
            x = train_column_mean(folder, metric.removeprefix("train:"))
        else:
            x = metric_value(summary, metric)[0]
        if x is not None:
            out[seed] = x
    return out


def evaluate_precondition(results: Results, pre: Precondition) -> PreconditionResult:
    """The mean over seeds of the precondition's metric (minus its baseline's, seed by seed),
    and whether it lies on the right side of its bound; no data fails."""
    per_seed = _seed_values(results, pre.variant, pre.metric, pre.level)
    subject = pre.variant
    if pre.baseline is not None:
        other = _seed_values(results, pre.baseline, pre.metric, pre.level)
        per_seed = {s: x - other[s] for s, x in per_seed.items() if s in other}
        subject += f" {MINUS} {pre.baseline}"
    values = list(per_seed.values())
    shown = pre.metric
    if pre.metric == "accuracy":
        shown = "accuracy" + (f" at level {pre.level}" if pre.level != ALL else "")
    value = float(np.mean(values)) if values else math.nan
    bound = f"< {pre.below:.4g}" if pre.below is not None else f"> {pre.above:.4g}"
    holds = bool(values) and (value < pre.below if pre.below is not None else value > pre.above)
    text = (
        f"{pre.what}: {subject} {shown} = "
        + (f"{value:.4g}" if values else "no data")
        + f" (needs {bound}; mean of {len(values)} seeds) → {'holds' if holds else 'fails'}"
    )
    return PreconditionResult(pre, value, len(values), holds, text)


def _raw(interval: stats.Interval) -> str:
    """An interval of a raw metric, 4 significant digits."""
    if math.isnan(interval.lo):
        return f"{interval.mean:+.4g} (n={interval.n})"
    return f"{interval.mean:+.4g} [{interval.lo:+.4g}, {interval.hi:+.4g}]"


# claim, its checks' results, its verdict
Verdicts = list[tuple[Claim, list[CheckResult], stats.Outcome]]


def precondition_results(results: Results) -> list[PreconditionResult]:
    return [evaluate_precondition(results, p) for p in results.study.preconditions]


def training_signal(results: Results, variant: str) -> float | None:
    """The share of a trained arm's groups with reward spread: per seed 1 - the mean over
    steps of train.csv's frac_reward_zero_std, then the mean over seeds; None where no cell
    logged it. What GRPO learns from: a group whose rewards are all equal has no advantage."""
    per_seed = []
    for folder in results.seed_dirs(variant):
        x = train_column_mean(folder, "frac_reward_zero_std")
        if x is not None:
            per_seed.append(1.0 - x)
    return float(np.mean(per_seed)) if per_seed else None


def claim_signal(results: Results, claim: Claim) -> dict[str, float | None]:
    """`training_signal` of every trained arm that the claim's checks compare, in order."""
    arms = [a for c in claim.checks for a in (c.variant, c.baseline) if a not in (None, BASE)]
    return {a: training_signal(results, a) for a in dict.fromkeys(arms)}


def signal_text(signal: dict[str, float | None]) -> str:
    """The claim's arms and their share of groups with reward spread, in words."""
    return ", ".join(f"{a} {'–' if x is None else f'{x:.0%}'}" for a, x in signal.items()) or "–"


def pinned(results: Results, check: Check) -> str | None:
    """Why nothing can move where an accuracy check reads (`read_levels`), else None."""
    return read_levels(results, check.level)[2] if check.metric == "accuracy" else None


def claim_results(results: Results) -> Verdicts:
    """Per claim: the claim, its checks' results and its verdict.

    A check at a level where nothing can move (`pinned`) is shown but does not decide the
    claim. The others do, each at Bonferroni's confidence for their number, and the verdict is
    stats.verdict over them (saying which levels were not read). "Not testable here" when every
    check is pinned; when a precondition that guards the claim fails (with the numbers of the
    first that failed); or when an arm it compares barely trains (`training_signal` below
    MIN_SIGNAL), unless the claim is that the arm does worse."""
    failed = [p for p in precondition_results(results) if not p.holds]
    out = []
    for claim in results.study.claims:
        why_pinned = [pinned(results, c) for c in claim.checks]
        live = max(1, sum(w is None for w in why_pinned))
        checks = [evaluate_check(results, c, live) for c in claim.checks]
        guards = [
            p for p in failed if p.precondition.claims is None or claim.id in p.precondition.claims
        ]
        # an arm claimed worse may be worse because it barely trains: that is no reason to
        # refuse the claim (the paper's never-solved questions give GRPO almost no signal)
        worse = {c.variant for c in claim.checks if c.expect == "worse"}
        worse -= {c.variant for c in claim.checks if c.expect != "worse"}
        weak = [
            (a, x)
            for a, x in claim_signal(results, claim).items()
            if x is not None and x < MIN_SIGNAL and a not in worse
        ]
        unread = [w for w in why_pinned if w is not None]
        if guards:
            outcome = stats.Outcome(stats.NOT_TESTABLE, guards[0].text)
        elif weak:
            arm, x = weak[0]
            outcome = stats.Outcome(
                stats.NOT_TESTABLE,
                f"{arm} barely trains: {x:.1%} of its groups have reward spread "
                f"(needs {MIN_SIGNAL:.0%})",
            )
        elif len(unread) == len(checks):
            outcome = stats.Outcome(stats.NOT_TESTABLE, unread[0])
        else:
            decided = stats.verdict(
                [r.outcome for r, w in zip(checks, why_pinned, strict=True) if w is None]
            )
            notes = [decided.note] * bool(decided.note) + [f"not read: {w}" for w in unread]
            outcome = stats.Outcome(decided.verdict, "; ".join(notes), decided.seeds_to_decide)
        out.append((claim, checks, outcome))
    return out
