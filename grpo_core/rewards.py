"""Verifiable rewards. Math answers go through math-verify (gold parsed first, then
`verify(gold, prediction)` in that order, as its documentation prescribes)."""

from __future__ import annotations

from functools import lru_cache

from math_verify import parse, verify

from grpo_core.errors import InputError


@lru_cache(maxsize=65536)
def _parse_gold(answer: str) -> list:
    # Gold answers are stored bare ("85"); wrap them so the boxed extractor reads them whole.
    gold = parse(f"\\boxed{{{answer}}}")
    if not gold:
        raise InputError(f"gold answer {answer!r} cannot be parsed by math-verify")
    return gold


def last_boxed(text: str) -> str | None:
    """The last `\\boxed{...}` of `text` with balanced braces, or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    for i in range(start + len("\\boxed"), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start : i + 1]
    return None


def math_reward(completion: str, answer: str) -> float:
    """1.0 if the completion's final answer equals the gold answer.

    The last `\\boxed{}` is the answer when there is one (math-verify alone prefers the first);
    otherwise math-verify's own extraction reads the completion.
    """
    gold = _parse_gold(answer)
    pred = parse(last_boxed(completion) or completion)
    return 1.0 if pred and verify(gold, pred) else 0.0


REWARDS = {"math": math_reward}


def score(domain: str, completion: str, answer: str) -> float:
    try:
        fn = REWARDS[domain]
    except KeyError:
        raise InputError(f"no reward for domain {domain!r}; known: {sorted(REWARDS)}") from None
    return fn(completion, answer)
