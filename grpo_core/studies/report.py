"""A study's report (reports/<name>.md, reports/<name>/) and the findings over every study.

`load_results` reads what the study's cells wrote so far (stages/study_cell.py); a cell still
to run is listed as missing, and the report covers the rest, so it can be read while a study
runs. `write_report` turns the results into verdicts on the study's claims, tables and figures
(statistics: grpo_core.studies.stats); `write_findings` gathers every report's verdicts into
one table (docs/findings.md).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from grpo_core.io import atomic_path, write_json
from grpo_core.studies import stats
from grpo_core.studies.spec import BASE, Check, Claim, Study, cell_key, get_dotted, load_study

Acc = dict[int, dict[str, float]]  # seed -> question id -> avg@k accuracy
ALL = "all"
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


# ---------------------------------------------------------------------------------------------
# Claims


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


# ---------------------------------------------------------------------------------------------
# The report


def accuracy_interval(results: Results, variant: str, level: int | str) -> stats.Interval:
    """The variant's accuracy at `level`: per seed the mean over its questions, t over seeds."""
    means = stats.seed_means(results.accuracy.get(variant, {}), results.questions(level))
    return stats.t_interval(list(means.values()))


def write_report(study_dir: Path, out_root: Path) -> Path:
    """out_root/<name>.md and out_root/<name>/ (figures, summary.json); returns the .md path."""
    results = load_results(study_dir)
    study, name = results.study, results.name
    claims = claim_results(results)
    with atomic_path(out_root / name) as folder:
        folder.mkdir()
        _accuracy_figure(results, folder / "accuracy.png")
        _difference_figure(results, folder / "difference.png")
        _curves_figure(results, folder / "curves.png")
        if study.dynamics:
            _dynamics_figure(results, folder / "dynamics.png")
        write_json(_summary(results, claims), folder / "summary.json")
    target = out_root / f"{name}.md"
    with atomic_path(target) as tmp:
        tmp.write_text(_markdown(results, claims))
    return target


def _summary(results: Results, claims: Verdicts) -> dict:
    def num(x: float) -> float | None:
        return None if math.isnan(x) else x

    return {
        "name": results.name,
        "title": results.study.title,
        "cells_done": results.cells_done,
        "cells_expected": len(results.study.cells()),
        "seeds": results.study.seeds,
        "wall_s_total": _wall_total(results),
        "claims": [
            {
                "id": claim.id,
                "claim": claim.claim,
                "paper": claim.paper,
                "verdict": verdict,
                "checks": [
                    {
                        "variant": r.check.variant,
                        "baseline": r.check.baseline,
                        "metric": r.check.metric,
                        "level": r.check.level if r.check.metric == "accuracy" else None,
                        "expect": r.check.expect,
                        "margin": r.check.margin,
                        "mean": num(r.interval.mean),
                        "lo": num(r.interval.lo),
                        "hi": num(r.interval.hi),
                        "n": r.interval.n,
                        "outcome": r.outcome,
                        "text": r.text,
                    }
                    for r in checks
                ],
            }
            for claim, checks, verdict in claims
        ],
    }


def _wall_total(results: Results) -> float:
    """The study's compute time: the sum of every done cell's total wall time (seconds)."""
    return round(
        sum(
            s["wall_s"]["total"]
            for v in results.study.variants
            for s in results.summaries.get(v, {}).values()
        ),
        1,
    )


METHOD = """\
Each cell is evaluated on the eval split with k samples per question: a question's accuracy is
avg@k, the fraction of its k samples that are correct. A cell's accuracy at a level is the mean
over that level's questions ("all": over the questions of every reported level). The unit of
replication is the training seed: accuracies are the mean over seeds with a 95% Student-t
interval (n - 1 degrees of freedom, scipy.stats). A difference between two variants is paired
by seed and question (both evaluated with the same eval seed): per seed the mean over their
common questions of variant - baseline, then the t interval over seeds; the base model is
evaluated at each seed too. A metric other than accuracy is a key of the cells' summaries (a
first/last pair counts as last - first), taken per seed, minus the baseline's at the same seed
when the check has one. A check expecting *better* holds when the interval lies above 0 and is
contradicted when it lies at or below 0; *worse* mirrors it; *equal* holds when the interval
lies inside [-margin, margin] and is contradicted when it lies wholly outside; anything else,
and any check with one seed, is inconclusive. A claim is **reproduced** when every check holds,
**not reproduced** when any is contradicted, else **inconclusive**."""


def _markdown(results: Results, claims: Verdicts) -> str:
    study, name = results.study, results.name
    levels = results.reported_levels()
    columns: list[int | str] = [*levels, ALL]
    heads = [f"level {lv}" for lv in levels] + [ALL]
    rows = [BASE, *study.variants]
    out = [
        f"# {study.title}",
        "",
        study.question,
        "",
        f"Rerun the study: `dvc repro studies/{name}/dvc.yaml`; regenerate this report: "
        f"`python -m stages.study_report report studies/{name}`.",
        "",
        "## Cells",
        "",
        f"Seeds {', '.join(map(str, study.seeds))}; {results.cells_done} / "
        f"{len(study.cells())} cells done (variants × seeds); the base model evaluated at "
        f"{len(results.summaries.get(BASE, {}))} / {len(study.seeds)} seeds.",
    ]
    if results.missing:
        out.append("Missing: " + ", ".join(f"`{k}`" for k in results.missing) + ".")
    out += ["", "## Method", "", METHOD, "", "## Verdicts", ""]
    out += _table(
        ["id", "claim", "paper's number", "ours", "verdict"],
        [
            [f"`{c.id}`", c.claim, c.paper, "; ".join(r.text for r in checks), f"**{verdict}**"]
            for c, checks, verdict in claims
        ],
    )
    out += ["", "## Accuracy (%, mean [95% interval] over seeds)", ""]
    out += _table(
        ["variant", *heads],
        [
            [_label(results, v), *(_pct(accuracy_interval(results, v, c)) for c in columns)]
            for v in rows
        ],
    )
    out += ["", "## Paired differences (points, mean [95% interval] over seeds)", ""]
    pairs = [(v, study.baseline) for v in study.variants if v != study.baseline]
    pairs += [(v, BASE) for v in study.variants]
    out += _table(
        ["difference", *heads],
        [
            [
                f"{v} {MINUS} {b}",
                *(_pct(_difference(results, v, b, c), signed=True) for c in columns),
            ]
            for v, b in pairs
        ],
    )
    out += ["", "## Cost (mean over seeds)", ""]
    out += _table(["variant", "seeds", "steps", "rollouts", "train", "total"], _cost_rows(results))
    out += [
        "",
        f"Compute: {_clock(_wall_total(results))} (the total wall time of the "
        f"{results.cells_done} done cells).",
        "",
        "## Dynamics (mean over seeds; first → last quarter of training)",
        "",
    ]
    out += _table(["variant", "rel_update", "changed_frac", *TOKEN_KEYS], _dynamics_rows(results))
    out += ["", "## Figures", ""]
    out += [
        f"![accuracy by level]({name}/accuracy.png)",
        "",
        f"![paired difference to {study.baseline}]({name}/difference.png)",
        "",
        f"![training reward against rollouts]({name}/curves.png)",
    ]
    if study.dynamics:
        out += ["", f"![training dynamics]({name}/dynamics.png)"]
    if study.cut:
        out += ["", "## What was cut", ""] + [f"- {c}" for c in study.cut]
    return "\n".join(out) + "\n"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return [line(head), "|" + "---|" * len(head), *(line(r) for r in rows)]


def _label(results: Results, variant: str) -> str:
    return variant + " (baseline)" * (variant == results.study.baseline)


def _pct(interval: stats.Interval, signed: bool = False) -> str:
    return "–" if interval.n == 0 else interval.fmt(signed=signed)


def _difference(results: Results, variant: str, baseline: str, level: int | str) -> stats.Interval:
    return stats.paired_interval(
        results.accuracy.get(variant, {}),
        results.accuracy.get(baseline, {}),
        results.questions(level),
    )


def _clock(seconds: float) -> str:
    if math.isnan(seconds):
        return "–"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def _mean(values: list) -> float:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else math.nan


def _cost_rows(results: Results) -> list[list[str]]:
    rows = []
    for v in results.study.variants:
        cells = list(results.summaries.get(v, {}).values())
        rows.append(
            [
                _label(results, v),
                str(len(cells)),
                _num(_mean([c.get("steps") for c in cells]), ".0f"),
                _num(_mean([c.get("rollouts") for c in cells]), ",.0f"),
                _clock(_mean([c["wall_s"].get("train") for c in cells])),
                _clock(_mean([c["wall_s"].get("total") for c in cells])),
            ]
        )
    return rows


def _dynamics_rows(results: Results) -> list[list[str]]:
    rows = []
    for v in results.study.variants:
        dyn = [c.get("dynamics") or {} for c in results.summaries.get(v, {}).values()]
        weights = [d.get("weights") or {} for d in dyn]
        tokens = [d.get("tokens") or {} for d in dyn]
        row = [_label(results, v)]
        row += [_num(_mean([w.get(k) for w in weights])) for k in ("rel_update", "changed_frac")]
        for key in TOKEN_KEYS:
            ends = [
                _num(_mean([(t.get(key) or {}).get(e) for t in tokens])) for e in ("first", "last")
            ]
            row.append(" → ".join(ends))
        rows.append(row)
    return rows


def _num(x: float, spec: str = ".4g") -> str:
    return "–" if math.isnan(x) else format(x, spec)


# ---------------------------------------------------------------------------------------------
# Figures: an explicit Agg canvas (no pyplot state), as grpo_core.analysis.figures.


def _figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (7.0, 4.0)):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def _bars(ax, groups: list[str], series: dict[str, list[stats.Interval]]) -> None:
    """Grouped bars (in points) with 95% interval error bars, where the interval exists."""
    x = np.arange(len(groups))
    width = 0.8 / max(len(series), 1)
    for i, (label, intervals) in enumerate(series.items()):
        mean = np.array([iv.mean for iv in intervals]) * 100
        lo = np.nan_to_num(mean - np.array([iv.lo for iv in intervals]) * 100)
        hi = np.nan_to_num(np.array([iv.hi for iv in intervals]) * 100 - mean)
        ax.bar(
            x + (i - (len(series) - 1) / 2) * width,
            np.nan_to_num(mean),
            width,
            yerr=[lo, hi],
            capsize=2,
            label=label,
        )
    ax.set_xticks(x, groups)
    if series:
        ax.legend(fontsize=7)


def _columns(results: Results) -> tuple[list[int | str], list[str]]:
    levels = results.reported_levels()
    return [*levels, ALL], [f"level {lv}" for lv in levels] + [ALL]


def _accuracy_figure(results: Results, path: Path) -> None:
    columns, groups = _columns(results)
    fig, axes = _figure()
    variants = [BASE, *results.study.variants]
    _bars(
        axes[0, 0],
        groups,
        {v: [accuracy_interval(results, v, c) for c in columns] for v in variants},
    )
    axes[0, 0].set(ylabel="accuracy (%, avg@k)", title=f"{results.name}: accuracy by level")
    fig.savefig(path, format="png", dpi=110)


def _difference_figure(results: Results, path: Path) -> None:
    columns, groups = _columns(results)
    baseline = results.study.baseline
    fig, axes = _figure()
    ax = axes[0, 0]
    _bars(
        ax,
        groups,
        {
            f"{v} {MINUS} {baseline}": [_difference(results, v, baseline, c) for c in columns]
            for v in results.study.variants
            if v != baseline
        },
    )
    ax.axhline(0.0, color="0.3", linewidth=0.8)
    ax.set(ylabel="paired difference (points)", title=f"{results.name}: difference to {baseline}")
    fig.savefig(path, format="png", dpi=110)


def _seed_mean(frames: list[pd.DataFrame]) -> pd.DataFrame | None:
    """Per step, the mean over seeds of each column (missing values skipped)."""
    frames = [f for f in frames if "step" in f.columns and len(f)]
    if not frames:
        return None
    return pd.concat(frames).groupby("step").mean(numeric_only=True).reset_index()


def _read_csvs(results: Results, variant: str, name: str) -> list[pd.DataFrame]:
    return [pd.read_csv(p) for d in results.seed_dirs(variant) if (p := d / name).exists()]


def _curves_figure(results: Results, path: Path) -> None:
    fig, axes = _figure()
    ax = axes[0, 0]
    for v in results.study.variants:
        frames = [
            pd.DataFrame(
                {
                    "step": f["step"],
                    "reward": f["reward"],
                    "rollouts": f["num_rollouts"].fillna(0).cumsum(),
                }
            )
            for f in _read_csvs(results, v, "train.csv")
            if {"reward", "num_rollouts"} <= set(f.columns)
        ]
        mean = _seed_mean(frames)
        if mean is not None:
            ax.plot(mean["rollouts"], mean["reward"], label=v)
    ax.set(
        xlabel="rollouts",
        ylabel="training reward (mean over seeds)",
        title=f"{results.name}: training reward",
    )
    if ax.lines:
        ax.legend(fontsize=7)
    fig.savefig(path, format="png", dpi=110)


def _dynamics_figure(results: Results, path: Path) -> None:
    """One column per variant in `study.dynamics`; rows: confidence inflation, advantage
    contraction, hierarchical convergence (group accuracy per level)."""
    variants = results.study.dynamics
    fig, axes = _figure(3, len(variants), (3.6 * len(variants), 8.0))
    panels = [
        ("confidence.csv", lambda c: c in ("logp_correct", "logp_incorrect"), "mean log-prob"),
        ("advantage.csv", lambda c: c in ("adv_abs_p50", "zero_adv_frac"), "advantage"),
        ("convergence.csv", lambda c: re.fullmatch(r"level\d+", c) is not None, "group accuracy"),
    ]
    for j, v in enumerate(variants):
        for i, (name, wanted, ylabel) in enumerate(panels):
            ax = axes[i, j]
            mean = _seed_mean(_read_csvs(results, v, f"dynamics/{name}"))
            for col in [] if mean is None else [c for c in mean.columns if wanted(c)]:
                ax.plot(mean["step"], mean[col], marker=".", label=col)
            if ax.lines:
                ax.legend(fontsize=6)
            else:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
            ax.set(xlabel="step", ylabel=ylabel if j == 0 else "", title=v if i == 0 else "")
    fig.savefig(path, format="png", dpi=110)


# ---------------------------------------------------------------------------------------------
# Findings


def write_findings(reports_root: Path, target: Path) -> Path:
    """`target` (docs/findings.md): every report's claims and verdicts, in one table."""
    summaries = [
        json.loads(p.read_text()) for p in sorted(Path(reports_root).glob("*/summary.json"))
    ]
    claims = [(s, c) for s in summaries for c in s["claims"]]
    counts = {
        v: sum(c["verdict"] == v for _, c in claims)
        for v in ("reproduced", "not reproduced", "inconclusive")
    }
    ns = [ch["n"] for _, c in claims for ch in c["checks"]]
    out = [
        "# Findings",
        "",
        "_Generated by `python -m stages.study_report findings` from the study reports; do not "
        "edit._",
        "",
        f"{len(claims)} claims: {counts['reproduced']} reproduced, {counts['not reproduced']} "
        f"not reproduced, {counts['inconclusive']} inconclusive, over studies "
        f"{', '.join(s['name'] for s in summaries) or '(none)'}; each with ≥{min(ns, default=0)} "
        "training seeds.",
        "",
    ]
    rows = []
    for s, c in claims:
        link = os.path.relpath(Path(reports_root) / f"{s['name']}.md", target.parent)
        rows.append(
            [
                f"[{s['name']}]({Path(link).as_posix()})",
                c["claim"],
                c["paper"],
                "; ".join(ch["text"] for ch in c["checks"]),
                f"**{c['verdict']}**",
                f"`dvc repro studies/{s['name']}/dvc.yaml`",
            ]
        )
    out += _table(["study", "claim", "paper's number", "ours", "verdict", "rerun"], rows)
    with atomic_path(target) as tmp:
        tmp.write_text("\n".join(out) + "\n")
    return target
