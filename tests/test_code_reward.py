"""The code reward on honest programs: fractions, extraction, answer formats, value semantics.

Hostile programs are in test_sandbox.py.
"""

import json

import pytest

from grpo_core.errors import InputError
from grpo_core.rewards.code import (
    TRIVIAL,
    CodeCheck,
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


def test_partial_program_gets_what_it_passes_beyond_a_trivial_program():
    # `return 1` (and `return True`: True == 1) passes f(-1) == 1, so the baseline is 1 test
    # of 3: reward = (passed - 1) / (3 - 1).
    # x + 6 is right for 3 only (9): (1 - 1) / 2 = 0; x ** 2 if x > 0 else 0 for 2 and 3: 1/2.
    assert code_reward("def f(x):\n    return x + 6\n", SQUARE, CFG) == 0.0
    partial = "def f(x):\n    return x ** 2 if x > 0 else 0\n"
    assert code_reward(partial, SQUARE, CFG) == pytest.approx(1 / 2)
    check = check_code(partial, SQUARE, CFG)
    assert check.passed == (True, True, False) and check.baseline == 1
    assert check.trivial == (frozenset(), frozenset(), {TRIVIAL.index("1"), TRIVIAL.index("True")})


def _check(passed: list[bool], trivial: list[set[str]]) -> CodeCheck:
    ks = [frozenset(TRIVIAL.index(t) for t in ts) for ts in trivial]
    return CodeCheck(tuple(passed), tuple(ks), sandbox=None)


def test_the_partial_credit_formula_by_hand():
    # HumanEval/56's shape: 4 positive cases (`return True` passes them), 8 negative ones
    # (`return None` and `return False` pass them): baseline 8, what is left: 4.
    trivial = [{"True"}] * 4 + [{"None", "False"}] * 8
    assert _check([True] * 12, trivial).reward() == 1.0
    assert _check([True] * 11 + [False], trivial).reward() == pytest.approx((11 - 8) / 4)
    assert _check([True] * 4 + [False] * 8, trivial).reward() == 0.0  # `return True`
    assert _check([False] * 4 + [True] * 8, trivial).reward() == 0.0  # `return None`
    assert _check([True] * 4 + [False] * 8, trivial).reward(binary=True) == 0.0
    # No trivial program passes anything: the plain fraction.
    assert _check([True, False, True], [set()] * 3).reward() == pytest.approx(2 / 3)
    # A trivial program passes every test: no evidence at all, even for a full pass.
    assert _check([True, True], [{"0"}, {"0"}]).reward() == 0.0
    assert _check([True, True], [{"0"}, {"0"}]).reward(binary=True) == 1.0


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


def test_setup_runs_before_the_tests_and_never_in_the_programs_process():
    ans = answer(
        ["assert math.isclose(hyp(3, 4), 5.0)", "assert hyp(*PAIR) == 13.0"],
        entry_point="hyp",
        setup="import math\nPAIR = (5, 12)\n",
    )
    hyp = "def hyp(a, b):\n    return math.sqrt(a * a + b * b)\n"
    assert code_reward("import math\n" + hyp, ans, CFG) == 1.0
    assert code_reward(hyp, ans, CFG) == 0.0  # its own imports: the setup may hold the tests
    # HumanEval's setup defines `check`, its tests: a program cannot read them.
    check = answer(
        ["check(f)"], setup="def check(candidate):\n    assert candidate(1234) == 1522756\n"
    )
    assert check_code(SNOOP, check, CFG).passed == (True,)


def test_a_test_on_setup_names_only_is_no_evidence():
    # A program that does nothing passes it: all tests pass (binary 1), none is evidence (0).
    ans = answer(["assert helper() == 3"], entry_point=None, setup="def helper():\n    return 3\n")
    check = check_code("x = 1\n", ans, CFG)
    assert check.passed == (True,) and check.evidence == (False,)
    assert check.reward() == 0.0 and check.reward(binary=True) == 1.0


def test_a_program_without_an_entry_point_calls_its_own_functions():
    ans = answer(["assert g(2) == 5", "assert g(0) == 1"], entry_point=None)
    assert code_reward("def g(x):\n    return 2 * x + 1\n", ans, CFG) == 1.0
    assert code_reward("def g(x):\n    return 5\n", ans, CFG) == 0.5


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
        # code that closes a fence it never opened, then prose: the code before the fence
        ("def f(x):\n    return 6\n```\n\nIn this code, f returns 6.", "return 6"),
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


SNOOP = """
import gc, sys
SEEN = sys.stdin.read() + repr(sys.argv)
SEEN += " ".join(o for o in gc.get_objects() if isinstance(o, str))
for frame in [sys._getframe()]:
    while frame:
        SEEN += repr(frame.f_locals)
        frame = frame.f_back
def f(x):
    seen = SEEN + " ".join(o for o in gc.get_objects() if isinstance(o, str))
    return x * x if "15227" + "56" not in seen else -1  # not this source's own text
"""


def test_the_tests_never_reach_the_programs_process():
    # stdin, argv, every string its interpreter holds, the frames above it: no test text.
    ans = answer(["assert f(1234) == 1522756", "assert f(2) == 4"])
    assert check_code(SNOOP, ans, CFG).passed == (True, True)


CHECK = "def check(candidate):\n    assert candidate(5) == 25\n"


def test_statement_tests_and_check_call_the_program():
    ans = answer(["for x in range(4):\n    assert f(x) == x * x", "check(f)"], setup=CHECK)
    assert check_code("def f(x):\n    return x * x\n", ans, CFG).passed == (True, True)
    assert check_code("def f(x):\n    return x + x\n", ans, CFG).passed == (False, False)


MIXED = [  # the baseline is 1 of 3 (`return 1` passes f(-1) == 1)
    ("def f(x):\n    return x * x\n", 1.0),
    ("def f(x):\n    return x + 6\n", 0.0),
    ("def f(x):\n    return abs(x) * 3 if x == 3 else x * x\n", 1.0),
    ("def f(x):\n    return None\n", 0.0),
    ("```python\ndef f(x):\n    return x ** 2 if x > 0 else 0\n```", 1 / 2),
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
        (json.dumps({"tests": ["assert f(1)"], "prefix": "def f(x):"}), "prefix does not parse"),
    ],
)
def test_malformed_answers_are_input_errors(bad, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        code_rewards(["def f(x):\n    return x\n"], [bad], CFG)


def test_config_rejects_nonsense():
    # the config is the validated `reward.code` params section
    with pytest.raises(ValueError, match="workers"):
        CodeRewardConfig(workers=0)
