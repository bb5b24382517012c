"""A study's results as the report reads them: what the cells wrote so far
(stages/study_cell.py), and the claims' checks evaluated on them (grpo_core.studies.stats).
A cell still to run is listed as missing, and the rest is reported, so a report can be read
while its study runs."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from grpo_core.studies import stats
from grpo_core.studies.spec import (
    BASE,
    Check,
    Claim,
    Precondition,
    Study,
    cell_key,
    get_dotted,
    load_study,
)

Acc = dict[int, dict[str, float]]  # seed -> question id -> avg@k accuracy
ALL = "all"  # every reported level
MINUS = "−"  # U+2212, as printed in the report's differences
TOKEN_KEYS = ("logp_correct", "logp_incorrect", "zero_adv_frac")


@dataclass
class Results:
    """What a study's cells and base evaluations wrote; BASE counts as a variant name."""

    study: Study
    name: str
    directory: Path
    accuracy: dict[str, Acc]  # variant -> seed -> question id -> accuracy
    levels: dict[str, dict[int, dict[str, int]]]  # variant -> seed -> question id -> level
    summaries: dict[str, dict[int, dict]]  # variant -> seed -> the cell's summary JSON
    samples: dict[str, dict[int, dict[str, int]]]  # variant -> seed -> question id -> k
    missing: list[str]  # the cells (`variant-seed`) and base evaluations (`base/seed`) not done

    @property
    def cells_done(self) -> int:
        return sum(len(self.summaries.get(v, {})) for v in self.study.variants)

    def reported_levels(self) -> list[int]:
        """The study's `levels`, or every level of an evaluated question."""
        if self.study.levels is not None:
            return list(self.study.levels)
        return sorted(
            {lv for by_seed in self.levels.values() for m in by_seed.values() for lv in m.values()}
        )

    def questions(self, level: int | str) -> set[str]:
        """The ids of the questions at `level` (ALL: at any reported level)."""
        wanted = set(self.reported_levels()) if level == ALL else {level}
        return {
            q
            for by_seed in self.levels.values()
            for m in by_seed.values()
            for q, lv in m.items()
            if lv in wanted
        }

    def seed_dirs(self, variant: str) -> list[Path]:
        """The folders of the variant's done cells, in seed order."""
        return [
            self.directory / "cells" / cell_key(variant, s)
            for s in sorted(self.summaries.get(variant, {}))
        ]


def load_results(study_dir: Path) -> Results:
    """Read the study file, then every cell and base evaluation that exists. A cell counts as
    done when its summary JSON exists: the cell stage writes it last."""
    study_dir = Path(study_dir)
    study = load_study(study_dir)
    accuracy: dict[str, Acc] = {}
    levels: dict[str, dict[int, dict[str, int]]] = {}
    summaries: dict[str, dict[int, dict]] = {}
    samples: dict[str, dict[int, dict[str, int]]] = {}
    missing = []
    for variant in (BASE, *study.variants):
        for seed in study.seeds:
            # base/<seed>/ and base/<seed>.json; cells/<variant>-<seed>/ and cells/<...>.json
            key = f"{BASE}/{seed}" if variant == BASE else cell_key(variant, seed)
            folder = study_dir / ("base" if variant == BASE else "cells") / Path(key).name
            summary = folder.with_name(f"{folder.name}.json")
            if not summary.exists():
                missing.append(key)
                continue
            summaries.setdefault(variant, {})[seed] = json.loads(summary.read_text())
            table = pq.read_table(folder / "questions.parquet")
            rows = table.to_pydict()
            if "samples" in rows:  # k of avg@k; cells written before it was kept lack it
                samples.setdefault(variant, {})[seed] = dict(
                    zip(rows["id"], rows["samples"], strict=True)
                )
            accuracy.setdefault(variant, {})[seed] = dict(
                zip(rows["id"], rows["accuracy"], strict=True)
            )
            levels.setdefault(variant, {})[seed] = dict(zip(rows["id"], rows["level"], strict=True))
    return Results(study, study_dir.name, study_dir, accuracy, levels, summaries, samples, missing)


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


def metric_value(summary: dict, key: str) -> tuple[float | None, bool]:
    """The value of a dotted key of a cell summary, and whether it is a change: a {first, last}
    pair gives last - first. None where the key or a value is absent."""
    try:
        value = get_dotted(summary, key)
    except (KeyError, TypeError):
        return None, False
    if isinstance(value, dict):
        first, last = value.get("first"), value.get("last")
        return (None if first is None or last is None else float(last - first)), True
    return (None if value is None else float(value)), False


def _run_record(results: Results, variant: str, seed: int) -> dict | None:
    path = results.directory / "cells" / cell_key(variant, seed) / "run.json"
    return json.loads(path.read_text()) if path.exists() else None


def replication(results: Results) -> str:
    """What a seed replicates, in words: the study's `bases` setting, and the bases its done
    cells record (run.json's content hash of their base model; older cells record none)."""
    seen: dict[int, set[str]] = {}
    unrecorded = 0
    for variant, seed in results.study.cells():
        run = _run_record(results, variant, seed)
        if run is None:
            continue
        base = run.get("provenance", {}).get("base")
        if base:
            seen.setdefault(seed, set()).add(base)
        else:
            unrecorded += 1
    per_seed = results.study.bases == "per_seed"
    if per_seed:
        what = (
            "each seed trains from its own base (`model.seed` = the seed: the SFT run again) and "
            "sets the RL seeds (train.seed, eval.seed), so the intervals cover the base's "
            "variation"
        )
    elif results.study.real_model:
        what = (
            "each seed sets the RL seeds (train.seed, eval.seed) on the one pretrained base, "
            "which no seed changes"
        )
    else:
        what = (
            "each seed sets the RL seeds (train.seed, eval.seed) on one base, so the intervals "
            "hold for that base, not for the recipe that built it"
        )
    bases = set().union(*seen.values()) if seen else set()
    told = []
    if seen:
        told.append(f"{len(bases)} distinct base(s) recorded over {len(seen)} seed(s)")
        mixed = sorted(s for s, hashes in seen.items() if len(hashes) > 1)
        if mixed:
            told.append(f"seeds whose cells ran on different bases: {mixed}")
    if unrecorded:
        told.append(f"{unrecorded} cell(s) from before the base was recorded")
    if per_seed and (unrecorded or len(bases) < len(seen)):
        told.append(
            "so these intervals do not yet cover the base's variation: cells made before "
            "`bases: per_seed` ran on one base; re-run them"
        )
    return f"What a seed replicates: {what}." + (f" Cells: {'; '.join(told)}." if told else "")


def _covered(key: str, overrides: set[str]) -> bool:
    return any(key == o or key.startswith(o + ".") for o in overrides)


def config_difference(results: Results, variant: str, baseline: str) -> str | None:
    """Why two arms cannot be compared: at some seed their cells ran on different base models
    (their recorded content hashes differ), or with params that differ beyond what the two
    variants set (a knob changed between the runs, a cell run before a default moved), named
    with both values; None when they differ by the variants alone.

    Cells record every resolved param (run.json `params`); a cell from before that record is
    read from what it does record (`resolved`: the train and reward params after the algo
    preset), where two arms of different `algo` presets may differ in any train param."""
    from grpo_core.compare import flatten

    variants = results.study.variants
    overrides = set(variants.get(variant, {})) | set(variants.get(baseline, {}))
    for seed in sorted(
        set(results.summaries.get(variant, {})) & set(results.summaries.get(baseline, {}))
    ):
        a, b = _run_record(results, variant, seed), _run_record(results, baseline, seed)
        if a is None or b is None:
            continue
        bases = [r.get("provenance", {}).get("base") for r in (a, b)]
        if bases[0] != bases[1]:
            named = " and ".join((h or "none recorded")[:13] for h in bases)
            return (
                f"not compared: {cell_key(variant, seed)} and {cell_key(baseline, seed)} may "
                f"have run on different base models ({named}; re-run the older cell)"
            )
        if "params" in a and "params" in b:
            fa, fb = flatten(a["params"]), flatten(b["params"])
            allowed = overrides
        else:
            fa, fb = flatten(a.get("resolved", {})), flatten(b.get("resolved", {}))
            fa.pop("base", None), fb.pop("base", None)
            presets = fa.get("algo") != fb.get("algo")  # another preset resolves train anew
            allowed = overrides | ({"train"} if presets else set())
        for key in sorted(set(fa) | set(fb)):
            x, y = fa.get(key, "absent"), fb.get(key, "absent")
            if x != y and not _covered(key, allowed):
                return (
                    f"not compared: {cell_key(variant, seed)} and {cell_key(baseline, seed)} ran "
                    f"with {key} = {x!r} and {y!r}, which neither variant sets (re-run the "
                    "older cell)"
                )
    return None


def evaluate_check(results: Results, check: Check) -> CheckResult:
    """A check's interval over seeds, its outcome (stats.check_outcome) and a line of text:
    accuracy differences paired by seed and question, in points; another metric per seed (minus
    the baseline's at the same seed), printed raw. Two arms whose cells ran with params that
    differ beyond their variants' overrides are not compared (`config_difference`): the check
    is "not testable here" and says which param differs."""
    subject = check.variant + (f" {MINUS} {check.baseline}" if check.baseline else "")
    if check.metric == "accuracy":
        interval = stats.paired_interval(
            results.accuracy.get(check.variant, {}),
            results.accuracy.get(check.baseline, {}),
            results.questions(check.level),
        )
        subject += " overall" if check.level == ALL else f" at level {check.level}"
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
        interval = stats.t_interval(values)
        subject += f" {check.metric}" + (f" (last {MINUS} first)" if change else "")
        value, unit, effect = _raw(interval), "", f"{check.effect:.4g}"
    outcome = stats.check_outcome(interval, check.expect, check.effect)
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
    text = f"{subject}: {value}{unit} ({claimed}), {seeds} → {outcome}"
    noise = eval_noise(results, check) if check.metric == "accuracy" else math.nan
    return CheckResult(check, interval, outcome, text, noise)


def eval_noise(results: Results, check: Check) -> float:
    """The evaluation's own noise in a check's paired difference: per seed, the sd that
    sampling k completions per question gives the difference of the two means,
    sqrt(sum_q p_a(1-p_a)/(k_a-1) + p_b(1-p_b)/(k_b-1)) / |Q| (p: avg@k, an unbiased variance
    of a mean of k draws); the root mean square over seeds. nan where k is not recorded."""
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


def claim_results(results: Results) -> Verdicts:
    """Per claim: the claim, its checks' results and its verdict: stats.verdict over the
    checks, or "not testable here" when a precondition that guards it fails (with the
    numbers of the first that failed)."""
    failed = [p for p in precondition_results(results) if not p.holds]
    out = []
    for claim in results.study.claims:
        checks = [evaluate_check(results, c) for c in claim.checks]
        guards = [
            p for p in failed if p.precondition.claims is None or claim.id in p.precondition.claims
        ]
        if guards:
            outcome = stats.Outcome(stats.NOT_TESTABLE, guards[0].text)
        else:
            outcome = stats.verdict([c.outcome for c in checks])
        out.append((claim, checks, outcome))
    return out


def accuracy_interval(results: Results, variant: str, level: int | str) -> stats.Interval:
    """The variant's accuracy at `level`: per seed the mean over its questions, t over seeds."""
    means = stats.seed_means(results.accuracy.get(variant, {}), results.questions(level))
    return stats.t_interval(list(means.values()))


def difference(results: Results, variant: str, baseline: str, level: int | str) -> stats.Interval:
    return stats.paired_interval(
        results.accuracy.get(variant, {}),
        results.accuracy.get(baseline, {}),
        results.questions(level),
    )


def label(results: Results, variant: str) -> str:
    return variant + " (baseline)" * (variant == results.study.baseline)


def level_columns(results: Results) -> tuple[list[int | str], list[str]]:
    levels = results.reported_levels()
    return [*levels, ALL], [f"level {lv}" for lv in levels] + [ALL]
