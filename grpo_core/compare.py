"""Experiments side by side, the way a researcher reads them: held-out accuracy first.

`records` turns the JSON of `dvc exp show --json` into one `Record` per revision (the
workspace, baseline commits, their experiments); `build` makes the table: the policy's
accuracy from metrics/eval.json (per level for one source, per source for several), its
difference to a baseline row in points, the base model once, the cost from
metrics/train.json when a run wrote one, and only the params that differ between the rows.
`render` lays it out as plain text in a fixed width, so piped output reads like a terminal's.

Last-step training metrics (reward, entropy) are left out on purpose: they are curves (`dvc
plots diff`), and a run's last reward ranks algorithms wrongly: it is measured on the questions
the algorithm chose to train on (CoDaPO's odd steps resample the ones it selected), not on one
fixed set. The command never reads metrics/train/ (dvclive's step metrics).
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import dataclass, field

EVAL = "metrics/eval.json"
TRAIN = "metrics/train.json"
PARAMS = "params.yaml"
STUDIES = "studies/"  # studies/<name>/study.yaml: params of a study, not of the experiments
WIDTH = 120
MISSING = "—"
Z95 = 1.959964  # two-sided 95% normal quantile
LABEL_MAX = 24  # a longer row name folds onto the next line


@dataclass(frozen=True)
class Record:
    """What DVC knows about one revision."""

    label: str  # "workspace", the commit's branch or short sha, or the experiment's name
    rev: str  # "workspace" or the full commit sha
    kind: str  # "workspace" | "commit" | "experiment"
    params: dict[str, object]  # params.yaml flattened to dotted keys (other files: "file:key")
    eval: dict | None  # metrics/eval.json; None when the revision has none
    train: dict | None = None  # metrics/train.json (steps, rollouts, warnings) if declared
    note: str | None = None  # why `eval` is None: DVC's error, or a queued/running/failed run
    parent: str | None = None  # an experiment's baseline commit
    created: str = ""  # ISO timestamp ("" for the workspace)


def flatten(tree: dict, prefix: str = "") -> dict[str, object]:
    """{"train": {"lr": 1}} -> {"train.lr": 1}; lists are values, not branches."""
    out: dict[str, object] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _file(files: dict, path: str) -> tuple[dict | None, str | None]:
    """The contents of one metrics file of an exp-show entry, or why there are none."""
    entry = (files or {}).get(path)
    if entry is None:
        return None, None
    if entry.get("error"):
        err = entry["error"]
        if err.get("type") == "FileNotFoundError":
            return None, "not found"
        return None, f"{err.get('type') or 'error'}: {err.get('msg') or ''}".strip(": ")
    return entry.get("data") or {}, None


def _record(state: dict, kind: str, parent: str | None, run_state: str | None) -> Record:
    rev = state["rev"]
    label = state.get("name") or ("workspace" if rev == "workspace" else rev[:7])
    data = state.get("data") or {}
    params: dict[str, object] = {}
    for path, entry in (data.get("params") or {}).items():
        if path.startswith(STUDIES):  # a study's own params file (its dvc.yaml's vars)
            continue
        values = (entry or {}).get("data") or {}
        params.update(flatten(values, "" if path == PARAMS else f"{path}:"))
    metrics = data.get("metrics") or {}
    evaluation, note = _file(metrics, EVAL)
    train, _ = _file(metrics, TRAIN)
    if state.get("error"):
        note = state["error"].get("msg") or "error"
    if run_state in ("queued", "running", "failed"):
        # its files are the baseline's until its own `evaluate` has run: not its results
        evaluation, note = None, f"{run_state} experiment"
    return Record(
        label=label,
        rev=rev,
        kind=kind,
        params=params,
        eval=evaluation or None,
        train=train or None,
        note=None if evaluation else note,
        parent=parent,
        created=data.get("timestamp") or "",
    )


def records(exp_show: list[dict]) -> list[Record]:
    """One Record per revision of `dvc exp show --json`: the workspace, each baseline commit,
    then that commit's experiments (the newest commit of each experiment's range)."""
    out = []
    for entry in exp_show:
        kind = "workspace" if entry["rev"] == "workspace" else "commit"
        out.append(_record(entry, kind, None, None))
        for exp_range in entry.get("experiments") or []:
            if exp_range.get("revs"):
                run_state = (exp_range.get("executor") or {}).get("state")
                state = dict(exp_range["revs"][0])
                state["name"] = exp_range.get("name") or state.get("name")
                out.append(_record(state, "experiment", entry["rev"], run_state))
    return out


def metric_keys(rows: list[Record]) -> set[str]:
    """The per-benchmark keys of the policy in the rows' eval files (accuracy, greedy, ...)."""
    return {
        key
        for row in rows
        for source, values in (row.eval or {}).get("policy", {}).items()
        if source != "by_domain" and isinstance(values, dict)
        for key in values
    }


def find(rows: list[Record], key: str) -> Record | None:
    """The row named `key` (its label, or a prefix of 4+ characters of its commit sha)."""
    for row in rows:
        if key == row.label:
            return row
    for row in rows:
        if len(key) >= 4 and row.rev != "workspace" and row.rev.startswith(key):
            return row
    return None


@dataclass
class Column:
    """A metric column: its header and, per row label, the value and the difference (points)."""

    head: str
    values: dict[str, str] = field(default_factory=dict)
    deltas: dict[str, str] = field(default_factory=dict)


@dataclass
class Table:
    """The comparison before layout: what every cell says."""

    title: list[str]  # lines above the table
    labels: list[str]  # the rows top to bottom as shown: "* " marks the baseline, "[i]" a footnote
    baseline: str  # the baseline's label as shown
    metrics: list[Column]  # accuracy columns, then cost columns
    params: dict[str, dict[str, str]]  # changed dotted key -> row label -> value
    footnotes: list[str]  # footnote i + 1, marked "[i + 1]" on its row
    notes: list[str] = field(default_factory=list)


BASE = "base model"


def pct(x: float | None) -> str:
    return MISSING if x is None else f"{100 * x:.1f}"


def delta(x: float | None, ref: float | None) -> str:
    """x - ref in percentage points, signed, one decimal; "0.0" when it rounds to zero (never
    "-0.0"); "" when either is missing."""
    if x is None or ref is None:
        return ""
    d = round(100 * (x - ref), 1)
    return "0.0" if d == 0 else f"{d:+.1f}"


def noise_points(n: int, p: float = 0.5) -> float:
    """Half-width, in points, of the 95% interval of the difference between two accuracies each
    measured on n independent Bernoulli draws: z * sqrt(2 p (1 - p) / n). p = 1/2 maximizes it,
    so a difference smaller than this is within evaluation noise at any accuracy."""
    return 100 * Z95 * math.sqrt(2 * p * (1 - p) / n)


def fmt_param(value: object) -> str:
    """A param as params.yaml spells it, compact: 7e-05, [3,4], true, null."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def changed_params(rows: list[Record]) -> list[str]:
    """The dotted keys whose value is not the same in every row (absent counts as a value), in
    params.yaml order."""
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row.params if k not in keys]
    return [k for k in keys if len({json.dumps(r.params.get(k, MISSING)) for r in rows}) > 1]


def order(rows: list[Record], baseline: Record) -> list[Record]:
    """The baseline first, then the other commits and experiments oldest first (the order they
    were run in), the workspace last."""
    rest = sorted(
        (r for r in rows if r is not baseline and r.kind != "workspace"), key=lambda r: r.created
    )
    return [baseline, *rest, *(r for r in rows if r is not baseline and r.kind == "workspace")]


def build(rows: list[Record], baseline: Record, metric: str = "accuracy") -> Table:
    """The table of `rows` against `baseline` (one of them): the policy's `metric` per source
    (and per level when there is one source and the metric is accuracy) with its difference to
    the baseline, the base model once, cost columns when a row has metrics/train.json, and the
    params that differ between the rows."""
    rows = order(rows, baseline)
    labels: dict[int, str] = {}
    footnotes: list[str] = []
    names = [_name(r, rows) for r in rows]
    apart: set[int] = set()  # rows on another base or eval set than the baseline: no Δ
    for row, name in zip(rows, names, strict=True):
        label = ("* " if row is baseline else "") + name
        if names.count(name) > 1:  # one experiment name on two commits
            label += f" ({row.rev[:7]})"
        if row.eval is None:
            why = f" ({row.note})" if row.note else ""
            footnotes.append(f"{row.label}: {MISSING}, no {EVAL}{why}")
            label += f" [{len(footnotes)}]"
        elif row is not baseline and (why := other_inputs(row, baseline)):
            apart.add(id(row))
            footnotes.append(f"{row.label}: no Δ, {why}")
            label += f" [{len(footnotes)}]"
        labels[id(row)] = label

    sources = _sources(rows)
    per_level = len(sources) == 1 and metric == "accuracy"
    keys = [(s, metric, s) for s in sources]
    if per_level:
        keys += [(sources[0], lv, f"L{lv[5:]}") for lv in _levels(rows, sources[0])]
    base_eval = next((r.eval for r in rows if r.eval), None)  # the baseline's if it has one
    shown = [(labels[id(r)], r.eval, "policy") for r in rows]
    if base_eval is not None:
        shown.insert(0, (BASE, base_eval, "base"))
    columns = []
    for source, key, head in keys:
        ref = _value(baseline.eval, "policy", source, key)
        col = Column(head)
        for label, evaluation, model in shown:
            x = _value(evaluation, model, source, key)
            col.values[label] = pct(x)
            col.deltas[label] = "" if label == labels[id(baseline)] else delta(x, ref)
        for row in rows:
            if id(row) in apart:
                col.deltas[labels[id(row)]] = ""
        columns.append(col)
    columns += _cost(rows, labels)

    k = baseline.params.get("eval.samples")
    what = f"{metric} (avg@{k})" if metric == "accuracy" and k else metric
    title = [
        f"Held-out {what} of the policy, % ({EVAL}); Δ: points vs the baseline (*)",
        f"{BASE}: before RL" + ("; Lk: level k" if per_level else ""),
    ]
    return Table(
        title=title,
        labels=[label for label, _, _ in shown],
        baseline=labels[id(baseline)],
        metrics=columns,
        params={
            key: {labels[id(r)]: fmt_param(r.params.get(key, MISSING)) for r in rows}
            for key in changed_params(rows)
        },
        footnotes=footnotes,
        notes=_notes(rows, baseline, sources, per_level, apart),
    )


PROVENANCE = {"base": "base model (models/base)", "eval_set": "eval set"}


def provenance(row: Record) -> dict | None:
    """`provenance` of the row's metrics/eval.json (content hashes of the base model, the
    policy and the eval set); None for a run evaluated before it was recorded."""
    found = (row.eval or {}).get("provenance")
    return found if isinstance(found, dict) else None


def other_inputs(row: Record, baseline: Record) -> str | None:
    """Why `row` cannot be compared with `baseline` (another base model or eval set, by their
    recorded hashes), None if it can or if either run predates the record."""
    mine, theirs = provenance(row), provenance(baseline)
    if mine is None or theirs is None:
        return None
    mine, theirs = ({k: p.get(k) for k in PROVENANCE} for p in (mine, theirs))
    what = [
        f"another {PROVENANCE[k]} ({mine[k]}, the baseline's {theirs[k]})"
        for k in PROVENANCE
        if mine[k] != theirs[k]
    ]
    return f"trained or evaluated on {' and '.join(what)}" if what else None


def _name(row: Record, rows: list[Record]) -> str:
    """The row's label; the workspace says which experiment it holds (after `dvc exp run` it
    holds the last one's params and results)."""
    if row.kind != "workspace":
        return row.label
    twin = next(
        (
            r.label
            for r in rows
            if r is not row and r.eval and (r.params, r.eval) == (row.params, row.eval)
        ),
        None,
    )
    return f"workspace (= {twin})" if twin else row.label


def _value(evaluation: dict | None, model: str, source: str, key: str) -> float | None:
    try:
        value = evaluation[model][source][key]  # type: ignore[index]
    except (KeyError, TypeError):
        return None
    return float(value) if isinstance(value, int | float) else None


def _sources(rows: list[Record]) -> list[str]:
    """The benchmarks (`source` keys) of the rows' eval files, first seen first."""
    seen: list[str] = []
    for row in rows:
        for source in (row.eval or {}).get("policy", {}):
            if source != "by_domain" and source not in seen:
                seen.append(source)
    return seen


def _levels(rows: list[Record], source: str) -> list[str]:
    keys = {k for r in rows for k in ((r.eval or {}).get("policy", {}).get(source) or {})}
    return sorted((k for k in keys if k.startswith("level")), key=lambda k: int(k[5:]))


def _compact(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.1f}k" if n >= 1e4 else f"{n:g}"


def _cost(rows: list[Record], labels: dict[int, str]) -> list[Column]:
    """steps and rollouts from metrics/train.json, when a row has them."""
    out = []
    for key in ("steps", "rollouts"):
        if any(isinstance((r.train or {}).get(key), int | float) for r in rows):
            col = Column(key)
            for row in rows:
                value = (row.train or {}).get(key)
                ok = isinstance(value, int | float) and not isinstance(value, bool)
                col.values[labels[id(row)]] = _compact(value) if ok else MISSING
            out.append(col)
    return out


def _notes(rows: list[Record], baseline: Record, sources: list[str], per_level: bool,
           apart: set[int] = frozenset()) -> list[str]:  # fmt: skip
    notes = []
    if apart:
        names = ", ".join(r.label for r in rows if id(r) in apart)
        notes.append(
            f"{names}: not compared with {baseline.label}, which ran from another base model or "
            "eval set: a difference would mix the base with the variant (docs/pipeline.md#the-"
            "same-run-on-every-machine). Make a baseline on this base, `dvc exp run --temp -n "
            "grpo`, and compare against it: `python -m stages.compare --baseline grpo`."
        )
    first = next((r for r in rows if r.eval), None)  # the baseline when it has an eval
    base = (first.eval or {}).get("base") if first else None
    other = [r for r in rows if r.eval and id(r) not in apart and r.eval.get("base") != base]
    if first and other:
        known = all(provenance(r) is not None for r in [first, *other])
        other = [r.label for r in other]
        why = (
            "the same base model and eval set by their hashes: an eval param changed"
            if known
            else "another base model (a model or data param, or another machine: the tiny "
            "base is rebuilt by each), or an eval param"
        )
        notes.append(
            f"The base model's accuracy differs in {', '.join(other)} ({why}): '{BASE}' is "
            f"{first.label}'s."
        )
    for row in rows:
        warnings = (row.train or {}).get("warnings")
        count = len(warnings) if isinstance(warnings, list) else warnings
        if isinstance(count, int) and count > 0:
            notes.append(f"{row.label}: {count} training warning(s) in {TRAIN}.")
    if not any(r.kind == "experiment" for r in rows):
        notes.append(
            "No experiments here yet: `dvc exp run -S algo=codapo` makes one; --all shows "
            "the experiments of every commit."
        )
    notes.append(_noise(baseline, sources, per_level))
    return notes


def _noise(baseline: Record, sources: list[str], per_level: bool) -> str:
    """What one seed per row allows one to say, from the eval size in the baseline's params
    (tiny-world sources only: a benchmark's size is not a param)."""
    p = baseline.params
    samples, per = p.get("eval.samples"), p.get("data.eval_per_level")
    levels, domains = p.get("data.levels"), p.get("data.domains") or []
    head = "Each row is one training seed, so no interval of a difference can be computed"
    tail = "Seed-to-seed variation comes on top: for intervals, run seeds (docs/studies.md)."
    known = [s for s in sources if s in domains]
    sizes = isinstance(samples, int) and isinstance(per, int) and isinstance(levels, list)
    if not (known and sizes):
        return f"{head}; the eval size is not in params. {tail}"
    questions = per * len(levels)
    overall = f"±{noise_points(questions * samples):.1f} points"
    agree = f"±{noise_points(questions):.1f}"
    if per_level:
        overall += f" (±{noise_points(per * samples):.1f} per level)"
        agree += f" (±{noise_points(per):.1f})"
    each = "each of " if len(known) > 1 else ""
    text = (
        f"{head}. Evaluation noise alone: differences under {overall} are noise (95% "
        f"half-width of a difference of two binomial accuracies at p = 1/2 over {questions} "
        f"questions ({per} per level) × {samples} samples of {each}{', '.join(known)} taken as "
        f"independent; {agree} if a question's {samples} samples always agree)."
    )
    unknown = [s for s in sources if s not in domains]
    if unknown:
        text += f" {', '.join(unknown)}: size not in params (wider on a small benchmark)."
    return f"{text} {tail}"


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def render(table: Table, width: int = WIDTH) -> str:
    """Plain text, no line over `width` characters: the row names, the metric columns (value
    and Δ), then the changed params as columns when they fit, else on indented lines under each
    row. Metric columns that do not fit go to a further block that repeats the row names."""
    label_w = min(LABEL_MAX, max(len(x) for x in [*table.labels, "experiment"]))
    blocks: list[list[list[str]]] = [[]]
    used = label_w
    for col in table.metrics:
        cell = _metric_cells(col, table.labels)
        if blocks[-1] and used + len(cell[0]) + 2 > width:
            blocks.append([])
            used = label_w
        blocks[-1].append(cell)
        used += len(cell[0]) + 2
    params = [[key, *(table.params[key].get(x, "") for x in table.labels)] for key in table.params]
    widths = [max(map(len, col)) for col in params]
    inline = used + sum(w + 2 for w in widths) <= width
    if inline:
        blocks[-1] += [[x.ljust(w) for x in col] for col, w in zip(params, widths, strict=True)]

    out = [line for text in table.title for line in _wrap(text, width)]
    for block in blocks:
        out.append("")
        for i, label in enumerate(["experiment", *table.labels]):
            names = _wrap(label, label_w)
            out.append("  ".join([names[0].ljust(label_w), *(c[i] for c in block)]).rstrip())
            out += names[1:]
            if not inline and block is blocks[-1] and i > 0:
                out += _params_below(table, label, width)
    out.append("")
    for i, note in enumerate(table.footnotes):
        out += _wrap(f"[{i + 1}] {note}", width)
    for note in table.notes:
        out += _wrap(note, width)
    return "\n".join(out) + "\n"


def _params_below(table: Table, label: str, width: int) -> list[str]:
    """A row's changed params on indented lines: all of them under the baseline, under any
    other row those whose value differs from the baseline's."""
    tokens = [
        f"{key}={values[label]}"
        for key, values in table.params.items()
        if label in values and (label == table.baseline or values[label] != values[table.baseline])
    ]
    return ["    " + line for line in _wrap(", ".join(tokens), width - 4)] if tokens else []


def _metric_cells(col: Column, labels: list[str]) -> list[str]:
    """One column as equal-width strings, header first: "value Δ" ("62.2 +1.3"), or the value
    alone for a column without differences (cost)."""
    values = [col.head, *(col.values.get(x, "") for x in labels)]
    deltas = ["Δ", *(col.deltas.get(x, "") for x in labels)]
    vw = max(map(len, values))
    if not any(deltas[1:]):
        return [v.rjust(vw) for v in values]
    dw = max(map(len, deltas))
    return [f"{v:>{vw}} {d:>{dw}}" for v, d in zip(values, deltas, strict=True)]
