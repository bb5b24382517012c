"""The code reward: the fraction of a problem's tests that the completion's program passes.

The `answer` of a `code` problem is a JSON object:

    {"entry_point": "f",                       # the function the program must define (or null)
     "tests": ["assert f(1) == 2", ...],       # one Python statement per test
     "setup": "import math",                   # optional: run before the program
     "prefix": "def f(x):\\n    \\"\\"\\"doc\\"\\"\\"\\n"}  # optional: see `program_source`

The program is the last fenced ```python (or bare ```) block of the completion that defines
`entry_point`, else its last such block (an unterminated final fence counts), else the whole
completion. It runs in `grpo_core.rewards.sandbox` under `grpo_core/rewards/sandbox_harness.py`:
setup, then the
program (with `__name__` not "__main__", so a demo block under `if __name__ == "__main__":` does
not run), then each test. Results stream back one per test on a private pipe, so tests passed
before a hang or crash still count; an exception fails only its own test (one in setup or in the
program's top level fails them all). The whole run has one wall/CPU budget.

Threat model: the program is hostile and tries to earn reward without solving the problem.
  1. `assert E == LITERAL` (either side), `assert E != LITERAL` and `assert E is True/False/None`:
     the child evaluates only E and sends its value as plain data (exact builtin types); the
     expected value never enters the child and the parent compares. Faked `__eq__`, printed or
     forged results, patched builtins or harness, sys.exit/os._exit: none of them yields reward.
  2. `assert E` / `assert not E` (`assert abs(f(x) - 0.5) < 1e-6`): the child sends E's value
     and the parent takes its truth. E runs with the program's functions returning copies as
     plain data (so such a test fails if f returns a generator or its own class) and with the
     builtins as they were before the program ran: fake objects cannot steer it, but a program
     that patches a module E calls (`math.isclose = ...`) can. Any other statement (`check(f)`,
     loops) runs in the child, which reports "ok": a program that digs the harness's nonce out
     of its memory can forge that. Data sources should prefer form 1 (e.g. unroll HumanEval's
     `check` into one assert per case).
  3. Lines on the result pipe count only with the run's random nonce (sent on stdin, read by the
     harness before the program runs), only the first line per test counts, and a value line
     never passes a statement test: blind writes to likely fds earn nothing.
  4. The sandbox (not this module) keeps the program from the network, the parent's
     environment and files, and cleans up every process it starts.
"""

from __future__ import annotations

import ast
import functools
import json
import marshal
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grpo_core.config.code_reward import CodeRewardParams as CodeRewardConfig
from grpo_core.errors import InputError
from grpo_core.rewards.sandbox import SandboxLimits, SandboxResult, run_python
from grpo_core.rewards.sandbox_harness import decode

HARNESS = Path(__file__).with_name("sandbox_harness.py")
ANSWER_KEYS = {"entry_point", "tests", "setup", "prefix"}
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_PYTHON_FENCES = {"", "python", "py", "python3", "py3"}
_IMPORT = re.compile(r"^(?:import|from)[ \t]+\S.*$", re.M)


def sandbox_limits(cfg: CodeRewardConfig) -> SandboxLimits:
    """The sandbox limits of each program under the `reward.code` params."""
    return SandboxLimits(
        timeout_s=cfg.timeout_s,
        cpu_time_s=cfg.cpu_time_s,
        memory_mb=cfg.memory_mb,
        max_output_bytes=cfg.max_output_bytes,
        max_processes=cfg.max_processes,
    )


@dataclass(frozen=True)
class CodeTest:
    source: str  # the test as written
    job: dict  # what the child gets: {"expr": ..., "checked": bool} or {"code": ...}
    mode: str  # eq | ne | is | is_not | truthy | falsy | ran
    expected: object = None  # eq, ne, is, is_not: stays in the parent


@dataclass(frozen=True)
class CodeAnswer:
    entry_point: str | None
    tests: tuple[CodeTest, ...]
    setup: str = ""
    prefix: str = ""


@dataclass(frozen=True)
class CodeCheck:
    passed: tuple[bool, ...]  # one per test
    sandbox: SandboxResult

    def reward(self, binary: bool = False) -> float:
        if binary:
            return float(all(self.passed))
        return sum(self.passed) / len(self.passed)


def code_reward(completion: str, answer: str, cfg: CodeRewardConfig | None = None) -> float:
    """The reward of one completion: fraction of tests passed (all-or-nothing if cfg.binary)."""
    cfg = cfg or CodeRewardConfig()
    return check_code(completion, answer, cfg).reward(cfg.binary)


def code_rewards(
    completions: list[str], answers: list[str], cfg: CodeRewardConfig | None = None
) -> list[float]:
    """`code_reward` of each (completion, answer) pair, `cfg.workers` programs at a time."""
    if len(completions) != len(answers):
        raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
    cfg = cfg or CodeRewardConfig()
    parsed = [parse_code_answer(a) for a in answers]  # a bad answer fails before anything runs
    if cfg.workers == 1 or len(completions) <= 1:
        checks = [check_code(c, a, cfg) for c, a in zip(completions, parsed, strict=True)]
    else:
        with ThreadPoolExecutor(min(cfg.workers, len(completions))) as pool:
            checks = list(pool.map(lambda c, a: check_code(c, a, cfg), completions, parsed))
    return [check.reward(cfg.binary) for check in checks]


def check_code(
    completion: str, answer: str | CodeAnswer, cfg: CodeRewardConfig | None = None
) -> CodeCheck:
    """Run the completion's program against the answer's tests; which passed, and the run."""
    cfg = cfg or CodeRewardConfig()
    if isinstance(answer, str):
        answer = parse_code_answer(answer)
    nonce = secrets.token_hex(16)
    job = {
        "nonce": nonce,
        "setup": answer.setup,
        "program": program_source(completion, answer),
        "tests": [t.job for t in answer.tests],
    }
    result = run_python(
        _harness_source(), stdin=marshal.dumps(job), limits=sandbox_limits(cfg), channel=True
    )
    messages = _messages(result.channel, nonce, len(answer.tests))
    passed = tuple(_judge(t, messages.get(i)) for i, t in enumerate(answer.tests))
    return CodeCheck(passed, result)


def parse_code_answer(answer: str) -> CodeAnswer:
    """Read and check a code answer; InputError says what is wrong with it."""
    if not isinstance(answer, str):
        raise InputError(f"code answer must be a JSON string, got {type(answer).__name__}")
    return _parse_code_answer(answer)


@functools.lru_cache(maxsize=4096)  # a GRPO group shares its answer
def _parse_code_answer(answer: str) -> CodeAnswer:
    try:
        data = json.loads(answer)
    except ValueError as exc:
        raise InputError(f"code answer is not JSON ({exc}): {answer[:80]!r}") from None
    if not isinstance(data, dict):
        raise InputError(f"code answer must be a JSON object, got: {answer[:80]!r}")
    unknown = sorted(set(data) - ANSWER_KEYS)
    if unknown:
        raise InputError(f"code answer has unknown keys {unknown}; known: {sorted(ANSWER_KEYS)}")
    entry_point = data.get("entry_point")
    if entry_point is not None and not (
        isinstance(entry_point, str) and entry_point.isidentifier()
    ):
        raise InputError(f"code answer: entry_point must be a name or null, got {entry_point!r}")
    tests = data.get("tests")
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise InputError(f"code answer: tests must be a non-empty list of strings, got {tests!r}")
    texts = {}
    for key in ("setup", "prefix"):
        texts[key] = data.get(key) or ""
        if not isinstance(texts[key], str):
            raise InputError(f"code answer: {key} must be a string, got {texts[key]!r}")
    try:
        ast.parse(texts["setup"])
    except SyntaxError as exc:
        raise InputError(f"code answer: setup does not parse: {exc}") from None
    converted = []
    for i, test in enumerate(tests):
        try:
            converted.append(_convert(test))
        except SyntaxError as exc:
            raise InputError(f"code answer: test {i} does not parse ({exc}): {test!r}") from None
    return CodeAnswer(entry_point, tuple(converted), **texts)


def extract_program(completion: str, entry_point: str | None = None) -> str:
    """The code in a completion: its last fenced Python block defining `entry_point`, else its
    last fenced Python block, else the completion itself."""
    blocks = [m[2] for m in _FENCE.finditer(completion) if m[1].lower() in _PYTHON_FENCES]
    if not blocks:
        return completion
    if entry_point:
        defining = [b for b in blocks if defines(b, entry_point)]
        if defining:
            return defining[-1]
    return blocks[-1]


def program_source(completion: str, answer: CodeAnswer) -> str:
    """The program to run: the completion's code, after the answer's prefix when the code does
    not define `entry_point` itself (a HumanEval-style continuation of the prompt).

    Code that does define it still gets the prefix's import lines: a rewritten HumanEval
    function keeps the prompt's annotations (`List[int]`) without the prompt's import.
    """
    code = extract_program(completion, answer.entry_point)
    if not answer.prefix:
        return code
    if not (answer.entry_point and defines(code, answer.entry_point)):
        return answer.prefix + code
    imports = _IMPORT.findall(answer.prefix)
    return "\n".join([*imports, code]) if imports else code


def defines(code: str, name: str) -> bool:
    """Whether `code` defines `name` at top level (def, async def, class or assignment)."""
    name = re.escape(name)
    pattern = rf"^(?:(?:async[ \t]+)?def|class)[ \t]+{name}\b|^{name}[ \t]*(?::[^=\n]*)?=(?!=)"
    return re.search(pattern, code, re.M) is not None


def _literal(node: ast.expr) -> tuple[bool, object]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _convert(test: str) -> CodeTest:
    """Split a test into what the child evaluates and what the parent compares (see module)."""
    body = ast.parse(test).body
    if len(body) != 1 or not isinstance(body[0], ast.Assert):
        return CodeTest(test, {"code": test}, "ran")
    cond = body[0].test

    def value_test(expr: ast.expr, mode: str, expected: object = None) -> CodeTest:
        checked = mode in ("truthy", "falsy")
        return CodeTest(test, {"expr": ast.unparse(expr), "checked": checked}, mode, expected)

    if isinstance(cond, ast.Compare) and len(cond.ops) == 1:
        op, left, right = cond.ops[0], cond.left, cond.comparators[0]
        if isinstance(op, ast.Eq | ast.NotEq):
            for expr, other in ((left, right), (right, left)):
                is_literal, expected = _literal(other)
                if is_literal:
                    return value_test(expr, "eq" if isinstance(op, ast.Eq) else "ne", expected)
        if (
            isinstance(op, ast.Is | ast.IsNot)
            and isinstance(right, ast.Constant)
            and any(right.value is c for c in (True, False, None))
        ):
            return value_test(left, "is" if isinstance(op, ast.Is) else "is_not", right.value)
    if isinstance(cond, ast.UnaryOp) and isinstance(cond.op, ast.Not):
        return value_test(cond.operand, "falsy")
    return value_test(cond, "truthy")


def _messages(channel: bytes, nonce: str, n_tests: int) -> dict[int, dict]:
    """The first well-formed result line with the right nonce for each test."""
    found: dict[int, dict] = {}
    for raw in channel.split(b"\n"):
        try:
            msg = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if type(msg) is not dict or msg.get("n") != nonce:
            continue
        i = msg.get("i")
        if type(i) is int and 0 <= i < n_tests and i not in found:
            found[i] = msg
    return found


def _judge(test: CodeTest, msg: dict | None) -> bool:
    if msg is None or "error" in msg:
        return False
    if test.mode == "ran":
        return msg.get("ok") is True and "v" not in msg
    if "v" not in msg:
        return False
    try:
        value = decode(msg["v"])
        match test.mode:
            case "eq":
                return bool(value == test.expected)
            case "ne":
                return bool(value != test.expected)
            case "is":
                return value is test.expected
            case "is_not":
                return value is not test.expected
            case "truthy":
                return bool(value)
            case "falsy":
                return not value
    except Exception:  # malformed or pathological data from the child: the test fails
        return False
    raise AssertionError(test.mode)


@functools.cache
def _harness_source() -> str:
    return HARNESS.read_text()
