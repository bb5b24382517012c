"""The verifiers on tables of replies: equivalent forms must score 1, near-misses 0."""

import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch

from grpo_core.config.reward import RewardWeights
from grpo_core.data.prompts import mcq_prompt
from grpo_core.rewards import shaping
from grpo_core.rewards.math import (
    answer_span,
    gold_is_number,
    gold_is_scientific,
    halfwidth,
    last_boxed,
    math_reward,
    numeral,
    statement_value,
    statements,
    unboxed,
)
from grpo_core.rewards.mcq import mcq_answer, mcq_reward, option_letters
from grpo_core.rewards.shaping import (
    SHAPING_TERMS,
    Completions,
    format_reward,
    overlong_penalty,
    shaped_rewards,
)
from grpo_core.rewards.verify import answer_form, final_answer, verify_batch

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
    (f"{B}{{4.5\\times10^{{33}}}}", "4.5e33", 1.0),  # scientific notation as data sets write it
    (f"{B}{{10^3}}", "10^{3}", 1.0),  # ... where the gold is written in it
    (f"{B}{{1000}}", "10^{3}", 1.0),
    (f"{B}{{2\\frac{{1}}{{4}}}}", "2.25", 1.0),  # a mixed number
    (f"{B}{{1\\,000}}", "1000", 1.0),  # a thin space between digit groups
    (f"{B}{{85.}}", "85", 1.0),
    (f"{B}{{85\\text{{ cm}}^{{2}}}}", "85", 1.0),
    (f"{B}{{84{B}{{85}}}}", "8485", 1.0),  # a box in a box reads in place, as written
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
    # scientific notation against a plain gold is a power left to evaluate (was credited)
    (f"{B}{{10^3}}", "1000", 0.0),
    (f"{B}{{2e3}}", "2000", 0.0),
    (f"{B}{{84{B}{{85}}}}", "85", 0.0),  # not the inner box
    ("The answer is 84 because 47+38=85.", "85", 0.0),  # the stated 84, not the 85
    ("Final answer: 84\nFinal answer: 85", "85", 0.0),  # statements that disagree: a hedge
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
    ("answer: b", "B", 1.0),  # a lower-case letter on its own (was refused)
    ("The answer is C", "C", 1.0),
    ("The correct answer is C.", "C", 1.0),
    ("Answer: Option C", "C", 1.0),
    ("Final Answer: The final answer is $\\boxed{C}$", "C", 1.0),
    ("The correct answer is D) 95 g", "D", 1.0),  # SmolLM2: the letter, then its option
    ("Answer: A is wrong, so B", "A", 0.0),  # negated: neither letter
    ("Answer: A is wrong, so B", "B", 0.0),
    ("The answer is not A", "A", 0.0),
    ("The answer is a prime", "A", 0.0),  # a lower-case letter before prose is an article
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


@pytest.mark.parametrize(
    "domain, completion, form",
    [
        ("math", "3+4=7\n\\boxed{7}", "boxed"),
        ("math", "The answer is 7.", "stated"),
        ("math", "The answer is 7, so \\boxed{7}", "boxed"),  # the box is read first
        ("math", "\\boxed{7} or \\boxed{8}", "boxed"),  # boxes that disagree: still boxed
        ("math", "7", "other"),  # a bare number: nothing the verifier reads
        ("math", "The answer is in the solution above.", "other"),  # states nothing
        ("math", "", "other"),
        ("mcq", "Answer: B", "stated"),
        ("mcq", "so \\boxed{B}", "boxed"),
        ("mcq", "B", "other"),
        ("code", "def f(x):\n    return x", "program"),
        ("code", "  \n", "other"),
        ("unknown", "The answer is 7.", "other"),
    ],
)
def test_answer_form(domain, completion, form):
    assert answer_form(domain, completion) == form


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
        ("2\\frac{1}{4}", "2\\frac{1}{4}"),  # a mixed number
        ("1\\,000", "1,000"),  # a thin space between digit groups
        ("1\\,000\\,000", "1,000,000"),
        ("85\\text{ cm}^{2}", "85"),  # a unit with its exponent
        ("85 cm^2", "85"),
        ("85 (eighty-five)", "85"),  # a parenthesised word
        ("\\angle A = 30^\\circ", "30"),  # a name on the left
        ("x_1 = 3", "3"),  # a subscript is part of the name
        # expressions, hedges, lists: not numbers
        ("47+38", None),
        ("6 \\times 7", None),
        ("84 \\div 2", None),
        ("2^{10}", None),
        ("84/2", None),  # an integer in disguise
        ("\\frac{84}{2}", None),
        ("\\frac{1}{0}", None),
        ("85 = 47+38", None),
        ("x = 47+38 = 85", None),  # a number on the left: working, not an answer
        ("84 \\text{ because } 47+38=85", None),
        ("2\\frac{5}{4}", None),  # a mixed number's fraction must be proper
        ("2\\frac{4}{4}", None),
        ("1 000", None),  # a plain space separates two numbers
        ("eighty-five", None),
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
        ("Answer: 12\nThe answer is 13", None),  # statements that disagree (was 13)
        ("Answer: 13\nThe answer is 13.", "13"),  # statements that agree
        ("The answer is unclear.\nAnswer: 13", "13"),  # a statement with no value is not one
        ("Final Answer: The final answer is $13$", "13"),  # a repeated statement
        ("The answer is ８５.", "85"),  # full-width digits
        ("We get 85.", None),  # no anchor, no box
    ],
)
def test_answer_span(completion, span):
    assert answer_span(completion) == span


def test_scientific_notation_is_a_number_only_where_the_gold_is_written_in_it():
    for sci in ("10^3", "10^{3}", "2\\times10^{3}", "2 \\cdot 10^3", "2e3"):
        assert numeral(sci) is not None and numeral(sci, scientific=False) is None
    assert numeral("2000", scientific=False) == "2000"
    assert gold_is_scientific("4.5e33") and gold_is_scientific("10^{3}")
    assert not gold_is_scientific("1000") and not gold_is_scientific("2\\pi")


@pytest.mark.parametrize(
    ("rest", "value"),
    [
        ("85", "85"),
        ("85.", "85"),  # a sentence end
        ("85 dollars.", "85"),  # the first word of prose ends the answer
        ("85, which is the sum.", "85"),
        ("85 (eighty-five).", "85"),
        ("**85** apples", "85"),
        ("84 because 47+38=85.", "84"),  # the stated answer, not the equation after it
        ("4721 + 3865.", "4721 + 3865"),
        ("x = 3 because ...", "x = 3"),  # one letter is a variable, not prose
        ("2\\sqrt{3} in all", "2\\sqrt{3}"),  # a command's name is not prose
        ("\\text{85 cm}", "\\text{85 cm}"),  # words inside braces are not prose
        ("$\\frac{1}{2}$ since 2 halves make 1", "\\frac{1}{2}"),  # the first math segment
        ("$85 dollars", "$85"),  # a currency sign, not a math segment
        ("84 or 85.", "84 or 85"),  # a hedge stays whole
        ("either 85 or 86", "either 85 or 86"),
        ("$84$ or $85$.", "$84$ or $85$"),
        ("in the reference solution above.", None),  # no answer before the prose
        ("", None),
    ],
)
def test_statement_value(rest, value):
    assert statement_value(rest) == value


def test_statements_read_each_line_from_its_first_anchor_through_a_repeated_one():
    text = "Answer: 12\nworking\nFinal Answer: The final answer is $\\boxed{C}$\nThe answer: **7**"
    assert statements(text) == ["12", "$\\boxed{C}$", "7**"]
    assert statements("no statement here") == []


def test_boxes_inside_boxes_read_in_place_and_full_width_reads_as_ascii():
    assert unboxed("84\\boxed{85}") == "8485"
    assert unboxed("\\boxed{\\boxed{7}} and \\fbox{x}") == "7 and x"
    assert unboxed("\\boxed{open") == "\\boxed{open"  # unterminated: left as it is
    assert halfwidth("８５：Ｃ\u3000ｘ") == "85:C x"


def test_option_letters_are_read_from_the_prompt():
    assert option_letters("A) 65 B) 75 C) 85 D) 95\nQ: mass in g: 47+38=?\nA: ") == "ABCD"
    assert option_letters(mcq_prompt("Which?", ["x", "y", "z", "w", "v"])) == "ABCDE"
    assert option_letters("What is 2+2?") == ""
    assert option_letters("A) only one") == ""  # fewer than two options
    assert option_letters("A) x B) y D) z") == "AB"  # consecutive from A


@pytest.mark.parametrize(
    "domain, completion, answer, prompt, expected",
    [
        ("math", f"{B}{{}}", "85", None, 0.0),  # an empty box
        ("math", f"{B}{{?}}", "85", None, 0.0),
        ("math", f"{B}{{\\text{{ ? }}}}", "85", None, 0.0),
        ("math", f"{B}{{\\ldots}}", "85", None, 0.0),
        ("math", f"{B}{{x}}", "85", None, 1.0),
        ("math", f"{B}{{\\infty}}", "85", None, 1.0),
        ("math", f"{B}{{\\text{{no}}}}", "85", None, 1.0),  # a word answer is an answer
        ("math", f"{B}{{８５}}", "85", None, 1.0),
        ("mcq", "Answer: D", "A", "A) 1 B) 2 C) 3 D) 4\nQ: ?", 1.0),
        ("mcq", "Answer: E", "A", "A) 1 B) 2 C) 3 D) 4\nQ: ?", 0.0),  # past the options
        ("mcq", "Answer: J", "A", "What is 2+2?", 1.0),  # the prompt lists none: A-J
        ("mcq", "Answer: J", "A", None, 1.0),
    ],
)
def test_format_reward_pays_a_real_answer_only(domain, completion, answer, prompt, expected):
    assert format_reward(domain, completion, answer, prompt) == expected


def test_format_reward_of_code_reads_the_program_the_verifier_runs():
    prefix = 'def f(x):\n    """Add one."""\n'
    answer = json.dumps({"entry_point": "f", "tests": ["assert f(1) == 2"], "prefix": prefix})
    assert format_reward("code", "    return x + 1\n", answer) == 1.0  # the body, continued
    assert format_reward("code", "def f(x):\n    return x + 1", answer) == 1.0  # rewritten
    assert format_reward("code", "", answer) == 0.0  # the prefix alone: only a docstring
    assert format_reward("code", "print(f(1))", answer) == 0.0  # top-level code, no body
    assert format_reward("code", "    return (", answer) == 0.0  # does not parse
    none = json.dumps({"entry_point": None, "tests": ["assert g() == 1"]})
    assert format_reward("code", "def g():\n    return 1", none) == 1.0
    assert format_reward("code", "class G:\n    pass", none) == 1.0
    assert format_reward("code", "print(1)", none) == 0.0  # defines nothing
    assert format_reward("code", "", none) == 0.0


def test_the_format_term_reads_each_completion_s_prompt():
    prompt = "A) 1 B) 2 C) 3 D) 4\nQ: ?"
    texts = ["Answer: B", "Answer: J", "Answer: J"]
    c = Completions(["mcq"] * 3, texts, ["B"] * 3, torch.tensor([1, 1, 1]), 10, 4)
    torch.testing.assert_close(SHAPING_TERMS["format"].values(c), torch.tensor([1.0, 1.0, 1.0]))
    c = dataclasses.replace(c, prompts=[prompt, prompt, "no options listed"])
    torch.testing.assert_close(SHAPING_TERMS["format"].values(c), torch.tensor([1.0, 0.0, 1.0]))
