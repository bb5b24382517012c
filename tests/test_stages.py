"""The stages on small inputs: prepare's schema and its mix of tiny-world and real data,
profile's choice of questions, evaluate's table. Bad inputs, one table of them, are in
tests/test_bad_inputs.py."""

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
    """params.yaml with small tiny-world splits and `data` in `tmp_path`, the fixture
    benchmarks copied into its data/raw/ (where dataset paths must be)."""
    shutil.copytree(FIXTURES, tmp_path / "data/raw", ignore=shutil.ignore_patterns("*.py"))
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"].update({"train_per_level": 6, "eval_per_level": 3, **data})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))


def test_prepare_mixes_tiny_domains_and_real_benchmarks(tmp_path):
    _small_params(
        tmp_path,
        domains=["arith", "mcq", "code"],
        levels=[1, 2],
        train=[{"name": "gsm8k", "path": "data/raw/gsm8k_main_test.parquet", "limit": 2}],
        eval=[
            {"name": "math500", "path": "data/raw/math500_test.jsonl"},
            {"name": "gpqa_diamond", "path": "data/raw/gpqa_diamond.csv"},
            {"name": "humaneval", "path": "data/raw/openai_humaneval_test.parquet"},
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


def test_evaluate_prints_base_and_policy_per_benchmark_level_in_percent():
    from grpo_core.analysis.evaluation import format_table

    def model(arith: dict, code: dict) -> dict:
        # One benchmark per domain: the domain rows are the benchmark's, without levels.
        math = {k: v for k, v in arith.items() if not k.startswith("level")}
        return {"arith": arith, "humaneval": code, "by_domain": {"code": code, "math": math}}

    arith = {"accuracy": 0.48, "level1": 0.9667, "level2": 0.0, "pass@4": 0.6427, "maj@4": 0.5}
    base = model(arith, {"accuracy": 0.1, "pass@4": 0.25, "greedy": 0.05})
    policy = model(
        {**arith, "accuracy": 0.622, "level2": 0.0123}, {"accuracy": 0.125, "pass@4": 0.25}
    )
    assert format_table({"base": base, "policy": policy}).splitlines() == [
        "accuracy (%)  base  policy  policy - base",
        "arith",
        "  level 1     96.7    96.7           +0.0",
        "  level 2      0.0     1.2           +1.2",
        "  all levels  48.0    62.2          +14.2",
        "  pass@4      64.3    64.3           +0.0",
        "  maj@4       50.0    50.0           +0.0",
        "humaneval",
        "  accuracy    10.0    12.5           +2.5",
        "  pass@4      25.0    25.0           +0.0",
        "  greedy       5.0       -              -",
    ]
    # Two benchmarks of one domain: the domain's rows follow, over both.
    base["math500"] = policy["math500"] = {"accuracy": 0.3}
    base["by_domain"]["math"] = policy["by_domain"]["math"] = {"accuracy": 0.4}
    assert format_table({"base": base, "policy": policy}).splitlines()[-2:] == [
        "domain math",
        "  accuracy    40.0    40.0           +0.0",
    ]


SAVE_A_MODEL = """
import sys
from stages.common import keep_deepspeed_out
from transformers import LlamaConfig, LlamaForCausalLM

keep_deepspeed_out()
size = dict(hidden_size=8, intermediate_size=16, num_attention_heads=2, num_key_value_heads=2)
model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, vocab_size=10, **size))
model.save_pretrained(sys.argv[1])
print(sys.modules.get("deepspeed") is not None)
"""


@pytest.mark.parametrize("launched_with_deepspeed", [False, True])
def test_only_a_deepspeed_launch_imports_deepspeed(tmp_path, launched_with_deepspeed):
    """transformers' save_pretrained goes through accelerate, which imports DeepSpeed whenever
    it is installed, and DeepSpeed logs its hardware probe at import ("Setting accelerator to
    CPU"); the stages keep it out unless `accelerate launch` started them with a DeepSpeed
    config (which sets ACCELERATE_USE_DEEPSPEED)."""
    pytest.importorskip("deepspeed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
    env["PYTHONPATH"] = str(ROOT)
    if launched_with_deepspeed:
        env["ACCELERATE_USE_DEEPSPEED"] = "true"
    done = subprocess.run(
        [sys.executable, "-c", SAVE_A_MODEL, str(tmp_path / "m")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(launched_with_deepspeed)
    assert (tmp_path / "m/config.json").is_file()
    if not launched_with_deepspeed:
        assert "accelerator" not in (done.stdout + done.stderr).lower(), done.stdout + done.stderr
