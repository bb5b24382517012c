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
from pathlib import Path

import numpy as np

from grpo_core.io import atomic_path, write_json
from grpo_core.studies import audit, figures, stats
from grpo_core.studies.claims import (
    MIN_SIGNAL,
    Verdicts,
    claim_results,
    claim_signal,
    precondition_results,
    signal_text,
)
from grpo_core.studies.results import (
    ALL,
    BASE,
    MINUS,
    TOKEN_KEYS,
    Results,
    accuracy_interval,
    difference,
    label,
    load_results,
    replication,
)
from grpo_core.studies.spec import BAND


def write_report(study_dir: Path, out_root: Path) -> Path:
    """out_root/<name>.md and out_root/<name>/ (figures, summary.json); returns the .md path."""
    results = load_results(study_dir)
    study, name = results.study, results.name
    claims = claim_results(results)
    with atomic_path(out_root / name) as folder:
        folder.mkdir()
        figures.accuracy_figure(results, folder / "accuracy.png")
        figures.difference_figure(results, folder / "difference.png")
        figures.curves_figure(results, folder / "curves.png")
        if study.dynamics:
            figures.dynamics_figure(results, folder / "dynamics.png")
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
        "preconditions": [
            {
                "what": p.precondition.what,
                "value": num(p.value),
                "n": p.n,
                "holds": p.holds,
                "text": p.text,
            }
            for p in precondition_results(results)
        ],
        "claims": [
            {
                "id": claim.id,
                "claim": claim.claim,
                "paper": claim.paper,
                "source": claim.source,
                "tiny_world": claim.tiny_world,
                "transfer": claim.transfer,
                "verdict": verdict.verdict,
                "note": verdict.note,
                "signal": claim_signal(results, claim),
                "checks": [
                    {
                        "variant": r.check.variant,
                        "baseline": r.check.baseline,
                        "metric": r.check.metric,
                        "level": r.check.level if r.check.metric == "accuracy" else None,
                        "expect": r.check.expect,
                        "effect": r.check.effect,
                        "why": r.check.why,
                        "mean": num(r.interval.mean),
                        "lo": num(r.interval.lo),
                        "hi": num(r.interval.hi),
                        "n": r.interval.n,
                        "outcome": r.outcome.verdict,
                        "note": r.outcome.note,
                        "seeds_to_decide": r.outcome.seeds_to_decide,
                        "detectable": num(r.detectable),
                        "seed_spread": num(stats.seed_spread(r.interval)),
                        "confidence": r.interval.confidence,
                        "noise_floored": r.interval.floored,
                        "eval_noise": num(r.eval_noise),
                        "text": r.text,
                    }
                    for r in checks
                ],
            }
            for claim, checks, verdict in claims
        ],
        "band": list(results.study.band),
        "movable_levels": results.movable_levels(),
        "base_accuracy": {str(lv): acc for lv, acc in results.base_accuracy().items()},
        "grpo_arm": _grpo_arm(results),
    }


def _grpo_arm(results: Results) -> dict | None:
    """The study's plain GRPO arm (`grpo_arm`), what it trains on, and its paired difference
    to the base at every reported level: what the findings read the capacity boundary from."""
    study = results.study
    if study.grpo_arm is None:
        return None
    overrides = {**study.params, **study.variants[study.grpo_arm]}
    vs_base = {}
    for level in results.reported_levels():
        d = difference(results, study.grpo_arm, BASE, level)
        vs_base[str(level)] = {
            "mean": None if math.isnan(d.mean) else d.mean,
            "lo": None if math.isnan(d.lo) else d.lo,
            "hi": None if math.isnan(d.hi) else d.hi,
            "n": d.n,
        }
    levels = overrides.get("train.levels")
    return {
        "variant": study.grpo_arm,
        "trains": _overrides({k: v for k, v in overrides.items() if k.startswith("train.")}),
        "train_levels": None if levels is None else [int(lv) for lv in levels],
        "vs_base": vs_base,
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


METHOD = f"""\
Each cell is evaluated on the eval split with k samples per question: a question's accuracy is
avg@k, the fraction of its k samples that are correct. A cell's accuracy at a level is the mean
over that level's questions ("all": over the questions of every reported level). The unit of
replication is the training seed: accuracies are the mean over seeds with a 95% Student-t
interval (n - 1 degrees of freedom, scipy.stats). A difference between two variants is paired
by seed and question (both evaluated with the same eval seed): per seed the mean over their
common questions of variant - baseline, then the t interval over seeds; the base model is
evaluated at each seed too. A metric other than accuracy is a key of the cells' summaries (a
first/last pair counts as last - first), taken per seed, minus the baseline's at the same seed
when the check has one.

A claim is read only where something can move. An accuracy check at a level where the base
solves less than {BAND[0]:.0%} or more than {BAND[1]:.0%} (or outside the `band` the study states)
is **not testable here** (the floor or
the ceiling); an "all" check reads the levels inside that band. A claim is not testable either
when an arm it compares barely trains: fewer than {MIN_SIGNAL:.0%} of its groups with reward
spread (the share is stated per claim), or when one of the study's preconditions fails.

Every check states its direction and its smallest effect of interest E (the paper's size where
it gives one, translated to the tiny world; otherwise a stated margin). Three seeds estimate
their own spread poorly, so the interval is widened twice where it must be: a claim with m > 1
checks, any one of which can decide it, takes each interval at 1 - 0.05 / m (Bonferroni); and
where the spread between seeds is below the evaluation's own noise in a seed's difference (k
samples per question, which that spread contains), the interval's sd is that noise. The check
says when either applies. From the interval [lo, hi], in this order: *better* is
**reproduced** when lo > 0 ("smaller than the smallest effect of interest" when hi < E too),
shows **no effect** when the interval holds 0 inside [-E, E], is **contradicted** when hi < E
(the interval rules out the claimed effect, or lies below 0), and is **inconclusive**
otherwise, with the seeds that would decide it with 80% power were the observed mean and
spread the true ones; *worse* mirrors it. *different* is tested two-sided: reproduced when the
interval excludes 0, no effect when it holds 0 inside [-E, E]. *equal* is reproduced when the
interval lies inside [-E, E] and contradicted when it lies wholly outside. One seed gives no
interval, and a zero-width interval (every seed gave the same value, and no evaluation noise)
is refused: both are inconclusive. "detectable" is the smallest difference the seeds detect
with 80% power at the interval's sd. A claim takes its weakest check's verdict (not testable,
contradicted, then no effect, then inconclusive, then reproduced)."""


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
    out += ["", replication(results)]
    out += [
        "",
        "Every cell trains with params.yaml and "
        + (_overrides(study.params) or "nothing else")
        + f"; budget: {_overrides(study.budget.model_dump(exclude_none=True))}. Variants:",
        "",
    ]
    out += [f"- `{v}`: {_overrides(o) or 'no overrides'}" for v, o in study.variants.items()]
    out += ["", "## Method", "", METHOD]
    if study.band != BAND:
        lo, hi = study.band
        out += ["", f"This study states its own band: it reads the levels where the base solves "
                f"{lo:.0%}-{hi:.0%} (study.yaml `band`)."]  # fmt: skip
    pres = precondition_results(results)
    if pres:
        out += ["", "## Preconditions", ""]
        out += [f"- {p.text}" for p in pres]
    out += ["", "## Verdicts", ""]
    out += _table(
        ["id", "claim", "paper's number", "ours", "trains (groups with reward spread)", "verdict"],
        [
            [
                f"`{c.id}`",
                c.claim,
                c.paper,
                "; ".join(r.text for r in checks),
                signal_text(claim_signal(results, c)),
                f"**{verdict}**",
            ]
            for c, checks, verdict in claims
        ],
    )
    out += ["", "## Precision: what the seeds can detect", ""]
    out += [
        "Per check: the smallest effect of interest; the smallest difference its seeds detect "
        "with 80% power at the interval's sd (the seeds' spread, or the evaluation's noise where "
        "that is larger) and confidence; the spread between seeds (the sd of the per-seed "
        "differences); and the evaluation's own noise in a seed's difference (k samples per "
        "question), which should be at most half the spread: otherwise more samples per "
        "question, not more seeds, narrow the interval.",
        "",
    ]
    out += _table(
        ["check", "smallest effect of interest", "detectable (80% power)", "seed spread (sd)",
         "eval noise (sd)", "seeds", "source"],
        [
            [
                r.text.split(":")[0],
                _size(r.check.effect, r.check.metric),
                _size(r.detectable, r.check.metric),
                _size(stats.seed_spread(r.interval), r.check.metric),
                _size(r.eval_noise, r.check.metric),
                str(r.interval.n),
                r.check.why or "–",
            ]
            for _, checks, _ in claims
            for r in checks
        ],
    )  # fmt: skip
    out += ["", "## Accuracy (%, mean [95% interval] over seeds)", ""]
    out += _table(
        ["variant", *heads],
        [
            [label(results, v), *(_pct(accuracy_interval(results, v, c)) for c in columns)]
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
                *(_pct(difference(results, v, b, c), signed=True) for c in columns),
            ]
            for v, b in pairs
        ],
    )
    out += [
        "",
        "## Per seed (%; in brackets the difference to the base at that seed, with its paired se "
        "over questions)",
        "",
    ]
    out += _table(["variant", "seed", *heads], _per_seed_rows(results, columns))
    out += ["", "## Cost (mean over seeds)", ""]
    out += _table(
        ["variant", "seeds", "steps", "rollouts", "guide rollouts", "train", "total"],
        _cost_rows(results),
    )
    out += [
        "",
        f"Compute: {_clock(_wall_total(results))} (the total wall time of the "
        f"{results.cells_done} done cells).",
        "",
        "## Dynamics (mean over seeds; first → last quarter of training)",
        "",
    ]
    out += _table(["variant", "rel_update", "changed_frac", *TOKEN_KEYS], _dynamics_rows(results))
    head, forms = audit.form_table(results)
    if forms:
        out += ["", "## What the policies wrote (sampled evaluation completions, every seed)", ""]
        out += [
            "Per arm and level: the completions, the share rewarded, and how the rewarded ones "
            "gave their answer (boxed; stated: a final-answer statement with nothing boxed; "
            "program; other: none of the domain's forms, which the verifiers never pay). "
            "Then each arm's most common shapes of rewarded completions (digits as #, ⏎ a "
            "line break), with one of them as written: a shortcut or a hack shows here "
            "(grpo_core/studies/audit.py).",
            "",
        ]
        out += _table(head, forms)
        out += [""]
        out += _table(
            ["arm", "shape", "rewarded completions", "an example"], audit.common_shapes(results)
        )
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


def _overrides(overrides: dict) -> str:
    return ", ".join(f"`{k}={json.dumps(v)}`" for k, v in overrides.items())


def _size(x: float, metric: str) -> str:
    if math.isnan(x):
        return "–"
    return f"{100 * x:.1f} pts" if metric == "accuracy" else f"{x:.4g}"


def _pct(interval: stats.Interval, signed: bool = False) -> str:
    return "–" if interval.n == 0 else interval.fmt(signed=signed)


def _clock(seconds: float) -> str:
    if math.isnan(seconds):
        return "–"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def _mean(values: list) -> float:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else math.nan


def _per_seed_rows(results: Results, columns: list[int | str]) -> list[list[str]]:
    """One row per evaluated model and seed: its accuracy per column and, for a variant, the
    mean difference to the base evaluated at the same seed with the se of that mean over
    the questions both answered (the evaluation's uncertainty alone, not the seed's)."""
    rows = []
    for seed in results.study.seeds:
        base = results.accuracy.get(BASE, {}).get(seed)
        for variant in (BASE, *results.study.variants):
            acc = results.accuracy.get(variant, {}).get(seed)
            if acc is None:
                continue
            cells = []
            for column in columns:
                qs = sorted(results.questions(column) & set(acc))
                cell = f"{100 * np.mean([acc[q] for q in qs]):.1f}" if qs else "–"
                common = [q for q in qs if base is not None and q in base]
                if variant != BASE and len(common) > 1:
                    d = np.array([acc[q] - base[q] for q in common])
                    se = d.std(ddof=1) / np.sqrt(len(d))
                    cell += f" ({100 * d.mean():+.1f}, se {100 * se:.1f})"
                cells.append(cell)
            rows.append([label(results, variant), str(seed), *cells])
    return rows


def _cost_rows(results: Results) -> list[list[str]]:
    rows = []
    for v in results.study.variants:
        cells = list(results.summaries.get(v, {}).values())
        rows.append(
            [
                label(results, v),
                str(len(cells)),
                _num(_mean([c.get("steps") for c in cells]), ".0f"),
                _num(_mean([c.get("rollouts") for c in cells]), ",.0f"),
                _num(_mean([c.get("guide_rollouts") for c in cells]), ",.0f"),
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
        row = [label(results, v)]
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
