"""Off-Context GRPO's guided prompt x~ as the paper (reference code AgPriyank/OC-GRPO) builds it:
a character-fraction prefix of the solution, in a "partial reference solution" block of the
prompt."""

import math

import pytest

from grpo_core.data.prompts import (
    MATH_INSTRUCTION,
    MCQ_INSTRUCTION,
    TINY_HINT_LABEL,
    char_prefix,
    code_prompt,
    continuation_prompt,
    guide_wording,
    guided_prompt,
    hinted_prompt,
    is_tiny_prompt,
    math_prompt,
    mcq_prompt,
    render_prompt,
)
from grpo_core.data.tiny import arith, code, mcq
from grpo_core.errors import InputError
from grpo_core.models.tiny import build_char_tokenizer

ARITH = "7+8=15\n4+3+1=8\n\\boxed{85}"  # 25 characters
WORDS = "  We add the units first, then the tens.  "  # 38 characters once stripped

PARTIAL_GUIDE = (
    "Here is a partial reference solution to the problem above. "
    "Complete the rest of the solution step by step."
)
FULL_GUIDE = "Here is the full reference solution. Verify it and show your work step by step."


# --- char_prefix --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fraction, expected",
    [
        (0.2, "We add"),  # floor(7.6) = 7 lands on "the": back to the space before it
        (0.5, "We add the units"),  # floor(19.0) = 19 is inside "first,"
        (0.61, "We add the units first,"),  # floor(23.18) = 23 is the space after "first,"
        (1.0, "We add the units first, then the tens."),  # the whole solution, stripped
    ],
)
def test_char_prefix_cuts_back_to_a_word_boundary(fraction, expected):
    assert char_prefix(WORDS, fraction) == expected


@pytest.mark.parametrize(
    "fraction, expected",
    [
        (0.2, "7+8=1"),  # floor(5.0) = 5: no boundary before it, so the cut stays mid-word
        (0.5, "7+8=15"),  # floor(12.5) = 12 is inside "4+3+1=8": back to the first newline
        (0.56, "7+8=15\n4+3+1=8"),  # floor(14.0) = 14 is the second newline itself
        (0.6, "7+8=15\n4+3+1=8"),  # floor(15.0) = 15 is inside "\boxed{85}"
        (1.0, ARITH),
    ],
)
def test_char_prefix_of_the_tiny_arith_solution(fraction, expected):
    assert char_prefix(ARITH, fraction) == expected


def test_char_prefix_strips_the_whitespace_at_the_cut():
    # floor(0.4 * 18) = 7 is the second of two spaces: cut there, then strip both
    assert char_prefix("we add  the digits", 0.4) == "we add"
    # the first word is longer than the target: the cut is mid-word
    assert char_prefix("supercalifragilistic is long", 0.2) == "super"
    assert char_prefix("  x  ", 0.5) == "x"  # the target is at least one character
    assert char_prefix(" \n ", 1.0) == ""


def test_char_prefix_drops_asymptote_diagrams_first():
    solution = "Draw it.[asy]draw((0,0)--(1,1));[/asy]\nThe area is 4."
    assert char_prefix(solution, 1.0) == "Draw it.\nThe area is 4."
    assert char_prefix(solution, 0.5) == "Draw it."  # floor(0.5 * 23) = 11 is inside "The"


@pytest.mark.parametrize("fraction", [0.0, -0.2, 1.01, 2.0, math.nan])
def test_char_prefix_rejects_a_fraction_outside_zero_one(fraction):
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        char_prefix(ARITH, fraction)


# --- guided_prompt ------------------------------------------------------------------------------


def test_guided_math_prompt_puts_the_partial_solution_between_problem_and_instruction():
    guided = guided_prompt(math_prompt("What is 47+38?"), char_prefix(ARITH, 0.5), complete=False)
    assert guided == (
        "Problem: What is 47+38?\n\n"
        "Partial reference solution: 7+8=15\n\n"
        f"{PARTIAL_GUIDE} Please reason step by step, and put your final answer within \\boxed{{}}."
    )
    assert guided.endswith(MATH_INSTRUCTION)


def test_guided_prompt_at_fraction_one_asks_to_verify_the_whole_solution():
    guided = guided_prompt(math_prompt("What is 47+38?"), char_prefix(ARITH, 1.0), complete=True)
    assert guided == (
        "Problem: What is 47+38?\n\n"
        "Reference solution: 7+8=15\n4+3+1=8\n\\boxed{85}\n\n"
        f"{FULL_GUIDE} {MATH_INSTRUCTION}"
    )
    assert "Partial" not in guided


def test_guided_mcq_prompt_keeps_the_options_in_the_problem():
    prompt = mcq_prompt("Which number is prime?", ["4", "7"])
    partial = "4 = 2 * 2 is not prime; 7 has no divisor but 1 and 7, so B."
    assert guided_prompt(prompt, partial, complete=True) == (
        "Problem: Which number is prime?\n\nA) 4\nB) 7\n\n"
        f"Reference solution: {partial}\n\n"
        f"{FULL_GUIDE} {MCQ_INSTRUCTION}"
    )
    partial = char_prefix(partial, 0.5)  # floor(0.5 * 59) = 29 is the space after "has"
    assert partial == "4 = 2 * 2 is not prime; 7 has"
    assert guided_prompt(prompt, partial, complete=False) == (
        "Problem: Which number is prime?\n\nA) 4\nB) 7\n\n"
        "Partial reference solution: 4 = 2 * 2 is not prime; 7 has\n\n"
        f"{PARTIAL_GUIDE} {MCQ_INSTRUCTION}"
    )


def test_guided_code_prompt_keeps_the_tests_and_the_function_instruction():
    prompt = code_prompt("Add two numbers.", "add", ["assert add(1, 2) == 3"])
    solution = "def add(a, b):\n    return a + b"  # 31 characters
    partial = char_prefix(solution, 0.5)  # floor(15.5) = 15 is the indent's first space
    assert partial == "def add(a, b):"
    assert guided_prompt(prompt, partial, complete=False) == (
        "Problem: Add two numbers.\n\n"
        "Your code should pass this test:\n\nassert add(1, 2) == 3\n\n"
        "Partial reference solution: def add(a, b):\n\n"
        f"{PARTIAL_GUIDE} Write a Python function `add` that solves the task, "
        "in a ```python code block."
    )


def test_guided_prompt_keeps_paragraphs_inside_the_problem():
    guided = guided_prompt(math_prompt("Line one.\n\nLine two."), "Add.", complete=False)
    assert guided.startswith("Problem: Line one.\n\nLine two.\n\nPartial reference solution: Add.")


@pytest.mark.parametrize(
    "prompt",
    [
        continuation_prompt('def add(a, b):\n    """Add a and b."""\n'),
        math_prompt("What is 2+3?") + "\n\nShow all steps.",  # the instruction is not last
        MATH_INSTRUCTION,  # no problem before it
        "Task.\n\nWrite a Python function `two words` that solves the task, in a ```python "
        "code block.",
        # tiny-world look-alikes: the cue "A: " must follow a non-empty "Q: " line
        "Q: 47+38=?\nA:",  # the cue without its space
        "Q: 47+38=?\nA: 7+8=15",  # a prompt with a response already
        "Q: 47+38=?A: ",  # the cue not on a line of its own
        "\nA: ",  # no question
        "A: ",
        "Q: \nA: ",  # an empty question
        "47+38=?\nA: ",  # no "Q: " label
        "Q: 47+38=?\nH: 7+8=15\nA: ",  # already hinted: one hint per prompt
    ],
)
def test_guided_prompt_needs_a_prompt_ending_with_its_instruction(prompt):
    with pytest.raises(InputError, match="answer-format instruction"):
        guided_prompt(prompt, "7+8=15", complete=False)


def test_guided_prompt_needs_a_partial_solution():
    with pytest.raises(InputError, match="non-empty partial solution"):
        guided_prompt(math_prompt("What is 2+3?"), " \n", complete=False)
    with pytest.raises(InputError, match="non-empty partial solution"):
        guided_prompt("Q: 47+38=?\nA: ", "", complete=True)


# --- the tiny world's guided prompt -------------------------------------------------------------


def test_guided_tiny_arith_prompt_puts_the_hint_on_its_own_line_before_the_answer_cue():
    prompt = arith.prompt(47, 38)
    assert prompt == "Q: 47+38=?\nA: " and is_tiny_prompt(prompt)
    assert TINY_HINT_LABEL == "H: "
    guided = guided_prompt(prompt, "7+8=15", complete=False)
    assert guided == "Q: 47+38=?\nH: 7+8=15\nA: "
    # the same label for the whole solution: a char model reads no "verify it"
    assert guided_prompt(prompt, ARITH, complete=True) == (
        "Q: 47+38=?\nH: 7+8=15\n4+3+1=8\n\\boxed{85}\nA: "
    )


def test_guided_tiny_mcq_prompt_keeps_the_options_line_first():
    prompt = mcq.prompt(47, 38, ("mass", "g"), [65, 75, 85, 95])
    solution = mcq.solution(47, 38, 2, [65, 75, 85, 95])
    assert prompt == "A) 65 B) 75 C) 85 D) 95\nQ: mass in g: 47+38=?\nA: "
    assert solution == "7+8=15\n4+3+1=8\n8-6=2\nAnswer: C"  # 30 characters
    # floor(0.6 * 30) = 18 is inside "8-6=2": back to the second newline
    assert hinted_prompt(prompt, solution, 0.6) == (
        "A) 65 B) 75 C) 85 D) 95\nQ: mass in g: 47+38=?\nH: 7+8=15\n4+3+1=8\nA: "
    )
    assert hinted_prompt(prompt, solution, 1.0) == (
        "A) 65 B) 75 C) 85 D) 95\nQ: mass in g: 47+38=?\nH: 7+8=15\n4+3+1=8\n8-6=2\nAnswer: C\nA: "
    )


def test_guided_tiny_code_prompt_keeps_the_example():
    spec = {"kind": "chain", "ops": [["add", 3], ["mul", 2]]}
    prompt, solution = code.prompt(spec, 1), code.solution(spec)
    assert prompt == "Q: f(x): add 3, mul 2. f(1)=8\nA: "
    assert solution == "def f(x):\n    return (x+3)*2"  # 29 characters
    # floor(0.5 * 29) = 14 is the "r" of "return": back to the indent, which is stripped
    assert (
        hinted_prompt(prompt, solution, 0.5) == "Q: f(x): add 3, mul 2. f(1)=8\nH: def f(x):\nA: "
    )
    assert hinted_prompt(prompt, solution, 1.0) == (
        "Q: f(x): add 3, mul 2. f(1)=8\nH: def f(x):\n    return (x+3)*2\nA: "
    )


def test_hinted_tiny_arith_prompt_at_half_and_whole_solution():
    prompt = "Q: 47+38=?\nA: "
    # floor(0.5 * 25) = 12 is inside "4+3+1=8": back to the first newline
    assert hinted_prompt(prompt, ARITH, 0.5) == "Q: 47+38=?\nH: 7+8=15\nA: "
    assert hinted_prompt(prompt, ARITH, 1.0) == "Q: 47+38=?\nH: 7+8=15\n4+3+1=8\n\\boxed{85}\nA: "


def test_guide_wording_is_the_tiny_label_unless_a_prompt_is_not_tiny():
    tiny = [arith.prompt(47, 38), "A) 1 B) 2\nQ: x=?\nA: "]
    assert guide_wording(tiny) == ["H: "]
    wording = guide_wording([*tiny, math_prompt("What is 2+3?")])
    guided = hinted_prompt(math_prompt("What is 2+3?"), "2+3=5", 1.0)
    # every character the paper's template adds is in the wording
    added = set(guided) - set(math_prompt("What is 2+3?")) - set("2+3=5")
    assert added <= set("".join(wording))


def test_guided_prompt_is_one_user_message_for_a_chat_model():
    tokenizer = build_char_tokenizer(["abc"])
    tokenizer.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    guided = guided_prompt(math_prompt("What is 47+38?"), "7+8=15", complete=False)
    assert render_prompt(tokenizer, guided, chat=True) == f"<|user|>\n{guided}\n<|assistant|>\n"
    assert render_prompt(tokenizer, guided, chat=False) == guided


# --- tiny-world prompts for an instruct model (chat_text) ----------------------------------


def test_a_tiny_prompt_under_chat_says_how_to_give_the_answer():
    from grpo_core.data.prompts import MATH_INSTRUCTION, MCQ_INSTRUCTION, chat_text
    from grpo_core.data.tiny import mcq

    assert chat_text("Q: 47+38=?\nA: ", "math") == f"47+38=?\n\n{MATH_INSTRUCTION}"
    listed = mcq.prompt(47, 38, ("mass", "g"), [65, 75, 85, 95])
    assert chat_text(listed, "mcq") == (
        f"mass in g: 47+38=?\n\nA) 65\nB) 75\nC) 85\nD) 95\n\n{MCQ_INSTRUCTION}"
    )
    assert chat_text("Q: f(x): add 3, mul 2. f(4)=14\nA: ", "code") == (
        "f(x): add 3, mul 2. f(4)=14\n\nWrite a Python function `f` that solves the task, in a "
        "```python code block."
    )
    # Anything else, or no domain, is left as it is.
    assert chat_text("What is 2+2?", "math") == "What is 2+2?"
    assert chat_text("Q: 47+38=?\nA: ", None) == "Q: 47+38=?\nA: "
    with pytest.raises(InputError, match="options line"):
        chat_text("Q: mass in g: 47+38=?\nA: ", "mcq")


def test_a_tiny_prompt_under_chat_is_hinted_in_the_papers_wording():
    """Once worded for chat, the hint is no longer an "H: " line: the guided prompt is the
    paper's, with the domain's instruction last (what a chat model can read)."""
    from grpo_core.data.prompts import GUIDE_PARTIAL_INSTRUCTION, MATH_INSTRUCTION, render_hinted

    tok, solution = _chat_tokenizer(), "7+8=15\n4+3+1=8\n\\boxed{85}"
    text = render_hinted(tok, "Q: 47+38=?\nA: ", solution, 0.5, True, "math")
    assert text == _user_turn(
        "Problem: 47+38=?\n\nPartial reference solution: 7+8=15\n\n"
        f"{GUIDE_PARTIAL_INSTRUCTION} {MATH_INSTRUCTION}"
    )
    plain = render_hinted(tok, "Q: 47+38=?\nA: ", solution, 0.5, False, "math")
    assert plain == "Q: 47+38=?\nH: 7+8=15\nA: "  # the tiny model keeps its hint line


_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _chat_tokenizer():
    tok = build_char_tokenizer(["Q: 0+1=?\nA: 1"])
    tok.chat_template = _CHATML
    return tok


def _user_turn(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
