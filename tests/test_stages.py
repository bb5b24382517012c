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
    from grpo_core.data.schema import PROBLEM_SCHEMA, read_problems

    train = read_problems(tmp_path / "data/prepared/train.parquet")
    evals = read_problems(tmp_path / "data/prepared/eval.parquet")
    assert train.schema.equals(PROBLEM_SCHEMA)
    assert train.num_rows == 150 and evals.num_rows == 50
    assert sorted(set(train.column("level").to_pylist())) == [1, 2, 3, 4, 5]
    shutil.rmtree(tmp_path / "data")


FIXTURES = ROOT / "tests/fixtures/benchmarks"


def _small_params(tmp_path: Path, **data) -> None:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"].update({"train_per_level": 6, "eval_per_level": 3, **data})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))


def test_prepare_mixes_tiny_domains_and_real_benchmarks(tmp_path):
    _small_params(
        tmp_path,
        domains=["arith", "mcq", "code"],
        levels=[1, 2],
        train=[{"name": "gsm8k", "path": str(FIXTURES / "gsm8k_main_test.parquet"), "limit": 2}],
        eval=[
            {"name": "math500", "path": str(FIXTURES / "math500_test.jsonl")},
            {"name": "gpqa_diamond", "path": str(FIXTURES / "gpqa_diamond.csv")},
            {"name": "humaneval", "path": str(FIXTURES / "openai_humaneval_test.parquet")},
        ],
    )
    done = _run_stage(tmp_path, "prepare")
    assert done.returncode == 0, done.stderr
    from grpo_core.data.schema import read_problems

    train = read_problems(tmp_path / "data/prepared/train.parquet").to_pylist()
    evals = read_problems(tmp_path / "data/prepared/eval.parquet").to_pylist()
    count = {}
    for row in train + evals:
        count[(row["source"], row["domain"])] = count.get((row["source"], row["domain"]), 0) + 1
    # 3 tiny domains x 2 levels x (6 train + 3 eval), then the real files
    for source, domain in (("arith", "math"), ("mcq", "mcq"), ("code", "code")):
        assert count[(source, domain)] == 2 * (6 + 3)
    assert count[("gsm8k", "math")] == 2  # limit
    assert {("math500", "math"), ("gpqa_diamond", "mcq"), ("humaneval", "code")} <= set(count)
    assert all(r["source"] != "gsm8k" for r in evals)
    assert {r["level"] for r in train if r["source"] == "gsm8k"} == {0}


@pytest.mark.parametrize(
    "data, message",
    [
        ({"eval": ["math5000"]}, "data.eval[0].name: unknown dataset 'math5000'"),
        ({"eval": [{"name": "math500", "path": "nowhere.jsonl"}]}, "nowhere.jsonl"),
    ],
)
def test_prepare_names_a_bad_dataset_and_writes_nothing(tmp_path, data, message):
    _small_params(tmp_path, **data)
    done = _run_stage(tmp_path, "prepare")
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()


def test_prepare_names_a_problem_whose_gold_answer_cannot_be_read(tmp_path):
    rows = [
        {
            "problem": "What is 1+1?",
            "solution": "2",
            "answer": "2",
            "subject": "Algebra",
            "level": 1,
            "unique_id": "test/algebra/1.json",
        },
        {
            "problem": "What is x?",
            "solution": "?",
            "answer": "\\frac{",
            "subject": "Algebra",
            "level": 2,
            "unique_id": "test/algebra/2.json",
        },
    ]
    import json

    path = tmp_path / "math500.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _small_params(tmp_path, eval=[{"name": "math500", "path": str(path)}])
    done = _run_stage(tmp_path, "prepare")
    assert done.returncode == 2
    assert "math500-test/algebra/2.json" in done.stderr and "cannot be parsed" in done.stderr
    assert not (tmp_path / "data").exists()


def test_profile_takes_the_first_questions_of_each_level_of_each_source():
    from grpo_core.data.schema import problems_table
    from stages.profile import profiled_questions

    def row(source, level, k):
        return {
            "id": f"{source}-{level}-{k}",
            "domain": "math",
            "source": source,
            "level": level,
            "prompt": "p",
            "answer": "1",
            "solution": "",
            "meta": "{}",
        }

    rows = [row("arith", lv, k) for lv in (3, 4) for k in range(3)]
    rows += [row("mcq", lv, k) for lv in (3, 4) for k in range(3)]
    picked = profiled_questions(problems_table(rows), levels=[3], per_level=2)
    assert [r["id"] for r in picked] == ["arith-3-0", "arith-3-1", "mcq-3-0", "mcq-3-1"]
    rows[-1]["domain"] = "mcq"  # mcq-4-2
    picked = profiled_questions(problems_table(rows), levels=[3, 4], per_level=3, domains=["mcq"])
    assert [r["id"] for r in picked] == ["mcq-4-2"]
