"""A study's results as the report reads them: what the cells wrote so far
(stages/study_cell.py), and the claims' checks evaluated on them (grpo_core.studies.stats).
A cell still to run is listed as missing, and the rest is reported, so a report can be read
while its study runs."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from grpo_core.studies import stats
from grpo_core.studies.spec import BASE, Check, Claim, Study, cell_key, get_dotted, load_study

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
            table = pq.read_table(folder / "questions.parquet", columns=["id", "level", "accuracy"])
            rows = table.to_pydict()
            accuracy.setdefault(variant, {})[seed] = dict(
                zip(rows["id"], rows["accuracy"], strict=True)
            )
            levels.setdefault(variant, {})[seed] = dict(zip(rows["id"], rows["level"], strict=True))
    return Results(study, study_dir.name, study_dir, accuracy, levels, summaries, missing)


@dataclass(frozen=True)
class CheckResult:
    check: Check
    interval: stats.Interval
    outcome: str
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


def evaluate_check(results: Results, check: Check) -> CheckResult:
    """A check's interval over seeds, its outcome (stats.check_outcome) and a line of text:
    accuracy differences paired by seed and question, in points; another metric per seed (minus
    the baseline's at the same seed), printed raw."""
    subject = check.variant + (f" {MINUS} {check.baseline}" if check.baseline else "")
    if check.metric == "accuracy":
        interval = stats.paired_interval(
            results.accuracy.get(check.variant, {}),
            results.accuracy.get(check.baseline, {}),
            results.questions(check.level),
        )
        subject += " overall" if check.level == ALL else f" at level {check.level}"
        value, unit = interval.fmt(signed=True), " pts"
        margin = f"{check.margin * 100:.1f} pts"
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
        value, unit, margin = _raw(interval), "", f"{check.margin:.4g}"
    outcome = stats.check_outcome(interval, check.expect, check.margin)
    if interval.n == 0:
        value, unit = "no data", ""
    within = f" (equal within ±{margin})" if check.expect == "equal" else ""
    seeds = f"{interval.n} seed" + "s" * (interval.n != 1)
    text = f"{subject}: {value}{unit}{within}, {seeds} → {outcome}"
    return CheckResult(check, interval, outcome, text)


def _raw(interval: stats.Interval) -> str:
    """An interval of a raw metric, 4 significant digits."""
    if math.isnan(interval.lo):
        return f"{interval.mean:+.4g} (n={interval.n})"
    return f"{interval.mean:+.4g} [{interval.lo:+.4g}, {interval.hi:+.4g}]"


Verdicts = list[tuple[Claim, list[CheckResult], str]]  # claim, its checks' results, its verdict


def claim_results(results: Results) -> Verdicts:
    """Per claim: the claim, its checks' results and its verdict (stats.verdict)."""
    out = []
    for claim in results.study.claims:
        checks = [evaluate_check(results, c) for c in claim.checks]
        out.append((claim, checks, stats.verdict([c.outcome for c in checks])))
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
