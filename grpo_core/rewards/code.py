"""The code reward: the share of a problem's tests that the completion's program passes beyond
what a trivial program passes (all or nothing in binary mode, as benchmarks score).

The `answer` of a `code` problem is a JSON object:

    {"entry_point": "f",                       # the function the program must define (or null)
     "tests": ["assert f(1) == 2", ...],       # Python statements, one test each
     "setup": "import math",                   # optional: run before the tests, not the program
     "prefix": "def f(x):\\n    \\"\\"\\"doc\\"\\"\\"\\n"}  # optional: see `program_source`

The program is the last fenced ```python (or bare ```) block of the completion that defines
`entry_point`, else its last such block (an unterminated final fence counts), else the whole
completion. It runs in `grpo_core.rewards.sandbox`, and its tests run beside it in another
process (the sandbox's supervisor, `code_tester.py`): the program alone executes in the
program's process (`code_runner.py`, with `__name__` not "__main__", so a demo block under
`if __name__ == "__main__":` does not run; the setup, which may define the tests, is not run
there); each test executes in the tester with the answer's prefix and setup, and with the
entry point (and any other function the program defined) a proxy
that sends a call's arguments to the program's process and gets back the value, as plain data
(`grpo_core.rewards.plain`), or the name of the exception it raised. A test passes when it runs
without an exception. Results stream back one per test, so tests passed before a hang or crash
still count; an exception fails only its own test (one in setup or in the program's top level
fails them all). The whole run has one wall/CPU budget.

Evidence. Before the program's tests, the tester runs them against each program in `TRIVIAL`
(the prompt's stub, `pass` and `return None`; the constants True, False, 0, 1, "" and []; the
identity), which solve nothing. A test one of them passes (`candidate([]) == None`,
`not candidate(x)`, HumanEval's placeholder `assert True`) is no evidence of a solution. Partial
credit (`CodeCheck.reward()`) is what the program passes beyond the best of them:

    reward = max(0, (passed - baseline) / (tests - baseline))     (0 when baseline = tests)

with `baseline` the most tests one trivial program passes. So a trivial program earns 0, a
program that passes every test earns 1, and the complement of a do-nothing program (`return
True` where `return None` passes the negative cases) earns nothing either. Binary credit
(`reward(binary=True)`, `reward.code.binary`, every sampled evaluation) is the benchmark's own
rule: all tests pass.

Threat model: the program is hostile and tries to earn reward without solving the problem.
  1. It shares no memory, file descriptor or builtins with the tests: it cannot see the tests,
     their expected values or their frames, patch their builtins or helpers (a HumanEval test's
     `poly` is the prompt's, whatever the program defines), rebind `check`, or write a result;
     only its functions' return values reach a test, and only as plain data, so a value with a
     forged `__eq__` cannot be sent. By construction, not by a list of patched holes.
  2. Its process gets the calls pipe and the answers pipe, not stdin (which carries the job)
     and not the result channel. The tester's process runs as another uid (when we are root)
     and is not dumpable. Result lines still carry a random nonce, which only the tester holds:
     a same-uid program (not root) that reaches the parent's end of the channel cannot forge one.
  3. The sandbox (not this module) keeps the program from the network, the parent's
     environment and files, and cleans up every process it starts.
What a test cannot do, by the same construction: call the program with anything but plain
data (a function or an object as an argument fails that test), see what the program does to
its arguments (a copy crosses), or use an object the program returns (a class instance fails).
"""

from __future__ import annotations

import ast
import functools
import json
import marshal
import re
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from grpo_core.config.code_reward import CodeRewardParams as CodeRewardConfig
from grpo_core.errors import InputError
from grpo_core.rewards.sandbox import SandboxLimits, SandboxResult, run_python

HERE = Path(__file__).parent
# The harness's two halves, each after the plain-data codec (they run without grpo_core).
HARNESS = {"plain": HERE / "plain.py", "runner": HERE / "code_runner.py"}
HARNESS["tester"] = HERE / "code_tester.py"
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
class CodeAnswer:
    entry_point: str | None
    tests: tuple[str, ...]
    setup: str = ""
    prefix: str = ""


# The programs that solve nothing, in the tester's order (code_tester.py's TRIVIAL).
TRIVIAL = ("None", "True", "False", "0", "1", "''", "[]", "identity")


@dataclass(frozen=True)
class CodeCheck:
    passed: tuple[bool, ...]  # one per test
    trivial: tuple[frozenset[int], ...]  # one per test: the TRIVIAL programs that pass it
    sandbox: SandboxResult

    @property
    def evidence(self) -> tuple[bool, ...]:
        """Per test: whether no trivial program passes it."""
        return tuple(not t for t in self.trivial)

    @property
    def baseline(self) -> int:
        """The most tests one trivial program passes."""
        return max((sum(k in t for t in self.trivial) for k in range(len(TRIVIAL))), default=0)

    def reward(self, binary: bool = False) -> float:
        """Binary: all tests passed (the benchmark's own rule). Else the tests passed beyond
        the best trivial program's, as a fraction of what it leaves (module docstring)."""
        if binary:
            return float(all(self.passed))
        n, base = len(self.passed), self.baseline
        return max(0.0, (sum(self.passed) - base) / (n - base)) if n > base else 0.0


# The `reward.code` params in force: what a call without a config uses (a user's
# `reward.function` calling the verifiers keeps the run's limits and binary mode).
_ACTIVE: ContextVar[CodeRewardConfig | None] = ContextVar("reward_code", default=None)


@contextmanager
def code_config(cfg: CodeRewardConfig | None) -> Iterator[None]:
    """Within the block, code checks called without a config use `cfg` (None: no change)."""
    token = _ACTIVE.set(cfg or _ACTIVE.get())
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_code_config(cfg: CodeRewardConfig | None = None) -> CodeRewardConfig:
    """`cfg`, else the one `code_config` put in force, else the defaults."""
    return cfg or _ACTIVE.get() or CodeRewardConfig()


def code_reward(completion: str, answer: str, cfg: CodeRewardConfig | None = None) -> float:
    """The reward of one completion: its partial credit (all-or-nothing if cfg.binary)."""
    cfg = active_code_config(cfg)
    return check_code(completion, answer, cfg).reward(cfg.binary)


def code_rewards(
    completions: list[str], answers: list[str], cfg: CodeRewardConfig | None = None
) -> list[float]:
    """`code_reward` of each (completion, answer) pair, `cfg.workers` programs at a time."""
    if len(completions) != len(answers):
        raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
    cfg = active_code_config(cfg)
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
    cfg = active_code_config(cfg)
    if isinstance(answer, str):
        answer = parse_code_answer(answer)
    nonce = secrets.token_hex(16)
    job = {
        "nonce": nonce,
        "setup": answer.setup,
        "prefix": answer.prefix,
        "program": program_source(completion, answer),
        "entry_point": answer.entry_point,
        "tests": list(answer.tests),
        "cap": cfg.max_output_bytes,
    }
    runner, tester = _harness_sources()
    result = run_python(
        runner, stdin=marshal.dumps(job), limits=sandbox_limits(cfg), channel=True, tester=tester
    )
    ok, trivial = _results(result.channel, nonce, len(answer.tests))
    n = range(len(answer.tests))
    return CodeCheck(
        tuple(ok.get(i, False) for i in n), tuple(trivial.get(i, _NONE) for i in n), result
    )


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
    for key, code in (("setup", texts["setup"]), ("prefix", texts["prefix"])):
        try:
            ast.parse(code)
        except SyntaxError as exc:
            raise InputError(f"code answer: {key} does not parse: {exc}") from None
    for i, test in enumerate(tests):
        try:
            ast.parse(test)
        except SyntaxError as exc:
            raise InputError(f"code answer: test {i} does not parse ({exc}): {test!r}") from None
    return CodeAnswer(entry_point, tuple(tests), **texts)


def extract_program(completion: str, entry_point: str | None = None) -> str:
    """The code in a completion: its last fenced Python block defining `entry_point`; else the
    text before its first fence, when that defines `entry_point` (code that closes a fence it
    never opened, then explains itself: 11% of SmolLM2's HumanEval answers); else its last
    fenced Python block; else the completion itself."""
    blocks = [m[2] for m in _FENCE.finditer(completion) if m[1].lower() in _PYTHON_FENCES]
    if not blocks:
        return completion
    if entry_point:
        defining = [b for b in blocks if defines(b, entry_point)]
        if defining:
            return defining[-1]
        head = completion[: completion.index("```")]
        if defines(head, entry_point):
            return head
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


_NONE: frozenset[int] = frozenset()


def _results(channel: bytes, nonce: str, n_tests: int) -> tuple[dict, dict]:
    """From the tester's lines with the run's nonce, the first verdict on each test: whether
    the program passed it, and which trivial programs did."""
    ok: dict[int, bool] = {}
    trivial: dict[int, frozenset[int]] = {}
    for raw in channel.split(b"\n"):
        try:
            msg = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if type(msg) is not dict or msg.get("n") != nonce:
            continue
        i = msg.get("i")
        if type(i) is not int or not 0 <= i < n_tests:
            continue
        if "trivial" in msg:
            ks = msg["trivial"]
            if type(ks) is list and all(type(k) is int and 0 <= k < len(TRIVIAL) for k in ks):
                trivial.setdefault(i, frozenset(ks))
        else:
            ok.setdefault(i, msg.get("ok") is True)
    return ok, trivial


@functools.cache
def _harness_sources() -> tuple[str, str]:
    plain = HARNESS["plain"].read_text()
    return plain + HARNESS["runner"].read_text(), plain + HARNESS["tester"].read_text()
