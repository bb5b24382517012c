"""The verifiers on tables of replies: equivalent forms must score 1, near-misses 0."""

from types import SimpleNamespace

import pytest
import torch

from grpo_core.config.reward import RewardWeights
from grpo_core.rewards import shaping
from grpo_core.rewards.math import answer_span, gold_is_number, last_boxed, math_reward, numeral
from grpo_core.rewards.mcq import mcq_answer, mcq_reward
from grpo_core.rewards.shaping import (
    SHAPING_TERMS,
    Completions,
    format_reward,
    overlong_penalty,
    shaped_rewards,
)
from grpo_core.rewards.verify import final_answer, verify_batch

B = "\\boxed"

# (completion, gold answer, reward): equivalent forms first, then near-misses.
MATH_TABLE = [
    # fractions, \frac variants, decimals
    (f"{B}{{\\frac{{1}}{{2}}}}", "0.5", 1.0),
    (f"{B}{{1/2}}", "\\frac{1}{2}", 1.0),
    (f"{B}{{0.5}}", "\\frac12", 1.0),
    (f"{B}{{\\dfrac{{3}}{{4}}}}", "0.75", 1.0),
    (f"{B}{{3/4}}", "\\tfrac34", 1.0),
    (f"{B}{{-\\frac{{1}}{{2}}}}", "-0.5", 1.0),
    (f"{B}{{\\frac{{-1}}{{2}}}}", "-\\frac{1}{2}", 1.0),
    (f"{B}{{1.5}}", "\\frac{3}{2}", 1.0),
    (f"{B}{{1.50}}", "1.5", 1.0),
    (f"{B}{{2}}", "\\frac{4}{2}", 1.0),
    (f"{B}{{85.0}}", "85", 1.0),
    # percentages: X% equals X/100, and an integer percentage equals the integer
    (f"{B}{{50\\%}}", "0.5", 1.0),
    (f"{B}{{50\\%}}", "50", 1.0),
    (f"{B}{{12.5\\%}}", "\\frac{1}{8}", 1.0),
    (f"{B}{{0.15}}", "15\\%", 1.0),
    (f"{B}{{15\\%}}", "15\\%", 1.0),
    # intervals and sets
    (f"{B}{{[1,2)}}", "[1,2)", 1.0),
    (f"{B}{{(-\\infty, 3]}}", "(-\\infty,3]", 1.0),
    (f"{B}{{x \\in [2, 5]}}", "[2,5]", 1.0),
    (f"{B}{{3,4}}", "4,3", 1.0),
    (f"{B}{{\\{{3,4\\}}}}", "3,4", 1.0),
    (f"{B}{{(1,2)}}", "(1, 2)", 1.0),
    # units, currency, degrees
    (f"{B}{{5 \\text{{ cm}}}}", "5", 1.0),
    (f"{B}{{5\\,\\mathrm{{cm}}}}", "5", 1.0),
    (f"{B}{{12\\text{{ inches}}}}", "12", 1.0),
    (f"{B}{{\\$5}}", "5", 1.0),
    (f"{B}{{90^\\circ}}", "90", 1.0),
    # nesting, equations, radicals, expressions, constants
    (f"{B}{{{B}{{7}}}}", "7", 1.0),
    (f"{B}{{x=3}}", "3", 1.0),
    (f"{B}{{\\sqrt{{2}}/2}}", "\\frac{\\sqrt{2}}{2}", 1.0),
    (f"{B}{{\\sqrt{{8}}}}", "2\\sqrt{2}", 1.0),
    (f"{B}{{x^2+2x+1}}", "(x+1)^2", 1.0),
    (f"{B}{{2\\pi}}", "2\\pi", 1.0),
    (f"{B}{{\\infty}}", "\\infty", 1.0),
    (f"{B}{{1,000}}", "1000", 1.0),
    (f"{B}{{10^3}}", "1000", 1.0),
    (f"{B}{{4.5\\times10^{{33}}}}", "4.5e33", 1.0),  # scientific notation as data sets write it
    (
        f"{B}{{\\begin{{pmatrix}}1\\\\2\\end{{pmatrix}}}}",
        "\\begin{pmatrix}1\\\\2\\end{pmatrix}",
        1.0,
    ),
    # where the answer is: the box (repeated boxes must agree); with no box, the last
    # final-answer statement; working before it is not read
    (f"7+8=15\n4+3+1=8\n{B}{{85}}", "85", 1.0),
    (f"{B}{{85}}, so the answer is {B}{{ 85 }}", "85", 1.0),
    (f"{B}{{\\frac{{66}}{{6}}}} = {B}{{11}}", "11", 1.0),  # boxes of one value (MATH's style)
    ("The answer is 42.", "42", 1.0),
    ("47+38=85\nThe answer is 85", "85", 1.0),
    ("Final answer: $\\frac{1}{2}$", "\\frac{1}{2}", 1.0),
    ("**Answer:** 1,000 apples.", "1000", 1.0),
    ("The answer is $2+\\sqrt{3}$.", "\\sqrt{3}+2", 1.0),  # the gold is an expression
    (f"{B}{{\\frac{{\\pi}}{{2}}}}", "\\frac{\\pi}{2}", 1.0),
    (f"{B}{{\\frac{{6}}{{8}}}}", "0.75", 1.0),  # an unreduced fraction is still a number
    # near-misses
    (f"{B}{{(1,2]}}", "[1,2)", 0.0),
    (f"{B}{{(2,1)}}", "(1, 2)", 0.0),
    (f"{B}{{0.333}}", "\\frac{1}{3}", 0.0),
    (f"{B}{{3}}", "3.0001", 0.0),
    (f"{B}{{7}}", "-7", 0.0),
    (f"{B}{{(x+1)^2}}", "x^2+1", 0.0),
    (f"{B}{{6.28}}", "2\\pi", 0.0),
    (f"{B}{{51\\%}}", "0.5", 0.0),
    (f"{B}{{85}}\n{B}{{84}}", "85", 0.0),
    ("$\\frac{1}{2}$", "\\frac{1}{2}", 0.0),  # no box and no final-answer statement
    (f"7+8=15\n4+3+1=8\n{B}{{58}}", "85", 0.0),
    ("", "85", 0.0),
]


@pytest.mark.parametrize("completion, answer, expected", MATH_TABLE)
def test_math_reward_table(completion, answer, expected):
    assert math_reward(completion, answer) == expected


def test_math_table_is_large_and_has_both_outcomes():
    assert len(MATH_TABLE) >= 40
    assert sum(r == 0.0 for *_, r in MATH_TABLE) >= 10


# (reply, gold letter, reward)
MCQ_TABLE = [
    ("7+8=15\n4+3+1=8\nAnswer: B", "B", 1.0),
    ("Answer: B", "C", 0.0),
    ("**Answer:** C", "C", 1.0),
    ("Answer: (D)", "D", 1.0),
    ("Answer: [B]", "B", 1.0),
    ("Answer: $A$", "A", 1.0),
    ("Answer: $\\boxed{A}$", "A", 1.0),
    ("Answer:C", "C", 1.0),
    ("Final answer: D", "D", 1.0),
    ("Answer: B) 85 apples", "B", 1.0),
    ("Answer: B. It is the only even option.", "B", 1.0),
    ("Answer: J", "J", 1.0),  # options run A-J (MMLU-Pro style)
    ("Answer: A\nWait, that is wrong.\nAnswer: B", "B", 1.0),  # the last answer line counts
    ("The answer is \\boxed{C}.", "C", 1.0),  # boxed fallback
    ("\\boxed{\\text{(C)}}", "C", 1.0),
    # two letters named: wrong even if one of them is the gold
    ("Answer: A or B", "A", 0.0),
    ("Answer: A, C", "A", 0.0),
    ("Answer: A and B", "B", 0.0),
    ("Answer: A/B", "A", 0.0),
    ("Answer: B\nAnswer: A or C", "B", 0.0),
    ("\\boxed{A, B}", "A", 0.0),
    # no letter committed to
    ("Answer: K", "A", 0.0),  # K is past the ten options
    ("Answer: Apples", "A", 0.0),
    ("answer: b", "B", 0.0),  # the letter must be a capital, as in simple-evals
    ("I think it is B", "B", 0.0),
    ("", "A", 0.0),
]


@pytest.mark.parametrize("reply, gold, expected", MCQ_TABLE)
def test_mcq_reward_table(reply, gold, expected):
    assert mcq_reward(reply, gold) == expected


def test_mcq_table_is_large():
    assert len(MCQ_TABLE) >= 20


def test_bad_gold_answers_are_reported_not_scored_zero():
    with pytest.raises(ValueError, match="cannot be parsed"):
        math_reward(f"{B}{{1}}", "")
    with pytest.raises(ValueError, match="not an option letter"):
        mcq_reward("Answer: A", "AB")
    with pytest.raises(ValueError, match="no reward for domain 'poetry'"):
        verify_batch(["poetry"], ["x"], ["y"])


def test_last_boxed_balances_braces():
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\frac{1}{2}"
    assert last_boxed("\\fbox{7} then \\boxed 8$") == "8"
    assert last_boxed("no answer") is None
    assert last_boxed("\\boxed{unclosed") is None


def test_verify_batch_mixes_domains_in_order():
    code = '{"entry_point": "f", "tests": ["assert f(1) == 2", "assert f(2) == 4"]}'
    rewards = verify_batch(
        ["math", "mcq", "code", "math", "code"],
        [f"{B}{{3}}", "Answer: A", "def f(x):\n    return 2", f"{B}{{4}}", "def f(x): return 2*x"],
        ["3", "B", code, "3", code],
    )
    assert rewards == [1.0, 0.0, 0.5, 0.0, 1.0]


def test_final_answers_are_the_votes_of_majority_voting():
    assert final_answer("math", f"so {B}{{ 1 / 2 }}") == "1/2"
    assert final_answer("math", "no box") is None
    assert final_answer("mcq", "Answer: (C)") == "C"
    assert final_answer("code", "def f(): pass") is None
    assert mcq_answer("Answer: A or B") is None


@pytest.mark.parametrize(
    "domain, completion, answer, expected",
    [
        ("math", f"{B}{{12}}", "85", 1.0),  # well-formed, though wrong
        ("math", "85", "85", 0.0),  # right, but not boxed
        ("mcq", "Answer: D", "A", 1.0),
        ("mcq", "Answer: A or B", "A", 0.0),
        ("code", "def f(x):\n    return 0", '{"entry_point": "f", "tests": ["f(1)"]}', 1.0),
        ("code", "def g(x):\n    return 0", '{"entry_point": "f", "tests": ["f(1)"]}', 0.0),
        ("code", "def f(x) return", '{"entry_point": "f", "tests": ["f(1)"]}', 0.0),
    ],
)
def test_format_reward(domain, completion, answer, expected):
    assert format_reward(domain, completion, answer) == expected


def test_overlong_penalty_hand_computed():
    # L_max = 10, L_cache = 4: no penalty up to 6 tokens, then -1/4 per token, -1 past 10.
    lengths = torch.tensor([3, 6, 7, 8, 10, 11])
    expected = torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0, -1.0])
    torch.testing.assert_close(overlong_penalty(lengths, max_tokens=10, cache=4), expected)
    with pytest.raises(ValueError, match="overlong_cache"):
        overlong_penalty(lengths, max_tokens=10, cache=11)


def _completions(lengths: list[int]) -> Completions:
    # math: a closed box is the expected form; budget 10 tokens, the last 4 punished
    texts = ["\\boxed{3}", "3", "\\boxed{4}"]
    return Completions(["math"] * 3, texts, ["3"] * 3, torch.tensor(lengths), 10, 4)


def test_shaped_reward_is_the_weighted_sum_of_its_components():
    correct = torch.tensor([1.0, 0.0, 0.5])
    c = _completions([5, 8, 11])  # overlong: 0, (6 - 8) / 4 = -0.5, -1 (past the budget)
    weights = RewardWeights(correct=1.0, format=0.2, overlong=0.5)
    total, parts = shaped_rewards(correct, c, weights)
    # 1 + 0.2 + 0; 0 + 0 - 0.25; 0.5 + 0.2 - 0.5
    torch.testing.assert_close(total, torch.tensor([1.2, -0.25, 0.2]))
    assert set(parts) == {"correct", "format", "overlong"}
    torch.testing.assert_close(parts["format"], torch.tensor([1.0, 0.0, 1.0]))
    torch.testing.assert_close(parts["overlong"], torch.tensor([0.0, -0.5, -1.0]))
    # no overlong term when it is not weighted; format is logged at weight 0 too
    total, parts = shaped_rewards(correct, c, RewardWeights(format=0.2))
    torch.testing.assert_close(total, torch.tensor([1.2, 0.0, 0.7]))
    assert set(parts) == {"correct", "format"}
    total, parts = shaped_rewards(correct, c, RewardWeights())
    assert torch.equal(total, correct) and set(parts) == {"correct", "format"}


def test_every_shaping_term_has_its_weight_and_a_new_one_is_summed(monkeypatch):
    assert set(SHAPING_TERMS) == set(RewardWeights.model_fields) - {"correct"}
    monkeypatch.setattr(shaping, "SHAPING_TERMS", dict(SHAPING_TERMS))

    @shaping.shaping_term("toy_length")
    def brevity(c: Completions) -> torch.Tensor:
        return -c.lengths.float() / c.max_new_tokens

    assert "toy_length" in shaping.SHAPING_TERMS
    with pytest.raises(ValueError, match="already registered"):
        shaping.shaping_term("toy_length")(brevity)
    weights = SimpleNamespace(**RewardWeights().model_dump(), toy_length=0.1)  # the others 0
    total, parts = shaped_rewards(torch.tensor([1.0, 0.0, 1.0]), _completions([5, 8, 10]), weights)
    torch.testing.assert_close(parts["toy_length"], torch.tensor([-0.5, -0.8, -1.0]))
    torch.testing.assert_close(total, torch.tensor([0.95, -0.08, 0.9]))


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("85", "85"),
        ("-7", "-7"),
        ("1,000", "1,000"),
        ("1{,}000", "1{,}000"),
        ("0.75", "0.75"),
        (".5", ".5"),
        ("\\frac{3}{4}", "\\frac{3}{4}"),
        ("\\dfrac34", "\\dfrac34"),
        ("3/4", "3/4"),
        ("50\\%", "50\\%"),
        ("4.5\\times10^{33}", "4.5\\times10^{33}"),
        ("4.5e33", "4.5e33"),
        ("10^3", "10^3"),
        ("x = 3", "3"),
        ("\\$5", "5"),
        ("90^\\circ", "90"),
        ("5 \\text{ cm}", "5"),
        ("\\text{85}", "85"),
        ("85 apples", "85"),
        ("\\textbf{85}", "85"),
        # expressions, hedges, lists: not numbers
        ("47+38", None),
        ("6 \\times 7", None),
        ("84 \\div 2", None),
        ("2^{10}", None),
        ("84/2", None),  # an integer in disguise
        ("\\frac{84}{2}", None),
        ("\\frac{1}{0}", None),
        ("85 = 47+38", None),
        ("84 or 85", None),
        ("84, 85", None),
        ("\\sqrt{2}", None),
        ("", None),
    ],
)
def test_numeral(text, number):
    assert numeral(text) == number


def test_a_gold_fraction_that_reduces_is_still_a_number():
    assert numeral("\\frac{4}{2}", reduced=False) == "\\frac{4}{2}"
    assert gold_is_number("\\frac{4}{2}") and gold_is_number("4.5e33")
    assert not gold_is_number("2\\pi") and not gold_is_number("[1,2)")


@pytest.mark.parametrize(
    ("completion", "span"),
    [
        ("\\boxed{85}", "85"),
        ("\\boxed{84} then \\boxed{85}", None),  # boxes that disagree
        ("\\boxed{\\frac{66}{6}} = \\boxed{11}", "11"),  # boxes of one value
        ("\\boxed{\\boxed{7}}", "\\boxed{7}"),  # a nested box is part of the outer one
        ("\\boxed{85", None),  # unterminated
        ("The answer is 85.", "85"),
        ("The final answer is: $\\frac{1}{2}$.", "\\frac{1}{2}"),
        ("Answer: 12\nThe answer is 13", "13"),  # the last statement
        ("We get 85.", None),  # no anchor, no box
    ],
)
def test_answer_span(completion, span):
    assert answer_span(completion) == span
