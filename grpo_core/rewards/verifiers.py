"""Verifiable rewards and reward shaping.

Verifiers, one per problem domain, say how correct a completion is (1.0 = solved):
- `math`: math-verify. The gold answer is parsed first and `verify(gold, prediction)` is
  called in that order, as its documentation prescribes; the completion's last `\\boxed{}` is
  its answer (math-verify alone would take the first).
- `mcq`: the letter of the last `Answer: X` line (options A-J), `\\boxed{X}` as a fallback, the
  convention of common eval harnesses (simple-evals, lm-evaluation-harness); a reply that names
  two letters ("Answer: A or B") is wrong.
- `code`: the fraction of the problem's tests the completion's program passes in the sandbox
  (grpo_core.rewards.code); checked in parallel.

Shaping (training only) adds a format reward (the answer is in the form the domain expects)
and DAPO's soft overlong punishment, each with its weight from `reward.weights`; every
component is kept so that it can be logged on its own.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from functools import lru_cache

import torch
from math_verify import parse
from math_verify import verify as math_verify

from grpo_core.errors import InputError
from grpo_core.rewards.code import (
    CodeRewardConfig,
    code_rewards,
    defines,
    extract_program,
    parse_code_answer,
)

# ---- math ----------------------------------------------------------------------------------


_BOXED = re.compile(r"\\(?:boxed|fbox)")


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`, or the `\\boxed 5` form) in
    `text`, braces balanced; None when there is none or it is unterminated."""
    matches = list(_BOXED.finditer(text))
    if not matches:
        return None
    i = matches[-1].end()
    if text.startswith("{", i):
        depth = 0
        for j in range(i, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i + 1 : j].strip()
        return None
    # `\boxed 5`: the argument runs to the closing `$` or the next whitespace.
    match = re.match(r"\s+([^\s$]+)", text[i:])
    return match.group(1) if match else None


# 4.5e33 as written in data sets; math-verify would read it as 4.5 * e * 33.
_SCIENTIFIC = re.compile(r"^(-?\d+(?:\.\d+)?)[eE]([+-]?\d+)$")


def _math_source(answer: str) -> str:
    """What math-verify is given for a bare answer. A trailing percent sign goes outside the
    math (`$50$%`): math-verify reads `X%` as X/100 (and 9% as equal to 9) but cannot parse
    `\\boxed{50\\%}`."""
    body = _SCIENTIFIC.sub(r"\1\\times 10^{\2}", answer.strip())
    for sign in ("\\%", "%"):
        if body.endswith(sign):
            return f"${body[: -len(sign)].strip()}$%"
    return f"\\boxed{{{body}}}"


@lru_cache(maxsize=65536)
def parse_gold(answer: str) -> list:
    """The parsed gold answer; one math-verify cannot read is an error, not a silent 0."""
    gold = parse(_math_source(answer))
    # math-verify falls back to the raw string when its LaTeX parser fails; a gold answer
    # with no parsed expression would then match only itself, character for character.
    if all(isinstance(g, str) for g in gold):
        raise InputError(f"gold answer {answer!r} cannot be parsed by math-verify")
    return gold


def math_reward(completion: str, answer: str) -> float:
    """1.0 if the completion's final answer equals the gold answer, else 0.0.

    The last `\\boxed{}` is the answer when there is one; otherwise math-verify's own
    extraction reads the completion.
    """
    gold = parse_gold(answer)
    boxed = last_boxed(completion)
    pred = parse(completion if boxed is None else _math_source(boxed))
    return 1.0 if pred and math_verify(gold, pred) else 0.0


# ---- multiple choice -----------------------------------------------------------------------

LETTERS = "ABCDEFGHIJ"
# "Answer: X" anywhere on a line (simple-evals' `Answer\s*:`); the rest of the line is read.
_ANSWER_LINE = re.compile(r"(?im)\banswer\s*[:：](.*)$")
# The letter may sit in markdown emphasis, `$`, brackets, `\text{}` or `\boxed{}`.
_WRAPPER = r"(?:[\s*_$`(\[{]|\\(?:text|textbf|mathrm|boxed)\{)*"
_LEADING_LETTER = re.compile(rf"^{_WRAPPER}([{LETTERS}])(?![A-Za-z0-9])")
# A second option named as an alternative: "A or B", "A, C", "A/B", "A and D".
_BOXED_LETTER = re.compile(rf"{_WRAPPER}([{LETTERS}])[\s)\]}}*_$`.]*")
_SECOND_LETTER = re.compile(rf"^[\s)\]}}*_$`.]*(?:,|/|&|\bor\b|\band\b)\s*{_WRAPPER}[{LETTERS}]\b")


def _letter(text: str) -> str | None:
    m = _LEADING_LETTER.match(text)
    if m is None or _SECOND_LETTER.match(text[m.end() :]):
        return None
    return m.group(1)


def mcq_answer(completion: str) -> str | None:
    """The option letter the completion commits to, or None if it names none or several."""
    lines = _ANSWER_LINE.findall(completion)
    if lines:
        return _letter(lines[-1])
    boxed = last_boxed(completion)
    if boxed is not None:
        m = _BOXED_LETTER.fullmatch(boxed)
        return m.group(1) if m else None
    return None


def gold_letter(answer: str) -> str:
    if len(answer) != 1 or answer not in LETTERS:
        raise InputError(f"gold answer {answer!r} is not an option letter A-J")
    return answer


def mcq_reward(completion: str, answer: str) -> float:
    return 1.0 if mcq_answer(completion) == gold_letter(answer) else 0.0


# ---- the verifier registry -----------------------------------------------------------------

# Per-completion verifiers: (completion, gold answer) -> reward in [0, 1].
VERIFIERS: dict[str, Callable[[str, str], float]] = {"math": math_reward, "mcq": mcq_reward}
# Domains whose verifier runs a whole batch at once (programs checked in parallel).
BATCH_VERIFIERS = {"code": code_rewards}


def verify_batch(
    domains: list[str],
    completions: list[str],
    answers: list[str],
    code: CodeRewardConfig | None = None,
) -> list[float]:
    """The verifier's reward of every completion (1.0 = solved), code checked in parallel."""
    out: list[float] = [0.0] * len(completions)
    batched: dict[str, list[int]] = {}
    for i, domain in enumerate(domains):
        if domain in BATCH_VERIFIERS:
            batched.setdefault(domain, []).append(i)
        elif domain in VERIFIERS:
            out[i] = VERIFIERS[domain](completions[i], answers[i])
        else:
            known = sorted({*VERIFIERS, *BATCH_VERIFIERS})
            raise InputError(f"no reward for domain {domain!r}; known: {known}")
    for domain, rows in batched.items():
        scores = BATCH_VERIFIERS[domain](
            [completions[i] for i in rows], [answers[i] for i in rows], code
        )
        for i, s in zip(rows, scores, strict=True):
            out[i] = s
    return out


# How each domain's gold answer is read; `check_gold` runs them when the data is prepared.
GOLD_PARSERS: dict[str, Callable[[str], object]] = {
    "math": parse_gold,
    "mcq": gold_letter,
    "code": parse_code_answer,
}


def check_gold(problem: dict) -> None:
    """Read a problem's gold answer as its verifier will; an unreadable one is an error that
    names the problem, raised when the data is prepared rather than scored 0 at every step."""
    parser = GOLD_PARSERS.get(problem["domain"])
    if parser is None:
        raise InputError(
            f"problem {problem['id']!r}: unknown domain {problem['domain']!r}; "
            f"known: {sorted(GOLD_PARSERS)}"
        )
    try:
        parser(problem["answer"])
    except InputError as exc:
        raise InputError(f"problem {problem['id']!r} ({problem['source']}): {exc}") from None


# ---- final answers (for majority voting) ---------------------------------------------------


def final_answer(domain: str, completion: str) -> str | None:
    """The answer a completion commits to, as a vote for maj@k: the last boxed expression
    (whitespace removed), the option letter, or None (no answer; code has no vote)."""
    if domain == "math":
        ans = last_boxed(completion)
        return None if ans is None else re.sub(r"\s+", "", ans)
    if domain == "mcq":
        return mcq_answer(completion)
    return None


# ---- shaping -------------------------------------------------------------------------------


def format_reward(domain: str, completion: str, answer: str) -> float:
    """1.0 if the completion gives its answer in the form the domain expects: a closed
    `\\boxed{}` (math), one `Answer: X` letter (mcq), a program that parses and defines the
    entry point (code). Says nothing about correctness."""
    if domain == "math":
        return float(last_boxed(completion) is not None)
    if domain == "mcq":
        return float(mcq_answer(completion) is not None)
    if domain == "code":
        entry = parse_code_answer(answer).entry_point
        program = extract_program(completion, entry)
        try:
            ast.parse(program)
        except (SyntaxError, ValueError):
            return 0.0
        return float(entry is None or defines(program, entry))
    return 0.0


def overlong_penalty(lengths: torch.Tensor, max_tokens: int, cache: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al., 2025, eq. 13), per completion:

        0                           if |y| <= L_max - L_cache
        ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
        -1                          if |y| > L_max

    with L_max = `max_tokens` (the generation limit) and L_cache = `cache`.
    """
    if not 0 < cache <= max_tokens:
        raise InputError(f"reward.overlong_cache={cache} must be in 1..max_new_tokens={max_tokens}")
    lengths = lengths.float()
    soft = ((max_tokens - cache) - lengths) / cache
    return torch.where(lengths > max_tokens, torch.full_like(lengths, -1.0), soft.clamp(max=0.0))


def shaped_rewards(
    correct: torch.Tensor,
    fmt: torch.Tensor,
    overlong: torch.Tensor | None,
    weights,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The training reward sum_i w_i r_i and its components (`correct`, `format`, and
    `overlong` when it is weighted), each a (B,) tensor, for logging one by one."""
    components = {"correct": correct, "format": fmt}
    total = weights.correct * correct + weights.format * fmt
    if overlong is not None:
        components["overlong"] = overlong
        total = total + weights.overlong * overlong
    return total, components
