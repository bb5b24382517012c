"""The recipes of docs/architecture.md, followed step by step: a new algorithm preset trained
for one step by the real trainer, a new reward domain, a new benchmark read from a local file.

Every toy entry is added to its registry by `monkeypatch`, which removes it again at teardown,
so the rest of the suite sees the registries as shipped."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from grpo_core.algorithms.presets import PRESETS, apply_preset
from grpo_core.config.train import TrainParams
from grpo_core.data import prompts
from grpo_core.data.adapters.base import Adapter
from grpo_core.data.adapters.registry import ADAPTERS, load_benchmark
from grpo_core.data.schema import PROBLEM_SCHEMA, problems_table, read_problems
from grpo_core.errors import InputError
from grpo_core.rewards import verify
from grpo_core.training.batch import Question
from grpo_core.training.trainer import GRPOTrainer
from tests.conftest import copy_repository

# ---- add a reward: a verifier registered by domain ------------------------------------------


def _starts_with_answer(completion: str, answer: str) -> float:
    """The toy domain's verifier: 1.0 when the completion starts with the gold character."""
    return float(completion[:1] == answer)


def _one_character(answer: str) -> str:
    """The toy domain's gold parser: a gold answer is a single character."""
    if len(answer) != 1:
        raise InputError(f"expected one character, got {answer!r}")
    return answer


@pytest.fixture
def toy_domain(monkeypatch) -> str:
    monkeypatch.setitem(verify.VERIFIERS, "recipe_toy", _starts_with_answer)
    monkeypatch.setitem(verify.GOLD_PARSERS, "recipe_toy", _one_character)
    return "recipe_toy"


def test_a_new_domain_is_verified_and_its_gold_answers_checked(toy_domain):
    rewards = verify.verify_batch(
        [toy_domain] * 2 + ["math"], ["7+1", "8", "\\boxed{2}"], ["7", "7", "2"]
    )
    assert rewards == [1.0, 0.0, 1.0]
    verify.check_gold({"id": "t-1", "domain": toy_domain, "source": "toy", "answer": "7"})
    with pytest.raises(InputError, match="t-2"):
        verify.check_gold({"id": "t-2", "domain": toy_domain, "source": "toy", "answer": "77"})


def test_the_toy_entries_are_gone_after_the_test():
    assert "recipe_toy" not in verify.VERIFIERS and "recipe_toy" not in verify.GOLD_PARSERS
    assert "toy_rloo" not in PRESETS and "toy_sums" not in ADAPTERS


# ---- add an algorithm: a preset over registered estimators and losses ------------------------

TOY_PRESET = {
    **PRESETS["grpo"],
    "advantage": "rloo",  # a registered advantage estimator (algorithms/advantages.py)
    "loss_agg": "seq-mean-token-mean",
    "clip_high": 0.28,
    "filter_zero_std": False,
}


@pytest.fixture
def toy_preset(monkeypatch) -> str:
    monkeypatch.setitem(PRESETS, "toy_rloo", TOY_PRESET)
    return "toy_rloo"


def test_a_new_preset_fills_the_null_knobs_and_trains_one_step(
    tokenizer, tiny_model, toy_preset, toy_domain
):
    # What params.yaml holds for `train`: the preset's knobs null, one of them overridden.
    train = {
        "steps": 1,
        "prompts_per_step": 8,
        "group_size": 8,
        "max_new_tokens": 3,
        "lr": 3e-2,
        "micro_batch_size": 64,
        "advantage": None,
        "clip_high": 0.3,
    }
    cfg = TrainParams(**apply_preset(toy_preset, train))
    assert (cfg.advantage, cfg.loss_agg, cfg.clip_high, cfg.filter_zero_std) == (
        "rloo",
        "seq-mean-token-mean",
        0.3,
        False,
    )

    questions = [Question(f"q{i}", toy_domain, 1, f"Q: {i}+1=?\nA: ", "7") for i in range(8)]
    trainer = GRPOTrainer(tiny_model, tokenizer, cfg)
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    torch.manual_seed(0)
    metrics, rows = trainer.step(questions)

    assert [r["id"] for r in rows] == [q.id for q in questions]
    assert 0 < metrics["reward"] < 1 and metrics["frac_reward_zero_std"] < 1
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    after = tiny_model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


# ---- add a benchmark: an adapter, read from a local file --------------------------------------


def _toy_sums_row(row, index: int, seed: int) -> dict:
    return {
        "key": row["qid"],
        "level": int(row["difficulty"]),
        "prompt": prompts.math_prompt(row["question"]),
        "answer": str(row["answer"]),
        "solution": "",
        "meta": {"note": row["note"]},
    }


@pytest.fixture
def toy_benchmark(monkeypatch) -> str:
    adapter = Adapter(
        hub_id="example/toy-sums",  # never contacted: the test passes a local path
        config=None,
        split="test",
        domain="math",
        columns=(("qid",), ("question",), ("answer",), ("difficulty",), ("note",)),
        to_row=_toy_sums_row,
    )
    monkeypatch.setitem(ADAPTERS, "toy_sums", adapter)
    return "toy_sums"


def test_a_new_benchmark_reads_a_local_file_into_the_problem_schema(toy_benchmark, tmp_path):
    raw = tmp_path / "toy_sums.jsonl"
    items = [
        {"qid": "a1", "question": "What is 2+3?", "answer": 5, "difficulty": 1, "note": "x"},
        {
            "qid": "a2",
            "question": "What is 1/2+1/4?",
            "answer": "\\frac{3}{4}",
            "difficulty": 2,
            "note": "y",
        },
    ]
    raw.write_text("".join(json.dumps(item) + "\n" for item in items))

    rows = load_benchmark(toy_benchmark, path=raw, limit=5)

    assert [r["id"] for r in rows] == ["toy_sums-a1", "toy_sums-a2"]
    assert {r["source"] for r in rows} == {"toy_sums"} and {r["domain"] for r in rows} == {"math"}
    assert [r["level"] for r in rows] == [1, 2] and rows[0]["answer"] == "5"
    assert rows[0]["prompt"] == prompts.math_prompt("What is 2+3?")
    assert json.loads(rows[1]["meta"]) == {"note": "y"}
    for row in rows:
        verify.check_gold(row)  # as `prepare` does before it writes the split
    out = tmp_path / "eval.parquet"
    pq.write_table(problems_table(rows), out)
    assert read_problems(out).schema == PROBLEM_SCHEMA


def test_a_new_benchmark_names_a_missing_column(toy_benchmark, tmp_path):
    raw = tmp_path / "bad.jsonl"
    raw.write_text(json.dumps({"qid": "a1", "question": "2+3?", "difficulty": 1, "note": ""}))
    with pytest.raises(InputError, match="needs column 'answer'"):
        load_benchmark(toy_benchmark, path=raw)


# ---- the recipes followed in a copy of the repository ---------------------------------------
# The steps above register toy entries in this process; these edit a copy's files as a user
# would (a new module, its registration, dvc.yaml, params.yaml, the params page) and run, in
# the copy, the tests that check the pipeline's wiring: they fail until every step is done.

WIRING_TESTS = [
    "tests/test_dvc_yaml.py",
    "tests/test_layout.py",
    "tests/test_config.py",
    "tests/test_studies.py::test_every_study_dvc_yaml_is_its_template",
]


def _sh(repo, *argv, check=True):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done


@pytest.fixture
def copy_of_repo(tmp_path) -> Path:
    return copy_repository(tmp_path / "repo")


def _pytest(repo, *tests, check=True):
    return _sh(
        repo,
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-x",
        *tests,
        check=check,
    )


TOY_MODULE = '''"""The toy domain: the answer is the completion's first character."""

from grpo_core.errors import InputError


def toy_reward(completion: str, answer: str) -> float:
    return float(completion[:1] == answer)


def parse_toy_gold(answer: str) -> str:
    if len(answer) != 1:
        raise InputError(f"expected one character, got {answer!r}")
    return answer
'''


def test_the_add_a_reward_recipe_holds_in_a_copy(copy_of_repo):
    repo = copy_of_repo
    # 1-2: the verifier and its gold parser, in a module of their own, registered by domain
    (repo / "grpo_core/rewards/toy.py").write_text(TOY_MODULE)
    verify_py = repo / "grpo_core/rewards/verify.py"
    verify_py.write_text(
        verify_py.read_text()
        + "\n\nfrom grpo_core.rewards.toy import parse_toy_gold, toy_reward  # noqa: E402\n\n"
        + 'VERIFIERS["toy"] = toy_reward\nGOLD_PARSERS["toy"] = parse_toy_gold\n'
    )
    # without step 5 the wiring tests fail, naming the stages and the module
    failed = _pytest(repo, "tests/test_dvc_yaml.py", check=False)
    assert failed.returncode != 0
    assert "missing ['grpo_core/rewards/toy.py']" in failed.stdout
    assert "python -m grpo_core.codedeps --dvc-yaml" in failed.stdout
    # 5: the stages' code deps, then every study's dvc.yaml
    changes = _sh(repo, sys.executable, "-m", "grpo_core.codedeps", "--dvc-yaml").stdout
    for stage in ("prepare", "base", "profile", "guide", "evaluate"):
        assert f"{stage}: + grpo_core/rewards/toy.py" in changes
    assert "train:" not in changes  # it lists grpo_core/rewards whole
    for study in sorted(
        p.name for p in (repo / "studies").iterdir() if (p / "study.yaml").exists()
    ):
        _sh(repo, sys.executable, "-m", "stages.study_report", "init", study)
    _pytest(repo, *WIRING_TESTS)
    done = _sh(
        repo,
        sys.executable,
        "-c",
        (
            "from grpo_core.rewards.verify import check_gold, verify_batch\n"
            "texts = ['7+1', '8', '\\\\boxed{2}']\n"
            "print(verify_batch(['toy', 'toy', 'math'], texts, ['7', '7', '2']))\n"
            "check_gold({'id': 'x', 'source': 's', 'domain': 'toy', 'answer': 'ab'})\n"
        ),
        check=False,
    )
    assert "[1.0, 0.0, 1.0]" in done.stdout
    assert "problem 'x' (s): expected one character, got 'ab'" in done.stderr


TERM = '''

@shaping_term("brevity")
def _brevity(c: Completions) -> torch.Tensor:
    """Minus the share of the budget the completion used."""
    return -c.lengths.float() / c.max_new_tokens
'''

ONE_STEP = """
import torch
from grpo_core.config.params import parse_params
from grpo_core.config.model import TinyModelParams
from grpo_core.data.tiny import arith
from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model
from grpo_core.training.batch import Question
from grpo_core.training.run import run
from grpo_core.training.trainer import GRPOTrainer

tok = build_char_tokenizer([arith.prompt(47, 38), arith.solution(47, 38), "0123456789\\\\boxed{}"])
model = build_tiny_model(tok, TinyModelParams(hidden_size=32, num_layers=1, num_heads=2,
                                              intermediate_size=64), seed=0)
params = parse_params({"train": {"steps": 1, "prompts_per_step": 2, "group_size": 2,
                                 "max_new_tokens": 8},
                       "reward": {"weights": {"brevity": 0.5}}})
questions = [Question(f"q{i}", "math", 1, arith.prompt(i, 1), str(i + 1)) for i in range(2)]
trainer = GRPOTrainer(model, tok, params.train, reward=params.reward)
logged = []
run(trainer, questions, 1, seed=0, on_step=lambda s, m, r: logged.append(m))
print(sorted(k for k in logged[0] if k.startswith("rewards/")))
"""


def test_the_add_a_shaping_term_recipe_holds_in_a_copy(copy_of_repo):
    repo = copy_of_repo
    # 1: the term
    shaping_py = repo / "grpo_core/rewards/shaping.py"
    shaping_py.write_text(shaping_py.read_text() + TERM)
    # without its weight the registry test names the gap
    failed = _pytest(repo, "tests/test_rewards.py", "-k", "every_shaping_term", check=False)
    assert failed.returncode != 0 and "brevity" in failed.stdout
    # 2: its weight, in the params model and in params.yaml, and the params page
    reward_py = repo / "grpo_core/config/reward.py"
    field = '    brevity: float = Field(0.0, description="Minus the share of the budget used.")\n'
    text = reward_py.read_text()
    assert "\n\n\nclass RewardParams(Section):" in text
    reward_py.write_text(
        text.replace(
            "\n\n\nclass RewardParams(Section):", "\n" + field + "\n\nclass RewardParams(Section):"
        )
    )
    params = repo / "params.yaml"
    params.write_text(
        params.read_text().replace("    format: 0.0\n", "    format: 0.0\n    brevity: 0.0\n")
    )
    _sh(repo, sys.executable, "-m", "grpo_core.params_reference", "docs/params.md")
    # no new module: dvc.yaml is already right
    assert (
        "up to date" in _sh(repo, sys.executable, "-m", "grpo_core.codedeps", "--dvc-yaml").stdout
    )
    _pytest(repo, *WIRING_TESTS, "tests/test_rewards.py")
    # 5: it trains, and is logged as a component
    done = _sh(repo, sys.executable, "-c", ONE_STEP)
    assert "'rewards/brevity/mean'" in done.stdout and "'rewards/format/mean'" in done.stdout
