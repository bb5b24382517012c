"""The code reward on honest programs: fractions, extraction, answer formats, value semantics.

Hostile programs are in test_sandbox.py.
"""

import json

import pytest

from grpo_core.errors import InputError
from grpo_core.rewards.code import (
    CodeRewardConfig,
    check_code,
    code_reward,
    code_rewards,
    extract_program,
    parse_code_answer,
    program_source,
)

CFG = CodeRewardConfig(workers=1, timeout_s=3.0)


def answer(tests: list[str], entry_point: str | None = "f", **extra: str) -> str:
    return json.dumps({"entry_point": entry_point, "tests": tests, **extra})


SQUARE = answer(["assert f(2) == 4", "assert f(3) == 9", "assert f(-1) == 1"])


def fenced(code: str, lang: str = "python") -> str:
    return f"Here is my solution.\n```{lang}\n{code}```\nIt squares x."


def test_correct_program_gets_full_reward():
    assert code_reward(fenced("def f(x):\n    return x * x\n"), SQUARE, CFG) == 1.0


def test_partial_program_gets_the_fraction_passed():
    # x + 6 is right for 3 only (9); x ** 2 if x > 0 else 0 for 2 and 3, not for -1.
    assert code_reward("def f(x):\n    return x + 6\n", SQUARE, CFG) == pytest.approx(1 / 3)
    partial = "def f(x):\n    return x ** 2 if x > 0 else 0\n"
    assert code_reward(partial, SQUARE, CFG) == pytest.approx(2 / 3)
    assert check_code(partial, SQUARE, CFG).passed == (True, True, False)


def test_binary_mode_is_all_or_nothing():
    binary = CodeRewardConfig(workers=1, binary=True)
    assert code_reward("def f(x):\n    return x ** 2 if x > 0 else 0\n", SQUARE, binary) == 0.0
    assert code_reward("def f(x):\n    return x * x\n", SQUARE, binary) == 1.0


def test_an_exception_fails_only_its_own_test():
    code = "def f(x):\n    if x < 0:\n        raise ValueError(x)\n    return x * x\n"
    assert check_code(code, SQUARE, CFG).passed == (True, True, False)


def test_an_error_in_the_program_top_level_fails_every_test():
    code = "def f(x):\n    return x * x\nprint(f(int(input())))\n"  # input() meets EOF
    check = check_code(code, SQUARE, CFG)
    assert check.passed == (False, False, False)
    assert b"EOFError" in check.sandbox.stderr


def test_tests_passed_before_a_hang_still_count():
    code = "def f(x):\n    while x < 0:\n        pass\n    return x * x\n"
    check = check_code(code, SQUARE, CodeRewardConfig(workers=1, timeout_s=1.5, cpu_time_s=5))
    assert check.passed == (True, True, False)
    assert check.sandbox.timed_out


def test_setup_runs_before_the_program_and_the_tests():
    ans = answer(
        ["assert math.isclose(hyp(3, 4), 5.0)", "assert hyp(*PAIR) == 13.0"],
        entry_point="hyp",
        setup="import math\nPAIR = (5, 12)\n",
    )
    assert code_reward("def hyp(a, b):\n    return math.sqrt(a * a + b * b)\n", ans, CFG) == 1.0


def test_tests_on_setup_names_only():
    ans = answer(["assert helper() == 3"], entry_point=None, setup="def helper():\n    return 3\n")
    assert code_reward("x = 1\n", ans, CFG) == 1.0


HUMANEVAL = answer(
    ["assert total([1, 2, 3]) == 6", "assert total([]) == 0"],
    entry_point="total",
    prefix='from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum."""\n',
)


def test_humaneval_continuation_gets_the_prefix():
    assert code_reward("    return sum(xs)\n", HUMANEVAL, CFG) == 1.0


def test_rewritten_humaneval_function_keeps_the_prefix_imports():
    code = fenced("def total(xs: List[int]) -> int:\n    return sum(xs)\n")
    assert program_source(code, parse_code_answer(HUMANEVAL)).startswith("from typing import")
    assert code_reward(code, HUMANEVAL, CFG) == 1.0


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("def f(x): return 1", "def f(x): return 1"),  # no fence: the text itself
        (fenced("A = 1\n"), "A = 1\n"),
        (fenced("A = 1\n", lang=""), "A = 1\n"),
        (fenced("A = 1\n", lang="py"), "A = 1\n"),
        # the last block that defines f wins over a later usage example
        ("```python\ndef f(x):\n    return 2\n```\nUsage:\n```python\nprint(f(3))\n```", "def f"),
        # without a block defining f, the last block
        ("```python\nx = 1\n```\n```python\ny = 2\n```", "y = 2\n"),
        # an unterminated final fence counts
        ("```python\nx = 1\n```\nfixed:\n```python\ndef f(x):\n    return 3\n", "return 3"),
        # other languages are not the program
        ("```python\ndef f(x): return 4\n```\n```text\ndef f(x): return 5\n```", "return 4"),
    ],
)
def test_extract_program(completion, expected):
    assert expected in extract_program(completion, "f")


def test_extraction_end_to_end():
    completion = (
        "First try:\n```python\ndef f(x):\n    return x\n```\nBetter:\n"
        "```python\ndef f(x):\n    return x * x\n```\nExample:\n```python\nprint(f(2))\n```"
    )
    assert code_reward(completion, SQUARE, CFG) == 1.0


VALUES = answer(
    [
        "assert f('tuple') == (1, 2)",
        "assert f('list') == [1, 2]",
        "assert f('tuple') != [1, 2]",
        "assert f('set') == {1, 2}",
        "assert f('dict') == {(1, 2): [3.5, None], 'k': b'x'}",
        "assert f('none') is None",
        "assert f('true') is True",
        "assert not f('empty')",
        "assert f('nan') != f('nan')",
        "assert f('float') == 1",
        "assert 0.5 == f('half')",
    ]
)
VALUES_PROGRAM = """
def f(kind):
    return {
        "tuple": (1, 2), "list": [1, 2], "set": {2, 1}, "dict": {"k": b"x", (1, 2): [3.5, None]},
        "none": None, "true": True, "empty": [], "nan": float("nan"), "float": 1.0, "half": 0.5,
    }[kind]
"""


def test_values_compare_like_python():
    assert check_code(VALUES_PROGRAM, VALUES, CFG).passed == (True,) * 11
    # A list where a tuple is expected fails, as it would in Python.
    swapped = VALUES_PROGRAM.replace('"tuple": (1, 2)', '"tuple": [1, 2]')
    assert check_code(swapped, VALUES, CFG).passed[:3] == (False, True, False)


def test_expected_values_never_reach_the_child():
    tests = parse_code_answer(SQUARE).tests
    assert [t.job for t in tests] == [{"expr": f"f({x})", "checked": False} for x in (2, 3, -1)]
    assert [t.expected for t in tests] == [4, 9, 1]
    modes = parse_code_answer(VALUES).tests
    assert [t.mode for t in modes] == [
        "eq", "eq", "ne", "eq", "eq", "is", "is", "falsy", "truthy", "eq", "eq"
    ]  # fmt: skip


CHECK = "def check(candidate):\n    assert candidate(5) == 25\n"


def test_statement_tests_run_in_the_child():
    ans = answer(["for x in range(4):\n    assert f(x) == x * x", "check(f)"], setup=CHECK)
    assert check_code("def f(x):\n    return x * x\n", ans, CFG).passed == (True, True)
    assert check_code("def f(x):\n    return x + x\n", ans, CFG).passed == (False, False)


MIXED = [
    ("def f(x):\n    return x * x\n", 1.0),
    ("def f(x):\n    return x + 6\n", 1 / 3),
    ("def f(x):\n    return abs(x) * 3 if x == 3 else x * x\n", 1.0),
    ("def f(x):\n    return None\n", 0.0),
    ("```python\ndef f(x):\n    return x ** 2 if x > 0 else 0\n```", 2 / 3),
    ("syntax error here", 0.0),
]


def test_parallel_workers_match_one_worker():
    completions = [c for c, _ in MIXED]
    answers = [SQUARE] * len(MIXED)
    serial = code_rewards(completions, answers, CodeRewardConfig(workers=1))
    parallel = code_rewards(completions, answers, CodeRewardConfig(workers=3))
    assert serial == parallel == pytest.approx([r for _, r in MIXED])


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("assert f(1) == 1", "not JSON"),
        ("[1, 2]", "JSON object"),
        ({"tests": ["assert f(1) == 1"]}, "JSON string, got dict"),
        (json.dumps({"entry_point": "f"}), "tests must be a non-empty list"),
        (json.dumps({"entry_point": "f", "tests": []}), "tests must be a non-empty list"),
        (json.dumps({"entry_point": "f", "tests": "assert f(1)"}), "tests must be"),
        (json.dumps({"entry_point": "f", "tests": [1]}), "tests must be"),
        (json.dumps({"entry_point": 3, "tests": ["assert f(1)"]}), "entry_point must be"),
        (json.dumps({"entry_point": "f()", "tests": ["assert f(1)"]}), "entry_point must be"),
        (json.dumps({"tests": ["assert f(1)"], "setup": ["import os"]}), "setup must be"),
        (json.dumps({"tests": ["assert f(1)"], "setpu": ""}), "unknown keys ['setpu']"),
        (json.dumps({"tests": ["assert f(1) =="]}), "test 0 does not parse"),
        (json.dumps({"tests": ["assert f(1)"], "setup": "import"}), "setup does not parse"),
    ],
)
def test_malformed_answers_are_input_errors(bad, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        code_rewards(["def f(x):\n    return x\n"], [bad], CFG)


def test_config_rejects_nonsense():
    # the config is the validated `reward.code` params section
    with pytest.raises(ValueError, match="workers"):
        CodeRewardConfig(workers=0)
