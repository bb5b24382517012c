"""False negatives: legitimate answers the verifiers must credit, beside the attack suite.

tests/test_reward_hacking.py holds what a policy must not be paid for; this table holds what an
honest model writes and must be paid for, so that closing a shortcut there cannot quietly
refuse a real answer here. Each row is (domain, completion, gold, reward, note): 1.0 where the
reader credits the form; 0.0 where it refuses it on purpose, the note saying why (the same
reason is in the reader's module docstring: grpo_core/rewards/math.py, mcq.py). Honest
controls (the plain forms) and near-misses (the same forms with a wrong value) sit beside them,
so a 1.0 shows the form read, not any number accepted.
"""

from __future__ import annotations

import json

import pytest

from grpo_core.data.tiny import mcq as tiny_mcq
from grpo_core.rewards.code import CodeRewardConfig
from grpo_core.rewards.shaping import format_reward
from grpo_core.rewards.verify import verify_batch

B = "\\boxed"
# A HumanEval-style problem: its prompt is the signature and docstring (the answer's prefix);
# an honest completion may be the indented body alone, continuing the prompt.
HE_ANSWER = json.dumps(
    {
        "entry_point": "add_one",
        "tests": ["assert add_one(1) == 2", "assert add_one(-1) == 0"],
        "prefix": 'def add_one(x: int) -> int:\n    """Return x plus one."""\n',
    }
)
HE_BODY = "    return x + 1\n"
CODE_CFG = CodeRewardConfig(workers=2, timeout_s=3.0, cpu_time_s=2, memory_mb=256)

# (domain, completion, gold answer, reward, note)
FALSE_NEGATIVES = [
    # ---- math: a stated answer with prose after it (GSM8K's style) ----------------------------
    ("math", "The answer is 85 dollars.", "85", 1.0, "a unit word after the number"),
    ("math", "The answer is 85 people.", "85", 1.0, "a unit word after the number"),
    ("math", "So the answer is 85 cookies.", "85", 1.0, "a unit word after the number"),
    ("math", "The answer is 85, which is the sum.", "85", 1.0, "a clause after the number"),
    ("math", "The answer is 85 (eighty-five).", "85", 1.0, "the number, then in words"),
    ("math", "Answer: 85 (eighty-five)", "85", 1.0, "the same after 'Answer:'"),
    ("math", "The answer is **85** apples.", "85", 1.0, "markdown emphasis, then a unit"),
    ("math", "The answer is ８５.", "85", 1.0, "full-width digits (U+FF10-FF19)"),
    ("math", "Final Answer: The final answer is 85.", "85", 1.0, "a statement repeated"),
    ("math", "The answer is 85.\nFinal answer: 85", "85", 1.0, "two statements that agree"),
    # ---- math: boxed forms ---------------------------------------------------------------------
    ("math", f"{B}{{85.}}", "85", 1.0, "a sentence's full stop inside the box"),
    ("math", f"{B}{{85\\text{{ cm}}^{{2}}}}", "85", 1.0, "a unit with an exponent"),
    ("math", f"{B}{{85 \\text{{ cm}}^2}}", "85", 1.0, "the same, exponent unbraced"),
    ("math", f"{B}{{85 \\text{{ (eighty-five)}}}}", "85", 1.0, "the number in words, as text"),
    ("math", f"{B}{{1\\,000}}", "1000", 1.0, "a thin space as thousands separator"),
    ("math", f"{B}{{1\\,000\\,000}}", "1000000", 1.0, "two thin-space separators"),
    ("math", f"{B}{{2\\frac{{1}}{{4}}}}", "2.25", 1.0, "a mixed number"),
    ("math", f"{B}{{2 \\frac14}}", "\\frac{9}{4}", 1.0, "a mixed number, short \\frac"),
    ("math", f"{B}{{\\angle A = 30^\\circ}}", "30", 1.0, "a named quantity equals the number"),
    ("math", f"{B}{{x_1 = 3}}", "3", 1.0, "a subscripted name equals the number"),
    (
        "math",
        f"{B}{{4.5 \\times 10^{{33}}}}",
        "4.5e33",
        1.0,
        "scientific notation where the gold is written in it",
    ),
    # ---- math: refused on purpose ----------------------------------------------------------------
    (
        "math",
        "The answer is eighty-five.",
        "85",
        0.0,
        "refused: a number in words only; words are prose, never read as a value",
    ),
    (
        "math",
        f"{B}{{1 000}}",
        "1000",
        0.0,
        "refused: a plain space between digit groups reads as two numbers (`84 85`), so it is "
        "not a thousands separator; `1,000`, `1{,}000` and `1\\,000` are",
    ),
    (
        "math",
        f"{B}{{10^3}}",
        "1000",
        0.0,
        "refused: scientific notation against a plain gold is a power left to evaluate, as "
        "`2^{10}` is",
    ),
    (
        "math",
        f"{B}{{x = 47+38 = 85}}",
        "85",
        0.0,
        "refused: an equation with a number on its left is working, not an answer",
    ),
    # ---- math: honest controls and near-misses ---------------------------------------------------
    ("math", f"{B}{{85}}", "85", 1.0, "control: the plain box"),
    ("math", "The answer is 85.", "85", 1.0, "control: the plain statement"),
    ("math", "The answer is 84 dollars.", "85", 0.0, "near-miss: a wrong number with a unit"),
    ("math", "The answer is 84, which is the sum.", "85", 0.0, "near-miss: wrong, with a clause"),
    ("math", "The answer is ８４.", "85", 0.0, "near-miss: wrong, full-width"),
    ("math", f"{B}{{2\\frac{{1}}{{2}}}}", "2.25", 0.0, "near-miss: a wrong mixed number"),
    ("math", f"{B}{{1\\,001}}", "1000", 0.0, "near-miss: a wrong thin-spaced number"),
    ("math", "The answer is 84 because 47+38=85.", "84", 1.0, "the stated answer is read"),
    # ---- mcq -------------------------------------------------------------------------------------
    ("mcq", "The answer is C", "C", 1.0, "a one-letter statement"),
    ("mcq", "The correct answer is C.", "C", 1.0, "a one-letter statement"),
    ("mcq", "Answer: Option C", "C", 1.0, "the letter after 'Option'"),
    ("mcq", "Answer: c", "C", 1.0, "a lower-case letter on its own"),
    ("mcq", "Answer: (c).", "C", 1.0, "a lower-case letter, bracketed"),
    ("mcq", "Final Answer: The final answer is $\\boxed{C}$", "C", 1.0, "a repeated statement"),
    ("mcq", "The correct answer is D) 95 g", "D", 1.0, "SmolLM2's form: letter, option text"),
    (
        "mcq",
        "The correct answer is D) A decrease in pressure.",
        "D",
        1.0,
        "option text that holds a capital A is the option's text, not a second letter",
    ),
    ("mcq", "Answer: C. A ball falls faster.", "C", 1.0, "a sentence after the answer's own"),
    ("mcq", "Answer：Ｃ", "C", 1.0, "full-width colon and letter"),
    (
        "mcq",
        "Answer: C, as I showed above",
        "C",
        0.0,
        "refused: the clause after the letter names the option letter I (the pronoun cannot be "
        "told from option I)",
    ),
    (
        "mcq",
        "The answer is a prime number",
        "A",
        0.0,
        "refused: a lower-case letter followed by prose is an article, not option A",
    ),
    ("mcq", "Answer: C", "C", 1.0, "control: the prompt's own format"),
    ("mcq", "The correct answer is C.", "B", 0.0, "near-miss: the wrong letter"),
    ("mcq", "Answer: b", "C", 0.0, "near-miss: the wrong letter, lower case"),
    # ---- code ------------------------------------------------------------------------------------
    ("code", HE_BODY, HE_ANSWER, 1.0, "a HumanEval body continuing the prompt's signature"),
    ("code", "    return x + 2\n", HE_ANSWER, 0.0, "near-miss: a wrong body"),
    (
        "code",
        "def add_one(x):\n    return x + 1\n```\n\nIn this code, `add_one` adds one.",
        HE_ANSWER,
        1.0,
        "code that closes a fence it never opened, then explains it (SmolLM2, 11% on HumanEval)",
    ),
]


@pytest.fixture(scope="module")
def rewards() -> list[float]:
    columns = zip(*[r[:3] for r in FALSE_NEGATIVES], strict=True)
    domains, completions, answers = (list(c) for c in columns)
    return verify_batch(domains, completions, answers, CODE_CFG)


@pytest.mark.parametrize(
    "i", range(len(FALSE_NEGATIVES)), ids=[f"{r[0]}-{r[4][:40]}" for r in FALSE_NEGATIVES]
)
def test_false_negative_earns_its_stated_reward(rewards, i):
    domain, completion, _, expected, note = FALSE_NEGATIVES[i]
    assert rewards[i] == expected, f"{domain}: {note}\n{completion}"


def test_every_refusal_says_why():
    refused = [r for r in FALSE_NEGATIVES if r[3] == 0.0 and not r[4].startswith("near-miss")]
    assert refused and all(r[4].startswith("refused: ") for r in refused)


MCQ_PROMPT = tiny_mcq.prompt(47, 38, ("mass", "g"), [65, 75, 85, 95])

# The format term on the same legitimate forms: (domain, completion, gold, prompt).
FORMAT_FALSE_NEGATIVES = [
    ("code", HE_BODY, HE_ANSWER, None),  # prefix + body defines the entry point
    ("code", "def add_one(x):\n    return x + 1\n```\n\nIt adds one.", HE_ANSWER, None),
    ("math", f"{B}{{85.}}", "85", None),
    ("math", f"{B}{{1\\,000}}", "1000", None),
    ("mcq", "Answer: c", "C", MCQ_PROMPT),
    ("mcq", "The correct answer is D) 95 g", "D", MCQ_PROMPT),
    ("mcq", "Final Answer: The final answer is $\\boxed{C}$", "C", MCQ_PROMPT),
]


@pytest.mark.parametrize("row", FORMAT_FALSE_NEGATIVES)
def test_legitimate_forms_earn_the_format_reward(row):
    assert format_reward(*row) == 1.0
