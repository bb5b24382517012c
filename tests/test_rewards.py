import pytest

from grpo_core.rewards import math_reward, score


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("7+8=15\n4+3+1=8\n\\boxed{85}", "85", 1.0),
        ("7+8=15\n4+3+1=8\n\\boxed{58}", "85", 0.0),
        ("\\boxed{84}\n\\boxed{85}", "85", 1.0),  # the last boxed answer counts
        ("\\boxed{85}\n\\boxed{84}", "85", 0.0),
        ("\\boxed{85.0}", "85", 1.0),
        ("", "85", 0.0),
    ],
)
def test_math_reward(completion, answer, expected):
    assert math_reward(completion, answer) == expected


def test_unknown_domain_and_unparseable_gold_are_reported():
    with pytest.raises(ValueError, match="no reward for domain 'poetry'"):
        score("poetry", "x", "y")
    with pytest.raises(ValueError, match="cannot be parsed"):
        math_reward("\\boxed{1}", "")


def test_last_boxed_balances_braces():
    from grpo_core.rewards import last_boxed

    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\boxed{\\frac{1}{2}}"
    assert last_boxed("no answer") is None
    assert last_boxed("\\boxed{unclosed") is None
