"""The verifiers by domain: how correct a completion is (1.0 = solved), how a gold answer is
read, and the answer a completion commits to (for maj@k).

- `math`: math-verify (`grpo_core.rewards.math`);
- `mcq`: the answer letter (`grpo_core.rewards.mcq`);
- `code`: the share of the problem's tests the completion's program passes in the sandbox
  beyond the best trivial program's (`grpo_core.rewards.code`); checked in parallel.

A new domain registers its verifier in `VERIFIERS` (or `BATCH_VERIFIERS`) and its gold
parser in `GOLD_PARSERS` (docs/architecture.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from grpo_core.config.user_reward import RewardFunction, call_reward_function
from grpo_core.errors import InputError
from grpo_core.rewards.code import (
    CodeRewardConfig,
    code_config,
    code_rewards,
    parse_code_answer,
)
from grpo_core.rewards.math import (
    answer_span,
    boxes,
    halfwidth,
    math_reward,
    parse_gold,
    stated_answer,
    statements,
)
from grpo_core.rewards.mcq import gold_letter, mcq_answer, mcq_reward

# Per-completion verifiers: (completion, gold answer) -> reward in [0, 1].
VERIFIERS: dict[str, Callable[[str, str], float]] = {"math": math_reward, "mcq": mcq_reward}
# Domains whose verifier runs a whole batch at once (programs checked in parallel).
BATCH_VERIFIERS = {"code": code_rewards}


def verify_batch(
    domains: list[str],
    completions: list[str],
    answers: list[str],
    code: CodeRewardConfig | None = None,
    function: RewardFunction | None = None,
) -> list[float]:
    """The verifier's reward of every completion (1.0 = solved), code checked in parallel; with
    `function` (`reward.function`, a user's own), that function's instead, for every domain:
    where it calls the verifiers without a config, `code` (`reward.code`) still applies."""
    if function is not None:
        with code_config(code):
            return call_reward_function(function, domains, completions, answers)
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
    """The answer a completion commits to, as a vote for maj@k: the math answer as the
    verifier reads it (its box or final-answer statement, whitespace removed), the option
    letter, or None (no answer; code has no vote)."""
    if domain == "math":
        ans = answer_span(completion)
        return None if ans is None else re.sub(r"\s+", "", ans)
    if domain == "mcq":
        return mcq_answer(completion)
    return None


# The forms `answer_form` names, in the order a report lists them.
ANSWER_FORMS = ("boxed", "stated", "program", "other")


def answer_form(domain: str, completion: str) -> str:
    """The form of the answer the verifier reads, for an auditor's tally of what was rewarded:
    `boxed` (math: the completion has a `\\boxed{}`, which the verifier reads before any
    statement; mcq: a box and no final-answer statement), `stated` (a final-answer statement,
    "The answer is 85", "Answer: B", read where nothing is boxed for math, first for mcq),
    `program` (code: a fenced or bare program, the verifier runs whatever it extracts) or
    `other` (nothing of the domain's forms: the verifier reads no answer, so such a
    completion earns 0 from the tiny world's verifiers, and a user's reward that pays one
    shows here)."""
    text = halfwidth(completion)
    if domain == "math":
        if boxes(text):
            return "boxed"
        return "stated" if stated_answer(text) is not None else "other"
    if domain == "mcq":
        if statements(text):
            return "stated"
        return "boxed" if boxes(text) else "other"
    if domain == "code":
        return "program" if text.strip() else "other"
    return "other"
