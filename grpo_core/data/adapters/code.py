"""Code benchmarks: HumanEval, MBPP.

`answer` is a JSON string `{"entry_point", "tests", "setup", "prefix"}`, read by the code
reward (`grpo_core.rewards.code`); a task without tests raises `RowError`. A test shown in the
prompt (MBPP's first) is never among the graded ones: a program that special-cases it would
earn its share.
"""

from __future__ import annotations

import ast
import builtins
import json
from typing import Any

from grpo_core.data import prompts
from grpo_core.data.adapters.base import Row, RowError, as_text, present, required


def _code(
    key: Any,
    prompt: str,
    entry_point: str,
    tests: list[str],
    setup: str,
    prefix: str,
    solution: str,
    meta: dict,
) -> dict:
    if not tests:
        raise RowError("no tests")
    answer = {"entry_point": entry_point, "tests": tests, "setup": setup, "prefix": prefix}
    return {
        "key": key,
        "level": 0,
        "prompt": prompt,
        "answer": json.dumps(answer, ensure_ascii=False),
        "solution": solution,
        "meta": present(meta),
    }


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.old:
            node.id = self.new
        return node


def humaneval_tests(test: str, entry_point: str) -> tuple[list[str], str]:
    """(tests, setup) from a HumanEval `test` source.

    When `check(candidate)` is only assert statements, each becomes one test with `candidate`
    renamed to the entry point, and the module-level statements (METADATA, imports, helpers)
    become the setup; otherwise the single test `check(entry_point)` runs the whole source,
    which is then the setup.
    """
    try:
        tree = ast.parse(test)
    except SyntaxError as exc:
        raise RowError(f"the test source does not parse: {exc}") from None
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) == 1 and len(checks[0].args.args) == 1:
        check = checks[0]
        body = check.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # a docstring is not a test
        if body and all(isinstance(stmt, ast.Assert) for stmt in body):
            rename = _Rename(check.args.args[0].arg, entry_point)
            tests = [ast.unparse(rename.visit(stmt)) for stmt in body]
            setup = [ast.get_source_segment(test, n) for n in tree.body if n is not check]
            return tests, "\n".join(s for s in setup if s)
    return [f"check({entry_point})"], test


def humaneval(row: Row, index: int, seed: int) -> dict:
    entry_point = required(row, ["entry_point"], "entry_point")
    required(row, ["prompt"], "prompt")
    required(row, ["test"], "test")
    # Verbatim, not stripped: the canonical solution continues the prompt's last line.
    prefix = row["prompt"]
    tests, setup = humaneval_tests(row["test"], entry_point)
    return _code(
        as_text(row["task_id"]) or index,
        prompts.continuation_prompt(prefix),
        entry_point,
        tests,
        setup,
        prefix,
        row.get("canonical_solution") or "",
        {},
    )


_BUILTINS = frozenset(dir(builtins))


def _mbpp_entry_point(tests: list[str], code: str) -> str:
    """The function the first test calls that `code` defines; failing that, the first
    non-builtin function it calls; failing that, the first function `code` defines."""
    try:
        defined = [
            n.name
            for n in ast.parse(code).body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
    except SyntaxError:
        defined = []
    try:
        calls = [
            n.func.id
            for n in ast.walk(ast.parse(tests[0]))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        ]
    except SyntaxError as exc:
        raise RowError(f"the first test does not parse: {exc}") from None
    for name in calls:
        if name in defined:
            return name
    for name in calls:
        if name not in _BUILTINS:
            return name
    if defined:
        return defined[0]
    raise RowError("cannot tell which function the tests call")


def mbpp(row: Row, index: int, seed: int) -> dict:
    # Both layouts: full (text, test_setup_code, challenge_test_list) and sanitized (prompt,
    # test_imports). MBPP ships Windows line endings in its code.
    tests = [as_text(t) for t in row.get("test_list") or [] if as_text(t)]
    if not tests:
        raise RowError("empty test_list")
    code = (row.get("code") or "").replace("\r\n", "\n")
    entry_point = _mbpp_entry_point(tests, code)
    if "test_setup_code" in row:
        setup = as_text(row["test_setup_code"]).replace("\r\n", "\n")
    else:
        setup = "\n".join(as_text(t) for t in row.get("test_imports") or [])
    task = required(row, ["text", "prompt"], "task text")
    challenge = [as_text(t) for t in row.get("challenge_test_list") or [] if as_text(t)]
    if len(tests) < 2:
        raise RowError("one test: shown in the prompt, it would leave none to grade")
    # The prompt shows tests[0] (how to call the function); the others are graded. A shown test
    # that were graded would pay a program that special-cases it.
    return _code(
        as_text(row["task_id"]) or index,
        prompts.code_prompt(task, entry_point, tests[:1]),
        entry_point,
        tests[1:],
        setup,
        "",
        code,
        {"shown_test": tests[0], "challenge_tests": challenge},
    )
