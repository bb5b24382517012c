"""The multiple-choice verifier: the option letter (A-J) a reply commits to.

What is read (`mcq_answer`), after full-width characters are read as ASCII:
- the last line holding a final-answer statement, from its first statement on: "Answer: X"
  (simple-evals' and lm-evaluation-harness's convention), "The answer is X", "The correct
  answer is X.", "Final Answer: The final answer is $\\boxed{X}$" (a repeated statement is
  read through); with no such line, the last `\\boxed{X}`;
- the letter may sit in markdown emphasis, `$`, brackets, `\\text{}` or `\\boxed{}`, after
  "Option" or "Choice" (`Answer: Option C`), and be followed by its option's text
  (`The correct answer is D) 95 g`, SmolLM2's habit: a commitment to D). A lower-case letter
  counts only on its own (`Answer: c`, `Answer: (c).`, `c) text`): "the answer is a prime"
  is prose, not option A.

What is refused (None, reward 0), so that naming more than one option is never credited more
often than a single guess, and a letter the reply argues against is not a commitment:
- two letters named as alternatives ("A or B", "A, C", "A/B", "A and D", "A, B, C or D"),
  a list of letters ("A B C D", "A. B. C."), another option's marker after the first ("A) 5
  B) 6"), or several letters boxed;
- a negated or judged letter: a statement that starts with a negation ("The answer is not
  A") or whose clause after the letter negates it or names another option letter ("Answer:
  A is wrong, so B", "A, not B", "A because B is too small"): neither letter is credited. The
  clause runs to the first `)`, `:` or sentence end; the text after an option marker is the
  option's own text and is not judged, unless it begins with a verb ("A) is wrong").
  Refused with it, on purpose: a clause that names an option letter as a word ("Answer: C,
  as I showed"), which cannot be told from a second option.

`option_letters` reads the letters a prompt offers, for the format term (grpo_core.rewards.
shaping): `Answer: J` on a four-option question is no answer in the expected form.
"""

from __future__ import annotations

import re

from grpo_core.errors import InputError
from grpo_core.rewards.math import halfwidth, last_boxed, statements

LETTERS = "ABCDEFGHIJ"
# The letter may sit in markdown emphasis, `$`, brackets, `\text{}` or `\boxed{}`, after
# "Option" / "Choice".
_WRAPPER = r"(?:[\s*_$`(\[{]|\\(?:text|textbf|mathrm|boxed)\{|(?i:option|choice)\b)*"
_LEADING_LETTER = re.compile(rf"^{_WRAPPER}([{LETTERS}]|[{LETTERS.lower()}])(?![A-Za-z0-9])")
_BOXED_LETTER = re.compile(rf"{_WRAPPER}([{LETTERS}])[\s)\]}}*_$`.]*")
_CLOSERS = r"[\s)\]}*_$`.]*"
# A second option named as an alternative: "A or B", "A, C", "A/B", "A and D".
_SECOND_LETTER = re.compile(rf"^{_CLOSERS}(?:,|/|&|\bor\b|\band\b)\s*{_WRAPPER}[{LETTERS}]\b")
# The rest of the line is only more letters ("A B C D", "a, b, c"), or names another option by
# its marker ("A) 5 B) 6"): the reply lists options instead of choosing one.
_SEP = r"[\s.,;:/&|*_$`()\[\]{}-]"
_ONLY_LETTERS = re.compile(
    rf"(?i:^(?:{_SEP}+(?:(?:or|and)\b{_SEP}*)?[{LETTERS}](?![A-Za-z0-9]))+{_SEP}*$)"
)
_MARKER = re.compile(rf"(?<![A-Za-z0-9])\(?[{LETTERS}]\)")
# A lower-case letter on its own: nothing after it but closers, or its option's text.
_ALONE = re.compile(rf"^(?:{_CLOSERS}$|\s*\))")
# The clause after the letter: up to `)` or `:` (its option's text follows) or a sentence end.
_CLAUSE_END = re.compile(r"[):]|[.!?;](?=\s|$)")
_VERB = re.compile(r"^\s*(?:is|are|was|were|seems|would|isn't|can't|cannot)\b", re.I)
_NEGATION = re.compile(
    r"\b(?:not|never|neither|nor|wrong|incorrect|false|except|cannot|eliminat\w*|rul\w*"
    r"\s+out)\b|n't\b",
    re.I,
)
_OTHER_LETTER = re.compile(rf"(?<![A-Za-z0-9'\\]){_WRAPPER}[{LETTERS}](?![A-Za-z0-9'])")
# The options a prompt lists: "A) text" lines, or "A) 65 B) 75" on one line (the tiny world).
_OPTION = re.compile(rf"(?:^|\s)([{LETTERS}])\)(?=\s|$)")


def _judged(rest: str) -> bool:
    """Whether the clause after the letter negates it or names another option letter."""
    end = _CLAUSE_END.search(rest)
    clause = rest
    if end is not None:
        clause = rest[: end.start()]
        if end.group() in "):" and _VERB.match(rest[end.end() :]):
            sentence = _CLAUSE_END.search(rest, end.end())
            clause = rest[: sentence.start()] if sentence else rest
    return bool(_NEGATION.search(clause) or _OTHER_LETTER.search(clause))


def _letter(text: str) -> str | None:
    """The letter a statement's rest of line commits to (see the module), or None."""
    m = _LEADING_LETTER.match(text)
    if m is None:
        return None
    letter, rest = m.group(1), text[m.end() :]
    if _SECOND_LETTER.match(rest) or _ONLY_LETTERS.match(rest) or _MARKER.search(rest):
        return None
    if letter.islower() and not _ALONE.match(rest):
        return None
    return None if _judged(rest) else letter.upper()


def mcq_answer(completion: str) -> str | None:
    """The option letter the completion commits to, or None if it names none or several."""
    lines = statements(completion)
    if lines:
        return _letter(lines[-1])
    boxed = last_boxed(halfwidth(completion))
    if boxed is not None:
        m = _BOXED_LETTER.fullmatch(boxed)
        return m.group(1) if m else None
    return None


def option_letters(prompt: str) -> str:
    """The letters of the options `prompt` lists ("A) text" lines, or "A) 65 B) 75 C) 85" on
    one line), consecutive from A; "" when it lists fewer than two."""
    found = {m.group(1) for m in _OPTION.finditer(prompt)}
    n = 0
    while n < len(LETTERS) and LETTERS[n] in found:
        n += 1
    return LETTERS[:n] if n >= 2 else ""


def gold_letter(answer: str) -> str:
    if len(answer) != 1 or answer not in LETTERS:
        raise InputError(f"gold answer {answer!r} is not an option letter A-J")
    return answer


def mcq_reward(completion: str, answer: str) -> float:
    return 1.0 if mcq_answer(completion) == gold_letter(answer) else 0.0
