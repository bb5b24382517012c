"""The multiple-choice verifier: the letter of the last `Answer: X` line (options A-J),
`\\boxed{X}` as a fallback, the convention of common eval harnesses (simple-evals,
lm-evaluation-harness). A reply that names two letters ("Answer: A or B"), lists them
("Answer: A B C D", "Answer: A) 5 B) 6 C) 7") or boxes several is wrong: listing every option
must never be credited more often than a single guess.
"""

from __future__ import annotations

import re

from grpo_core.errors import InputError
from grpo_core.rewards.math import last_boxed

LETTERS = "ABCDEFGHIJ"
# "Answer: X" anywhere on a line (simple-evals' `Answer\s*:`); the rest of the line is read.
_ANSWER_LINE = re.compile(r"(?im)\banswer\s*[:：](.*)$")
# The letter may sit in markdown emphasis, `$`, brackets, `\text{}` or `\boxed{}`.
_WRAPPER = r"(?:[\s*_$`(\[{]|\\(?:text|textbf|mathrm|boxed)\{)*"
_LEADING_LETTER = re.compile(rf"^{_WRAPPER}([{LETTERS}])(?![A-Za-z0-9])")
# A second option named as an alternative: "A or B", "A, C", "A/B", "A and D".
_BOXED_LETTER = re.compile(rf"{_WRAPPER}([{LETTERS}])[\s)\]}}*_$`.]*")
_SECOND_LETTER = re.compile(rf"^[\s)\]}}*_$`.]*(?:,|/|&|\bor\b|\band\b)\s*{_WRAPPER}[{LETTERS}]\b")
# The rest of the line is only more letters ("A B C D", "A. B. C."), or names another option
# by its marker ("A) 5 B) 6"): the reply lists options instead of choosing one.
_SEP = r"[\s.,;:/&|*_$`()\[\]{}-]"
_ONLY_LETTERS = re.compile(
    rf"^(?:{_SEP}+(?:(?:or|and)\b{_SEP}*)?[{LETTERS}](?![A-Za-z0-9]))+{_SEP}*$"
)
_MARKER = re.compile(rf"(?<![A-Za-z0-9])\(?[{LETTERS}]\)")


def _letter(text: str) -> str | None:
    m = _LEADING_LETTER.match(text)
    rest = text[m.end() :] if m else ""
    if m is None or _SECOND_LETTER.match(rest) or _ONLY_LETTERS.match(rest) or _MARKER.search(rest):
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
