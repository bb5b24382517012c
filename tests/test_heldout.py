"""Held-out accuracy during training (`train.heldout`, grpo_core/training/heldout.py): the
fixed sample, the metrics on a hand-computed case, and a run that evaluates every 2 steps
training exactly as one that never does, its last evaluation equal to the returned policy's."""

import copy
import csv

import pytest
import torch

from grpo_core.analysis.sampling import sample_problems
from grpo_core.config.train import TrainStage
from grpo_core.config.user_reward import resolve
from grpo_core.data.schema import problems_table
from grpo_core.data.tiny import arith
from grpo_core.io import write_parquet
from grpo_core.training.batch import Question
from grpo_core.training.heldout import EVAL_SPLIT, HeldoutEval, heldout_metrics, heldout_sample
from grpo_core.training.run import CURVES, train_policy


def _p(source: str, level: int, i: int) -> dict:
    return {"id": f"{source}-{level}-{i}", "source": source, "level": level}


def test_the_sample_takes_each_source_and_level_in_turn():
    split = [
        _p("b", 1, 0),
        _p("a", 2, 0),
        _p("a", 1, 0),
        _p("a", 1, 1),
        _p("a", 1, 2),
        _p("b", 1, 1),
    ]
    ids = [p["id"] for p in heldout_sample(split, 4)]
    # groups in sorted order (a,1) (a,2) (b,1), first of each, then the second of each
    assert ids == ["a-1-0", "a-2-0", "b-1-0", "a-1-1"]
    assert len(heldout_sample(split, 100)) == 6  # all, when fewer
    assert heldout_sample(list(reversed(split)), 3) != heldout_sample(split, 3)  # split order
    assert heldout_sample(split, 3) == heldout_sample(split, 3)


def test_the_metrics_on_a_hand_computed_case():
    problems = [{"level": 1}, {"level": 1}, {"level": 2}, {"level": 3}]
    rows = [{"index": i, "reward": r} for i, r in enumerate([1.0, 0.0, 1.0, 0.5])]
    assert heldout_metrics(rows, problems) == {
        "heldout/accuracy": pytest.approx(2.5 / 4),
        "heldout/level1": 0.5,
        "heldout/level2": 1.0,
        "heldout/level3": 0.5,
    }


REWARD = '''
def score(domain: str, completion: str, answer: str) -> float:
    """The share of the completion's characters that are digits: a score a random model earns
    in part, so that the held-out numbers are not all 0."""
    return sum(c.isdigit() for c in completion) / max(len(completion), 1)
'''


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A directory holding an eval split (3 levels x 4 arithmetic questions) and a user reward
    that a random tiny model earns in part."""
    monkeypatch.chdir(tmp_path)
    rows = []
    for level, (lo, hi) in {1: (0, 9), 2: (10, 99), 3: (100, 999)}.items():
        gen = torch.Generator().manual_seed(level)
        for i in range(4):
            a, b = (int(x) for x in torch.randint(lo, hi, (2,), generator=gen))
            rows.append(
                {
                    "id": f"e{level}-{i}",
                    "domain": "math",
                    "source": "arith",
                    "level": level,
                    "prompt": arith.prompt(a, b),
                    "answer": str(a + b),
                    "solution": "",
                    "meta": "{}",
                }
            )
    (tmp_path / "data/prepared").mkdir(parents=True)
    write_parquet(problems_table(rows), EVAL_SPLIT)
    (tmp_path / "user_rewards").mkdir()
    (tmp_path / "user_rewards/digits.py").write_text(REWARD)
    return tmp_path


def _params(every: int) -> TrainStage:
    return TrainStage(
        train=dict(
            steps=3,
            prompts_per_step=4,
            group_size=4,
            max_new_tokens=8,
            lr=1e-2,
            checkpoint_every=10,
            heldout={"every": every, "questions": 9},
        ),
        reward={"function": "user_rewards/digits.py:score"},
    )


def _questions() -> list[Question]:
    pairs = [(12, 7), (30, 45), (8, 9), (61, 2)]
    return [
        Question(f"a{i}", "math", 1, arith.prompt(a, b), str(a + b))
        for i, (a, b) in enumerate(pairs)
    ]


def _train(model, tokenizer, every: int):
    torch.manual_seed(0)
    return train_policy(_params(every), copy.deepcopy(model), tokenizer, _questions())


def test_a_run_that_evaluates_trains_as_one_that_does_not(workdir, tiny_model, tokenizer):
    plain, plain_rows, _ = _train(tiny_model, tokenizer, every=0)
    with open(CURVES) as fh:
        assert {r["heldout_accuracy"] for r in csv.DictReader(fh)} == {""}

    policy, rows, _ = _train(tiny_model, tokenizer, every=2)
    # the same training: every weight, and every rollout's reward
    assert all(torch.equal(v, policy.state_dict()[k]) for k, v in plain.state_dict().items())
    assert rows == plain_rows  # every group: its rewards, lengths, log-probs, weights

    # evaluated after steps 2 (every 2) and 3 (the last), not after step 1
    with open(CURVES) as fh:
        curves = list(csv.DictReader(fh))
    assert [r["heldout_accuracy"] != "" for r in curves] == [False, True, True]

    # the last evaluation is the returned policy's greedy answers to the sample's 9 questions
    # (3 per level, the split has 4): a direct evaluation gives the same numbers
    params = _params(2)
    heldout = HeldoutEval(params, tokenizer, chat=False)
    assert [p["level"] for p in heldout.problems] == [1, 2, 3] * 3
    direct = sample_problems(
        policy,
        tokenizer,
        heldout.problems,
        heldout.sampling,
        "direct",
        greedy=True,
        function=resolve(params.reward.function),
    )
    expected = heldout_metrics(direct, heldout.problems)
    assert expected["heldout/accuracy"] > 0  # not the trivial 0 of a random model
    assert float(curves[-1]["heldout_accuracy"]) == pytest.approx(expected["heldout/accuracy"])


def test_off_reads_no_eval_split(tmp_path, monkeypatch, tokenizer):
    monkeypatch.chdir(tmp_path)  # no data/prepared/eval.parquet here
    heldout = HeldoutEval(TrainStage(), tokenizer, chat=False)
    assert heldout.problems == [] and not heldout.due(10, last=True)
    assert HeldoutEval.due(heldout, 3, last=False) is False
