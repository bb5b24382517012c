"""The math verifier: math-verify, with the completion's last `\\boxed{}` as its answer.

The gold answer is parsed first and `verify(gold, prediction)` is called in that order, as
math-verify's documentation prescribes; the completion's last `\\boxed{}` is its answer
(math-verify alone would take the first).
"""

from __future__ import annotations

import re
from functools import lru_cache

from math_verify import parse
from math_verify import verify as math_verify

from grpo_core.errors import InputError

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
