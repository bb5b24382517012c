"""Each stage validates params.yaml before any work and writes nothing when it is bad."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _run_stage(cwd: Path, stage: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", f"stages.{stage}"], cwd=cwd, env=env, capture_output=True, text=True
    )


def _set_group_size(p):
    p["train"]["group_size"] = -1


def _set_lr(p):
    p["train"]["lr"] = "fast"


def _misspell_samples(p):
    p["eval"]["sampels"] = p["eval"].pop("samples")


def _bad_fractions(p):
    p["guide"]["fractions"] = [0.8, 0.4]


def _bad_algo(p):
    p["algo"] = "ppo"


@pytest.mark.parametrize(
    "stage, edit, message",
    [
        ("prepare", _set_group_size, "train.group_size"),
        ("base", _set_lr, "train.lr"),
        ("train", _misspell_samples, "eval.sampels: unknown key"),
        ("evaluate", _set_group_size, "train.group_size"),
        ("profile", _set_lr, "train.lr"),
        ("guide", _bad_fractions, "guide"),
        ("train", _bad_algo, "allowed values"),
    ],
)
def test_bad_params_fail_before_any_work(tmp_path, stage, edit, message):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    edit(params)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    done = _run_stage(tmp_path, stage)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_prepare_writes_the_unified_schema(tmp_path):
    text = (ROOT / "params.yaml").read_text()
    text = text.replace("train_per_level: 2000", "train_per_level: 30")
    (tmp_path / "params.yaml").write_text(text.replace("eval_per_level: 300", "eval_per_level: 10"))
    done = _run_stage(tmp_path, "prepare")
    assert done.returncode == 0, done.stderr
    from grpo_core.schema import PROBLEM_SCHEMA, read_problems

    train = read_problems(tmp_path / "data/prepared/train.parquet")
    evals = read_problems(tmp_path / "data/prepared/eval.parquet")
    assert train.schema.equals(PROBLEM_SCHEMA)
    assert train.num_rows == 150 and evals.num_rows == 50
    assert sorted(set(train.column("level").to_pylist())) == [1, 2, 3, 4, 5]
    shutil.rmtree(tmp_path / "data")
