"""The recipes of docs/architecture.md, followed step by step: a new algorithm preset trained
for one step by the real trainer, a new reward domain, a new benchmark read from a local file.

Every toy entry is added to its registry by `monkeypatch`, which removes it again at teardown,
so the rest of the suite sees the registries as shipped."""

import json

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
