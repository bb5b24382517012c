"""A study's results as the report reads them: what the cells wrote so far
(stages/study_cell.py), and the claims' checks evaluated on them (grpo_core.studies.stats).
A cell still to run is listed as missing, and the rest is reported, so a report can be read
while its study runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from grpo_core.studies import stats
from grpo_core.studies.spec import (
    BASE,
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

    def base_accuracy(self) -> dict[int, float]:
        """Per reported level, the base's accuracy (the mean over its seeds); levels the base
        has not been evaluated at are left out."""
        out = {}
        for level in self.reported_levels():
            means = stats.seed_means(self.accuracy.get(BASE, {}), self.questions(level))
            if means:
                out[level] = float(np.mean(list(means.values())))
        return out

    def movable_levels(self) -> list[int]:
        """The reported levels where something can move: the base inside the study's `band`
        (5%-95% unless it states another). Every reported level while the base has not been
        evaluated."""
        base = self.base_accuracy()
        if not base:
            return self.reported_levels()
        lo, hi = self.study.band
        return [lv for lv, acc in base.items() if lo <= acc <= hi]

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
    """What a seed replicates, in words: the study's `bases` setting, and the bases and the
    machines its done cells record (run.json's content hash of their base model and its
    `machine`; older cells record neither)."""
    seen: dict[int, set[str]] = {}
    cpus: dict[str, int] = {}  # the machines the cells record, and how many ran on each
    unrecorded = 0
    for variant, seed in results.study.cells():
        run = _run_record(results, variant, seed)
        if run is None:
            continue
        cpu = run.get("machine", {}).get("cpu")
        if cpu:
            cpus[cpu] = cpus.get(cpu, 0) + 1
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
    if cpus:
        told.append(
            "run on "
            + ", ".join(f"{cpu} ({n} cell{'s' * (n != 1)})" for cpu, n in sorted(cpus.items()))
        )
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
    (their recorded content hashes differ), on different CPUs (where both record one), or with
    params that differ beyond what the two variants set (a knob changed between the runs, a
    cell run before a default moved), named with both values; None when they differ by the
    variants alone.

    Cells record every resolved param (run.json `params`); a cell from before that record is
    read from what it does record (`resolved`: the train and reward params after the algo
    preset), where two arms of different `algo` presets may differ in any train param. A key
    added since one of the cells ran (`ADDED_KEYS`) is, where that cell lacks it, the value
    that does what the cell did."""
    from grpo_core.compare import flatten
    from grpo_core.config.params import ADDED_KEYS

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
        cpus = [r.get("machine", {}).get("cpu") for r in (a, b)]
        if None not in cpus and cpus[0] != cpus[1]:
            return (
                f"not compared: {cell_key(variant, seed)} and {cell_key(baseline, seed)} ran on "
                f"different CPUs ({cpus[0]} and {cpus[1]}), whose kernels may compute other bits "
                "(benchmarks/results/numerics.md; re-run one on the other's machine)"
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
            before = ADDED_KEYS.get(key, "absent")
            x, y = fa.get(key, before), fb.get(key, before)
            if x != y and not _covered(key, allowed):
                return (
                    f"not compared: {cell_key(variant, seed)} and {cell_key(baseline, seed)} ran "
                    f"with {key} = {x!r} and {y!r}, which neither variant sets (re-run the "
                    "older cell)"
                )
    return None


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
