import math

import pytest
import torch

from grpo_core.algorithms.codapo import (
    VALUE_FUNCTIONS,
    focused_batch,
    question_confidence,
    question_difficulty,
    select_questions,
    selects_on,
)
from grpo_core.config.params import parse_params
from grpo_core.rewards import verify as rewards
from grpo_core.training.batch import Question, QuestionSampler
from grpo_core.training.run import run
from grpo_core.training.trainer import GRPOTrainer


def reference_odd_batch(ids: list[str], values: list[float], percentile=0.75, repeat_count=4):
    """The reference's rule, restated: tmlr-group/CoDaPO codapo/ray_trainer.py at 210c205.
    Lines 1348-1397: on an even step (`i % 2 == 0`), per uid, weight >= torch.quantile(weights,
    percentile), deduplicated by question text in batch order. Lines 1122-1171: the odd step
    (`i % 2 == 1`, the same data batch again) keeps, per selected question in turn, all its
    positions `repeat_count` times, cycling until the batch's size, then truncates."""
    weights = torch.tensor(values)  # float32, as the reference's codapo_weights
    threshold = torch.quantile(weights, percentile).item()
    selected = []
    for qid, w in zip(ids, weights.tolist(), strict=True):
        if w >= threshold and qid not in selected:
            selected.append(qid)
    out, k = [], 0
    while len(out) < len(ids):
        if k < len(selected):
            matching = [i for i, q in enumerate(ids) if q == selected[k]]
            for _ in range(repeat_count):
                if len(out) < len(ids):
                    out.extend(matching)
            k += 1
        else:
            k = 0
    return [ids[i] for i in out[: len(ids)]]


def ours(ids, values, difficulty=None, quantile=0.75, copies=4, **guards):
    values = torch.tensor(values)
    difficulty = torch.full_like(values, 0.5) if difficulty is None else torch.tensor(difficulty)
    chosen = select_questions(values, difficulty, quantile, **guards)
    return [ids[i] for i in focused_batch(ids, chosen, copies, len(ids))]


def test_confidence_is_exp_of_the_group_mean_of_per_rollout_token_means():
    # Group 1: rollout means (-0.1 - 0.3) / 2 = -0.2 and -0.4 -> c = exp(-0.3).
    # Group 2: -1.0 and -2.0 (the padded position is ignored) -> c = exp(-1.5).
    logp = torch.tensor([[-0.1, -0.3], [-0.4, -0.4], [-1.0, 9.0], [-2.0, -2.0]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 1]])
    c = question_confidence(logp, mask, group_size=2)
    torch.testing.assert_close(c, torch.tensor([math.exp(-0.3), math.exp(-1.5)]))


def test_difficulty_is_one_minus_group_accuracy():
    correct = torch.tensor([1, 0, 0, 0, 1, 1, 1, 1])
    torch.testing.assert_close(question_difficulty(correct, 4), torch.tensor([0.75, 0.0]))


@pytest.mark.parametrize(
    "name, c, d, expected",
    [
        # c * 4d(1-d) + 0.1: d = 1/2 gives c + 0.1; d = 1/4 gives 0.75c + 0.1.
        (
            "confidence_difficulty",
            [0.8, 0.8, 0.5, 0.9],
            [0.5, 0.25, 0.0, 1.0],
            [0.9, 0.7, 0.1, 0.1],
        ),
        ("difficulty", [0.8, 0.2], [0.5, 0.25], [1.1, 0.85]),
        ("confidence", [0.8, 0.2], [0.5, 0.25], [0.9, 0.3]),
    ],
)
def test_value_functions_by_hand(name, c, d, expected):
    v = VALUE_FUNCTIONS.get(name)(torch.tensor(c), torch.tensor(d), 0.1)
    torch.testing.assert_close(v, torch.tensor(expected))


IDS = [f"q{i}" for i in range(16)]
# 13 of 16 always solved (d = 0: V = the offset 0.1), three learnable ones above it.
SATURATED = [0.1] * 16
SATURATED[2], SATURATED[7], SATURATED[11] = 0.5, 0.9, 0.3


def test_a_mostly_saturated_batch_selects_every_question():
    # The 0.75-quantile of thirteen 0.1s and three higher values is 0.1: all 16 are selected,
    # and the odd batch is the first four in batch order, 4 groups each.
    chosen = select_questions(torch.tensor(SATURATED), torch.zeros(16), 0.75)
    assert chosen == list(range(16))
    expected = [q for q in IDS[:4] for _ in range(4)]
    assert ours(IDS, SATURATED) == reference_odd_batch(IDS, SATURATED) == expected


def test_equal_values_select_every_question():
    values = [0.4] * 16
    assert select_questions(torch.tensor(values), torch.full((16,), 0.5), 0.75) == list(range(16))
    assert ours(IDS, values) == reference_odd_batch(IDS, values)


def test_two_selected_fill_sixteen_slots_with_eight_copies_each_in_blocks():
    values = [0.1 * i for i in range(16)]  # the 0.9-quantile leaves q14 and q15
    odd = ours(IDS, values, quantile=0.9)
    assert odd == reference_odd_batch(IDS, values, percentile=0.9)
    assert odd == ["q14"] * 4 + ["q15"] * 4 + ["q14"] * 4 + ["q15"] * 4
    assert focused_batch(["a", "b", "c"], [1, 2], copies=4, capacity=16).count(1) == 8


@pytest.mark.parametrize("seed", range(5))
def test_the_odd_batch_matches_the_reference_and_holds_no_fresh_question(seed):
    g = torch.Generator().manual_seed(seed)
    values = torch.rand(16, generator=g).tolist()
    ids = IDS[:15] + ["q3"]  # a question twice in the batch: each of its blocks holds both
    odd = ours(ids, values)
    assert odd == reference_odd_batch(ids, values) and len(odd) == 16
    threshold = torch.quantile(torch.tensor(values), 0.75)
    assert set(odd) <= {q for q, v in zip(ids, values, strict=True) if v >= threshold}


def test_more_selected_than_blocks_leaves_the_last_ones_out_and_nothing_selects_nothing():
    assert focused_batch(list("abcde"), [0, 1, 2, 3, 4], copies=4, capacity=8) == [0] * 4 + [1] * 4
    assert focused_batch(list("ab"), [], copies=4, capacity=8) == []
    assert select_questions(torch.tensor([]), torch.tensor([]), 0.75) == []


def test_selection_runs_on_even_steps_only():
    assert [selects_on(s) for s in range(6)] == [True, False] * 3


# ---- the guards (train.codapo.*; all off in the reference) ----------------------------


def test_learnable_only_leaves_always_and_never_solved_questions_out():
    values = torch.tensor([0.2, 0.9, 0.5, 1.0, 0.95])
    difficulty = torch.tensor([0.5, 0.5, 0.5, 0.0, 1.0])  # 3 always solved, 4 never
    # The median is 0.9: 1, 3 and 4 qualify by value; learnable_only keeps 1 alone.
    assert select_questions(values, difficulty, 0.5) == [1, 3, 4]
    assert select_questions(values, difficulty, 0.5, learnable_only=True) == [1]
    # Mostly saturated: the reference selects all 16, the guard the three learnable ones.
    d = torch.tensor([0.0 if v == 0.1 else 0.5 for v in SATURATED])
    assert select_questions(torch.tensor(SATURATED), d, 0.75, learnable_only=True) == [2, 7, 11]


def test_skip_uniform_selects_nothing_when_all_values_are_equal():
    values, d = torch.full((8,), 0.4), torch.full((8,), 0.5)
    assert select_questions(values, d, 0.75, skip_uniform=True) == []
    assert select_questions(values + torch.arange(8) / 10, d, 0.75, skip_uniform=True) == [6, 7]


def test_best_first_orders_the_selection_by_value():
    values = [0.2, 0.9, 0.5, 1.0, 0.95, 0.1]
    ids = list("abcdef")
    assert select_questions(torch.tensor(values), torch.full((6,), 0.5), 0.5) == [1, 3, 4]
    # Capacity for one block of 2: batch order gives b, best first gives d.
    assert ours(ids, values, quantile=0.5, copies=2)[:2] == ["b", "b"]
    assert ours(ids, values, quantile=0.5, copies=2, best_first=True) == list("ddeebb")


def test_fresh_fill_takes_copies_per_question_once_and_leaves_the_rest():
    ids = ["a", "b", "a", "c"]
    # No cycling: each distinct chosen question `copies` times, at most `capacity`.
    assert focused_batch(ids, [1, 3], copies=3, capacity=16, cycle=False) == [1, 1, 1, 3, 3, 3]
    assert focused_batch(ids, [1, 3], copies=3, capacity=4, cycle=False) == [1, 1, 1, 3]
    # Without fresh_fill the list is cycled until the batch is full.
    cycled = [1, 1, 1, 3, 3, 3] * 2 + [1, 1, 1, 3]
    assert focused_batch(ids, [1, 3], copies=3, capacity=16) == cycled


# ---- the trainer follows the schedule --------------------------------------------------


def _codapo_trainer(tiny_model, tokenizer, monkeypatch, scripts, **codapo):
    """A codapo-preset trainer on 64 toy questions, 16 per step, whose value function returns
    `scripts[step]` (its step's values, one per group): the selection is what the test says.
    Records each step's batch of question ids and metrics."""
    monkeypatch.setitem(rewards.VERIFIERS, "toy", lambda c, a: float(c[:1] == "7"))
    questions = [Question(f"q{i}", "toy", 1, f"Q: {i}+1=?\nA: ", "7") for i in range(64)]
    train = dict(prompts_per_step=16, group_size=2, max_new_tokens=2, updates_per_batch=1)
    cfg = parse_params({"algo": "codapo", "train": {**train, "codapo": codapo}}).train
    assert cfg.entropy_coef == 0.001 and cfg.dual_clip == 3.0  # the preset's loss terms
    trainer = GRPOTrainer(tiny_model, tokenizer, cfg)
    script = iter(scripts)
    trainer.value_fn = lambda c, d, offset: torch.tensor(next(script))
    batches, metrics = [], []
    original = trainer.step

    def step(batch, more=None):
        batches.append([q.id for q in batch])
        out = original(batch, more)
        metrics.append(out[0])
        return out

    trainer.step = step
    run(trainer, questions, steps=len(scripts), seed=5)
    return batches, metrics, QuestionSampler(len(questions), 5)


def test_the_trainer_alternates_fresh_and_selected_batches_as_the_reference(
    tiny_model, tokenizer, monkeypatch
):
    g = torch.Generator().manual_seed(0)
    rand = [torch.rand(16, generator=g).tolist() for _ in range(6)]
    # Even steps: mostly saturated (all selected), all equal (all selected), distinct values;
    # odd steps: distinct values, which must not select anything.
    scripts = [SATURATED, rand[0], [0.3] * 16, rand[1], rand[2], rand[3]]
    batches, metrics, fresh = _codapo_trainer(tiny_model, tokenizer, monkeypatch, scripts)
    for step in range(0, 6, 2):
        # An even step draws 16 fresh questions; an odd step draws none.
        assert batches[step] == [f"q{i}" for i in fresh.next(16)], step
        expected = reference_odd_batch(batches[step], scripts[step])
        assert batches[step + 1] == expected, step + 1
        assert metrics[step + 1]["codapo/resampled_questions"] == 16
        assert metrics[step + 1]["codapo/selected_questions"] == 0
    assert [m["codapo/selected_questions"] for m in metrics[::2]] == [16, 16, 4]


def test_step_parity_alone_decides_when_selection_runs(tiny_model, tokenizer, monkeypatch):
    # skip_uniform: step 0's equal values select nothing, so step 1 falls back to a fresh batch;
    # being odd, it still selects nothing (its values would pick q-positions 12-15), and step 2
    # is fresh again and selects, for step 3.
    ramp = [i / 16 for i in range(16)]
    scripts = [[0.3] * 16, ramp, ramp, ramp]
    batches, metrics, fresh = _codapo_trainer(
        tiny_model, tokenizer, monkeypatch, scripts, skip_uniform=True
    )
    for step in range(3):
        assert batches[step] == [f"q{i}" for i in fresh.next(16)], step
    assert batches[3] == [q for q in batches[2][12:] for _ in range(4)]
    assert [m["codapo/selected_questions"] for m in metrics] == [0, 0, 4, 0]
    assert [m["codapo/resampled_questions"] for m in metrics] == [0, 0, 0, 16]


def test_fresh_fill_fills_the_odd_batch_with_fresh_questions(tiny_model, tokenizer, monkeypatch):
    ramp = [i / 16 for i in range(16)]
    batches, metrics, fresh = _codapo_trainer(
        tiny_model, tokenizer, monkeypatch, [ramp, ramp], fresh_fill=True, copies=2
    )
    assert batches[0] == [f"q{i}" for i in fresh.next(16)]
    selected = [q for q in batches[0][12:] for _ in range(2)]  # 4 selected, 2 groups each
    assert batches[1] == selected + [f"q{i}" for i in fresh.next(8)]
    assert metrics[1]["codapo/resampled_questions"] == 8
