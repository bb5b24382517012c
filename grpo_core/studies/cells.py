"""What a study's stages do besides running pipeline stages (stages/study_cell.py): the
scratch workspace a cell trains in, scoring a model per question, and the small files a cell
keeps (docs/studies.md)."""

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
import pyarrow.parquet as pq
import yaml

from grpo_core.analysis.difficulty import is_correct
from grpo_core.analysis.evaluation import sample_model, summarize
from grpo_core.config.core import parse_params, read_yaml
from grpo_core.config.eval import EvaluateStage
from grpo_core.config.params import Params
from grpo_core.config.runtime import CHOSEN, process_env, settings
from grpo_core.data.schema import read_problems
from grpo_core.errors import InputError
from grpo_core.io import atomic_path, digest, write_json, write_parquet
from grpo_core.models.precision import bf16_is_native, cpu_name
from grpo_core.rewards.shaping import format_reward
from grpo_core.rewards.verify import answer_form
from grpo_core.studies.spec import SEED_BASES, Study, cell_key, check_params, set_dotted

STEP_METRICS = "metrics/train/plots/metrics"
ROLLOUT_LOG_FILE = "data/rollouts.parquet"  # the train stage's one row per question per step
# samples: k of avg@k (for the evaluation's own noise); format: the fraction of the k
# completions that give their answer in the domain's form (rewards.shaping.format_reward).
QUESTIONS = pa.schema(
    [("id", pa.string()), ("source", pa.string()), ("domain", pa.string()),
     ("level", pa.int64()), ("accuracy", pa.float64()), ("greedy", pa.float64()),
     ("samples", pa.int64()), ("format", pa.float64())]
)  # fmt: skip


def _link(ws: Path, rel: str, target: Path) -> None:
    link = ws / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target.resolve())


def inputs(
    root: Path, study_dir: Path, study: Study, stage: str, seed: int | None = None
) -> dict[str, Path]:
    """What a study stage's workspace links (workspace path -> target): the main pipeline's
    data under `root` or the study's own from its upstream (`seed`'s, with a base per seed);
    the base model `Study.base_dir` names; a cell also links the study's profile and guides.
    The upstream stage of a study with its own data links the raw data it prepares from."""
    up = study.upstream_dir(study_dir, seed)
    links = {"configs": root / "configs"}
    if stage == "upstream" and study.own_upstream:
        return links | {"data/raw": root / "data/raw"}
    data = up if study.own_upstream else root
    links |= {
        "models/base": study.base_dir(root, study_dir, seed),
        "data/prepared": data / "data/prepared",
    }
    if stage == "cell":
        links |= {f"data/{f}": up / f for f in ("profile.parquet", "guides.parquet")}
    return links


def workspace(study_dir: Path, name: str, params: dict, links: dict[str, Path]) -> Path:
    """studies/<name>/.work/<name>/ with `links` and `params` as params.yaml. An existing
    workspace (a killed run's) is kept: its train stage resumes from it."""
    ws = study_dir / ".work" / name
    ws.mkdir(parents=True, exist_ok=True)
    for rel, target in links.items():
        if not target.exists():
            raise InputError(
                f"{target}: missing; run the pipeline upstream of it first (dvc repro)"
            )
        _link(ws, rel, target)
    (ws / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return ws


def run_stage(module: str, ws: Path, root: Path) -> float:
    """`python -m module` (a pipeline stage) in the workspace; its wall time in seconds."""
    path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", module], cwd=ws, env={**os.environ, "PYTHONPATH": path}
    )
    if done.returncode:
        raise SystemExit(f"error: {module} failed in {ws} (exit {done.returncode})")
    return time.perf_counter() - start


def per_question(sampled: list[dict], greedy: list[dict], problems: dict[str, dict]) -> pa.Table:
    """One row per question: avg@k (the mean of its sampled completions' correctness), k, the
    fraction of them in the answer format (`problems`: each question id's problem, whose gold
    answer the code check and whose options the mcq check read), and its greedy completion's
    correctness (null without greedy decoding)."""
    rows: dict[str, dict] = {}
    for r in sampled:
        q = rows.setdefault(
            r["id"],
            {k: r[k] for k in ("id", "source", "domain", "level")}
            | {"n": 0, "correct": 0, "format": 0.0},
        )
        q["n"] += 1
        q["correct"] += int(is_correct(r["reward"]))
        p = problems[r["id"]]
        q["format"] += format_reward(r["domain"], r["completion"], p["answer"], p["prompt"])
    best = {r["id"]: float(is_correct(r["reward"])) for r in greedy}
    return pa.Table.from_pylist(
        [
            {**{k: q[k] for k in ("id", "source", "domain", "level")},
             "accuracy": q["correct"] / q["n"], "greedy": best.get(q["id"]),
             "samples": q["n"], "format": q["format"] / q["n"]}
            for q in rows.values()
        ],
        schema=QUESTIONS,
    )  # fmt: skip


def score(model_dir: Path, split: Path, params: dict, name: str) -> tuple[pa.Table, dict, pa.Table]:
    """Per-question accuracies of one model on the eval split `split`, sampled as the `eval`
    section of `params` says, its `summarize` metrics, and every completion (`completions`)."""
    view = parse_params(params, EvaluateStage, "study params")
    problems = read_problems(split).to_pylist()
    sampled, greedy = sample_model(str(model_dir), problems, view, name)
    table = per_question(sampled, greedy, {p["id"]: p for p in problems})
    return table, summarize(sampled, view.eval.pass_at, greedy), completions(sampled + greedy)


def completions(rows: list[dict]) -> pa.Table:
    """What an auditor reads to see what a model learned: each sampled and greedy completion
    with its question, reward, length and the form of the answer the verifier read
    (`verify.answer_form`: boxed, stated, program, other); no prompts: the eval split holds
    them."""
    keep = ("id", "source", "level", "decoding", "sample", "completion", "reward", "length")
    return pa.Table.from_pylist(
        [
            {k: r[k] for k in (*keep, "truncated")}
            | {"form": answer_form(r["domain"], r["completion"])}
            for r in rows
        ]
    )


def accuracy_summary(table: pa.Table) -> dict:
    """Mean avg@k overall and by level, and the format rate: what `dvc metrics show` lists per
    cell."""
    rows = table.to_pylist()
    levels = sorted({r["level"] for r in rows})
    out = {"accuracy": sum(r["accuracy"] for r in rows) / len(rows)}
    if rows and rows[0].get("format") is not None:
        out["format_rate"] = sum(r["format"] for r in rows) / len(rows)
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


def column(table_csv: str, name: str) -> list[float]:
    """The values of one column of `step_table`'s CSV, at the steps that have one."""
    lines = table_csv.splitlines()
    index = lines[0].split(",").index(name)
    values = [r.split(",")[index] for r in lines[1:]]
    return [float(v) for v in values if v != ""]


def keep_cell(
    ws: Path, out: Path, table: pa.Table, metrics: dict, wall: dict, samples: pa.Table
) -> dict:
    """Write what a trained and scored cell keeps into the folder `out` (atomically) and
    return its summary: per-question accuracies, its eval completions, the rollout log, the
    step metrics, the dynamics tables (`KEPT_DYNAMICS`), the resolved train params and
    last-step metrics."""
    steps_csv = step_table(ws / STEP_METRICS)
    with atomic_path(out) as tmp:
        tmp.mkdir()
        write_parquet(table, tmp / "questions.parquet")
        write_parquet(samples, tmp / "completions.parquet")
        (tmp / "train.csv").write_text(steps_csv)
        shutil.copy(ws / ROLLOUT_LOG_FILE, tmp / "rollouts.parquet")
        shutil.copytree(ws / "metrics/dynamics", tmp / "dynamics", ignore=_not_kept)
        run = {
            "resolved": json.loads((ws / "models/policy/grpo_lab.json").read_text()),
            "last_step": json.loads((ws / "metrics/train/metrics.json").read_text()),
            "eval": metrics,
            **provenance(ws),
        }
        write_json(run, tmp / "run.json")
    rollouts = column(steps_csv, "num_rollouts")
    guide = guide_rollouts(ws, run["resolved"])
    return {
        **accuracy_summary(table),
        "rollouts": int(sum(rollouts)),
        "guide_rollouts": guide,
        "rollouts_total": int(sum(rollouts)) + guide,
        "steps": len(rollouts),
        "wall_s": {k: round(v, 1) for k, v in wall.items()},
        "dynamics": json.loads((ws / "metrics/dynamics.json").read_text()),
    }


def keep_upstream(ws: Path, out: Path, study: Study) -> None:
    """Write what an upstream stage keeps into the folder `out` (atomically): the profile and
    the guides, and the study's own prepared data and base model when it has its own."""
    with atomic_path(out) as tmp:
        tmp.mkdir()
        for name in ("profile.parquet", "guides.parquet"):
            shutil.copy(ws / "data" / name, tmp / name)
        if study.own_upstream:
            shutil.copytree(ws / "data/prepared", tmp / "data/prepared")
            shutil.copytree(ws / "models/base", tmp / "models/base")


def seed_base(root: Path, seed: int) -> None:
    """The main pipeline's base trained with model.seed `seed` (params.yaml otherwise), into
    studies/seed_bases/<seed>/models/base/: the base of that seed for every `bases: per_seed`
    study on the main pipeline's data."""
    params = read_yaml(root / "params.yaml")
    set_dotted(params, "model.seed", seed)
    check_params(params, f"params.yaml with model.seed {seed}")
    links = {"configs": root / "configs", "data/prepared": root / "data/prepared"}
    ws = workspace(root / SEED_BASES, f"base-{seed}", params, links)
    run_stage("stages.base", ws, root)
    with atomic_path(root / SEED_BASES / str(seed)) as tmp:
        shutil.copytree(ws / "models/base", tmp / "models/base")
    shutil.rmtree(ws)


def git_state(root: Path | None = None) -> dict:
    """The commit the code ran at and the tracked files that differed from it (a cell run from
    uncommitted code says so): what `stages.study_reproduce` checks a cell against."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    changed = git("status", "--porcelain", "--untracked-files=no").splitlines()
    return {"commit": git("rev-parse", "HEAD") or None, "changed": [c[3:] for c in changed]}


def provenance(ws: Path) -> dict:
    """What a cell records of how it was made: every param it ran with, resolved (the whole
    params.yaml of its workspace with the defaults filled in), the git state of the code,
    the machine (its CPU, and whether it multiplies bf16 in hardware: kernels, and so bits,
    differ by CPU, benchmarks/results/numerics.md) and content hashes of its base model and
    eval set (grpo_core.io.digest)."""
    raw = yaml.safe_load((ws / "params.yaml").read_text())
    return {
        "params": parse_params(raw, Params, str(ws / "params.yaml")).model_dump(mode="json"),
        "git": git_state(),
        "machine": {"cpu": cpu_name(), "bf16_native": bf16_is_native()},
        "provenance": {
            "base": digest(ws / "models/base"),
            "eval_set": digest(ws / "data/prepared/eval.parquet"),
        },
    }


def guide_rollouts(ws: Path, resolved: dict) -> int:
    """The rollouts the guide stage sampled for a run that trains on its guides (OC-GRPO's
    fixed mode): every fraction it tried for a problem costs `guide.samples` completions.
    0 for any other run: its training rollouts are all it spent."""
    oc = resolved.get("train", {}).get("oc_grpo", {})
    if resolved.get("algo") != "oc_grpo" or oc.get("mode") != "fixed":
        return 0
    tried = pq.read_table(ws / "data/guides.parquet", columns=["tried"]).column("tried")
    raw = yaml.safe_load((ws / "params.yaml").read_text())
    samples = parse_params(raw, Params, str(ws / "params.yaml")).guide.samples
    return int(sum(len(t) for t in tried.to_pylist()) * samples)


# The dynamics tables a cell keeps: the wide per-step ones the report reads
# (grpo_core/studies/figures.py), not the long copies made for DVC plots.
KEPT_DYNAMICS = ("confidence.csv", "advantage.csv", "convergence.csv", "update_weights.csv")


def _not_kept(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n not in KEPT_DYNAMICS]


def progress_line(study_dir: Path, study: Study, key: str) -> str:
    """A cell's place in its study, the time the done cells took, and an estimate of the time
    left (the done cells' mean wall time, per cell still to run)."""
    keys = [cell_key(v, s) for v, s in study.cells()]
    done = [
        json.loads(p.read_text())["wall_s"]["total"]
        for k in keys
        if k != key and (p := study_dir / "cells" / f"{k}.json").exists()
    ]
    left = len(keys) - len(done)
    eta = f", ~{clock(left * sum(done) / len(done))} left" if done else ""
    return (
        f"study {study_dir.name}: cell {key} ({len(done) + 1}/{len(keys)}); "
        f"{len(done)} done in {clock(sum(done))}{eta}"
    )


def clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def restart_under(numerics: str | None, module: str, argv: list[str]) -> None:
    """Start `python -m module argv` again under `numerics` (a study's own: a bf16 real model
    computes `native`) when this process, set up from params.yaml's by importing `stages`,
    computes under other numerics; no-op when they agree, when `numerics` is None or not a
    value, or in the restarted process. Its children inherit the choice (`CHOSEN`)."""
    current, threads = settings()
    if numerics not in ("portable", "native") or numerics == current or os.environ.get(CHOSEN):
        return
    env = process_env(numerics, threads, dict(os.environ)) | {CHOSEN: numerics}
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)
