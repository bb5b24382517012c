import math

import pytest
import torch

from grpo_core.algorithms.codapo import (
    VALUE_FUNCTIONS,
    question_confidence,
    question_difficulty,
    resampled_batch,
    select_for_resampling,
)


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


def test_selection_takes_learnable_questions_at_or_above_the_quantile_best_first():
    values = torch.tensor([0.2, 0.9, 0.5, 1.0, 0.95])
    difficulty = torch.tensor([0.5, 0.5, 0.5, 0.0, 0.25])  # question 3 is always solved
    # Sorted values 0.2, 0.5, 0.9, 0.95, 1.0: the median is 0.9, so questions 1, 3, 4
    # qualify and 3 is not learnable; the 0.6-quantile interpolates to 0.92, leaving 4 alone.
    assert select_for_resampling(values, difficulty, 0.5) == [4, 1]
    assert select_for_resampling(values, difficulty, 0.6) == [4]


def test_selection_guards_degenerate_batches():
    d = torch.tensor([0.5, 0.5, 0.5])
    assert select_for_resampling(torch.tensor([0.4, 0.4, 0.4]), d, 0.75) == []  # all equal
    assert select_for_resampling(torch.tensor([]), torch.tensor([]), 0.75) == []
    # The top values belong to questions that are never solved: nothing is learnable there.
    never = torch.tensor([0.5, 1.0, 1.0])
    assert select_for_resampling(torch.tensor([0.1, 0.9, 0.9]), never, 0.5) == []


def test_resampled_batch_repeats_distinct_questions_within_capacity():
    ids = ["a", "b", "a", "c"]
    # 'a' appears twice in the batch: repeated once; capacity 7 cuts c's copies to 1.
    assert resampled_batch(ids, [2, 0, 1, 3], copies=3, capacity=7) == [2, 2, 2, 1, 1, 1, 3]
    assert resampled_batch(ids, [1], copies=4, capacity=2) == [1, 1]
    assert resampled_batch(ids, [], copies=4, capacity=8) == []
