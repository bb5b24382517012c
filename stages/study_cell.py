"""The stages of a study (studies/<name>/dvc.yaml; grpo_core/studies): each runs pipeline stages
in a scratch workspace, studies/<name>/.work/<stage>/, that links the main pipeline's data and
base model and holds the merged params.yaml, then keeps only small results.

    python -m stages.study_cell upstream STUDY_DIR        # profile + guide under the study's params
    python -m stages.study_cell base STUDY_DIR SEED       # the base model, eval seed SEED
    python -m stages.study_cell cell STUDY_DIR VARIANT SEED

- upstream -> STUDY_DIR/upstream/{profile,guides}.parquet (cached by DVC);
- base -> STUDY_DIR/base/SEED/questions.parquet and STUDY_DIR/base/SEED.json;
- cell -> STUDY_DIR/cells/VARIANT-SEED/ (questions.parquet: per-question avg@k and greedy;
  train.csv: the step metrics; dynamics/*.csv: the token and weight dynamics; run.json: the
  resolved train params and last-step metrics) and STUDY_DIR/cells/VARIANT-SEED.json (the
  cell's summary, a DVC metrics file: accuracy by level, rollouts, steps, wall time).

Results are kilobytes and live in git (`cache: false`), so a commit carries its report's
inputs. A killed cell keeps its workspace: rerun, its train stage resumes from the last
checkpoint.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import yaml

from grpo_core.analysis.difficulty import is_correct
from grpo_core.analysis.evaluation import summarize
from grpo_core.config.core import parse_params, read_yaml
from grpo_core.config.eval import EvaluateStage
from grpo_core.data.schema import read_problems
from grpo_core.errors import InputError
from grpo_core.io import atomic_path, write_json, write_parquet
from grpo_core.studies.spec import (
    Study,
    cell_key,
    cell_params,
    check_params,
    load_study,
    upstream_params,
)
from stages.evaluate import sample_model

ROOT = Path.cwd()
SHARED = ("models/base", "data/prepared", "configs")  # from the main pipeline
STEP_METRICS = "metrics/train/plots/metrics"


def _link(ws: Path, rel: str, target: Path) -> None:
    link = ws / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target.resolve())


def workspace(study_dir: Path, name: str, params: dict, upstream: bool = True) -> Path:
    """studies/<name>/.work/<name>/ with the shared inputs linked and `params` as params.yaml.
    An existing workspace (a killed run's) is kept: the train stage resumes from it."""
    ws = study_dir / ".work" / name
    ws.mkdir(parents=True, exist_ok=True)
    for rel in SHARED:
        if not (ROOT / rel).exists():
            raise InputError(f"{rel}: missing; run the main pipeline first (dvc repro)")
        _link(ws, rel, ROOT / rel)
    if upstream:
        for name_ in ("profile.parquet", "guides.parquet"):
            _link(ws, f"data/{name_}", study_dir / "upstream" / name_)
    (ws / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return ws


def run_stage(module: str, ws: Path) -> float:
    """`python -m module` in the workspace; its wall time in seconds."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", module], cwd=ws, env=env)
    if done.returncode:
        raise SystemExit(f"error: {module} failed in {ws} (exit {done.returncode})")
    return time.perf_counter() - start


def per_question(sampled: list[dict], greedy: list[dict]) -> pa.Table:
    """One row per question: avg@k (the mean of its sampled completions' correctness) and
    its greedy completion's correctness (null without greedy decoding)."""
    rows: dict[str, dict] = {}
    for r in sampled:
        q = rows.setdefault(
            r["id"],
            {k: r[k] for k in ("id", "source", "domain", "level")} | {"n": 0, "correct": 0},
        )
        q["n"] += 1
        q["correct"] += int(is_correct(r["reward"]))
    best = {r["id"]: float(is_correct(r["reward"])) for r in greedy}
    return pa.Table.from_pylist(
        [
            {**{k: q[k] for k in ("id", "source", "domain", "level")},
             "accuracy": q["correct"] / q["n"], "greedy": best.get(q["id"])}
            for q in rows.values()
        ],
        schema=pa.schema(
            [("id", pa.string()), ("source", pa.string()), ("domain", pa.string()),
             ("level", pa.int64()), ("accuracy", pa.float64()), ("greedy", pa.float64())]
        ),
    )  # fmt: skip


def score(model_dir: Path, params: dict, name: str) -> tuple[pa.Table, dict]:
    """Per-question accuracies of one model on the eval split, and its `summarize` metrics."""
    view = parse_params(params, EvaluateStage, "study params")
    problems = read_problems("data/prepared/eval.parquet").to_pylist()
    sampled, greedy = sample_model(str(model_dir), problems, view, name)
    return per_question(sampled, greedy), summarize(sampled, view.eval.pass_at, greedy)


def accuracy_summary(table: pa.Table) -> dict:
    """Mean avg@k overall and by level: what `dvc metrics show` lists per cell."""
    rows = table.to_pylist()
    levels = sorted({r["level"] for r in rows})
    out = {"accuracy": sum(r["accuracy"] for r in rows) / len(rows)}
    for level in levels:
        sel = [r["accuracy"] for r in rows if r["level"] == level]
        out[f"level{level}"] = sum(sel) / len(sel)
    return {k: round(v, 6) for k, v in out.items()}


def step_table(metrics_dir: Path) -> str:
    """The dvclive step metrics (one .tsv per metric, nested by name) as one CSV: step, then a
    column per metric ('clip_ratio/low_mean', ...)."""
    columns: dict[str, dict[int, str]] = {}
    for path in sorted(metrics_dir.rglob("*.tsv")):
        name = str(path.relative_to(metrics_dir).with_suffix(""))
        with path.open() as f:
            for row in csv.DictReader(f, delimiter="\t"):
                columns.setdefault(name, {})[int(row["step"])] = row[path.stem]
    steps = sorted({s for col in columns.values() for s in col})
    lines = [",".join(["step", *columns])]
    lines += [",".join([str(s), *(col.get(s, "") for col in columns.values())]) for s in steps]
    return "\n".join(lines) + "\n"


def progress(study_dir: Path, study: Study, key: str) -> None:
    """One line per cell: its place in the study, the time the done cells took, an estimate of
    the time left (the mean of the done cells' wall time, per remaining cell)."""
    keys = [cell_key(v, s) for v, s in study.cells()]
    done = [
        json.loads(p.read_text())["wall_s"]["total"]
        for k in keys
        if k != key and (p := study_dir / "cells" / f"{k}.json").exists()
    ]
    left = len(keys) - len(done)
    eta = f", ~{_clock(left * sum(done) / len(done))} left" if done else ""
    print(
        f"study {study_dir.name}: cell {key} ({len(done) + 1}/{len(keys)}); "
        f"{len(done)} done in {_clock(sum(done))}{eta}",
        file=sys.stderr,
        flush=True,
    )


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def upstream(study_dir: Path) -> None:
    study = load_study(study_dir)
    params = upstream_params(read_yaml("params.yaml"), study)
    check_params(params, f"{study_dir}/study.yaml params")
    ws = workspace(study_dir, "upstream", params, upstream=False)
    for module in ("stages.profile", "stages.guide"):
        run_stage(module, ws)
    with atomic_path(study_dir / "upstream") as tmp:
        tmp.mkdir()
        for name in ("profile.parquet", "guides.parquet"):
            shutil.copy(ws / "data" / name, tmp / name)
    shutil.rmtree(ws)


def base(study_dir: Path, seed: int) -> None:
    study = load_study(study_dir)
    params = upstream_params(read_yaml("params.yaml"), study)
    params.setdefault("eval", {})["seed"] = seed
    check_params(params, f"{study_dir}/study.yaml params")
    start = time.perf_counter()
    table, metrics = score(ROOT / "models/base", params, "base")
    out = study_dir / "base"
    with atomic_path(out / str(seed)) as tmp:
        tmp.mkdir()
        write_parquet(table, tmp / "questions.parquet")
        write_json(metrics, tmp / "eval.json")
    summary = {**accuracy_summary(table), "wall_s": round(time.perf_counter() - start, 1)}
    write_json(summary, out / f"{seed}.json")


def cell(study_dir: Path, variant: str, seed: int) -> None:
    study = load_study(study_dir)
    key = cell_key(variant, seed)
    params = cell_params(read_yaml("params.yaml"), study, variant, seed, f"{study_dir}/study.yaml")
    progress(study_dir, study, key)
    ws = workspace(study_dir, key, params)
    wall = {"train": run_stage("stages.train", ws), "dynamics": run_stage("stages.dynamics", ws)}
    start = time.perf_counter()
    table, metrics = score(ws / "models/policy", params, "policy")
    wall["evaluate"] = time.perf_counter() - start
    wall["total"] = sum(wall.values())
    history = json.loads((ws / "metrics/train/metrics.json").read_text())
    steps_csv = step_table(ws / STEP_METRICS)
    rollouts = sum(float(line.split(",")[1]) for line in _column(steps_csv, "num_rollouts"))
    resolved = json.loads((ws / "models/policy/grpo_lab.json").read_text())
    dynamics = json.loads((ws / "metrics/dynamics.json").read_text())

    out = study_dir / "cells"
    with atomic_path(out / key) as tmp:
        tmp.mkdir()
        write_parquet(table, tmp / "questions.parquet")
        (tmp / "train.csv").write_text(steps_csv)
        shutil.copytree(ws / "metrics/dynamics", tmp / "dynamics", ignore=_not_csv)
        write_json({"resolved": resolved, "last_step": history, "eval": metrics}, tmp / "run.json")
    summary = {
        **accuracy_summary(table),
        "rollouts": int(rollouts),
        "steps": len(_column(steps_csv, "num_rollouts")),
        "wall_s": {k: round(v, 1) for k, v in wall.items()},
        "dynamics": dynamics,
    }
    write_json(summary, out / f"{key}.json")
    shutil.rmtree(ws)
    print(f"study {study_dir.name}: cell {key} done in {_clock(wall['total'])}", file=sys.stderr)


def _column(table_csv: str, name: str) -> list[str]:
    """The rows (step,value) of one column of `step_table`'s CSV that have a value."""
    lines = table_csv.splitlines()
    index = lines[0].split(",").index(name)
    pairs = [(r.split(",")[0], r.split(",")[index]) for r in lines[1:]]
    return [f"{s},{v}" for s, v in pairs if v != ""]


def _not_csv(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if not n.endswith(".csv")]


COMMANDS = {"upstream": (upstream, 0), "base": (base, 1), "cell": (cell, 2)}


def cli(argv: list[str]) -> None:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if len(argv) < 2 or argv[0] not in COMMANDS or len(argv) != 2 + COMMANDS[argv[0]][1]:
        raise SystemExit(__doc__)
    fn = COMMANDS[argv[0]][0]
    study_dir, rest = Path(argv[1]), argv[2:]
    try:
        if argv[0] == "cell":
            fn(study_dir, rest[0], int(rest[1]))
        elif argv[0] == "base":
            fn(study_dir, int(rest[0]))
        else:
            fn(study_dir)
    except (InputError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli(sys.argv[1:])
