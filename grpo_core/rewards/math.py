"""The math verifier: math-verify as the engine, with a hand-written rule for what counts as
the completion's answer and, where the gold answer is a number, what counts as a number.

What is read (`answer_span`):
- the completion's `\\boxed{}` answer: its last top-level box, provided every top-level box in
  the completion says the same thing (boxes that disagree are a hedge: no answer);
- with no box, the rest of its last explicit final-answer statement ("The answer is X",
  "Final answer: X", "Answer: X"), to the end of that line;
- otherwise nothing: reward 0. Prose with no anchor is not searched for a number, so a
  restated question ("8 + 8 can be solved using basic addition.") has nothing to offer.
  verl's MATH scorer reads the last box only; TRL's `accuracy_reward` reads a box or LaTeX
  after "answer"; lighteval falls back to the rightmost bare number (docs/rewards-and-benchmarks.md
  compares them).

What is credited (`math_reward`): math-verify's `verify(gold, prediction)` on that span, as
math-verify's documentation prescribes (gold parsed first, in that order), except that:
- where the gold answer is a number (an integer, decimal, fraction, percentage or scientific
  notation, with units, `$` or `^\\circ` around it), the answer must be a number too
  (`numeral`): an expression that still holds arithmetic on numbers (`47+38`, `8 \\times 9`,
  `2^{10}`, `84/4`) is not that number, although math-verify, which compares values, would
  equal it to the gold. A fraction counts as a number unless it is an integer in disguise;
- an answer that hedges between values ("84 or 85") is wrong, unless the gold says "or" too.
Where the gold itself is an expression (`2+\\sqrt{3}`, `\\frac{\\pi}{2}`) expressions stay
valid answers: math-verify decides.
"""

from __future__ import annotations

import re
from functools import lru_cache

from math_verify import parse
from math_verify import verify as math_verify

from grpo_core.errors import InputError

_BOXED = re.compile(r"\\(?:boxed|fbox)")


def _box_at(text: str, start: int) -> tuple[str | None, int]:
    """The argument of the box command that ends at `start`, and the index after it."""
    if text.startswith("{", start):
        depth = 0
        for j in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[start + 1 : j].strip(), j + 1
        return None, len(text)
    # `\boxed 5`: the argument runs to the closing `$` or the next whitespace.
    match = re.match(r"\s+([^\s$]+)", text[start:])
    return (match.group(1), start + match.end()) if match else (None, start)


def boxes(text: str) -> list[str | None]:
    """The contents of the top-level `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`) in `text`,
    in order, braces balanced; an unterminated box is None. A box inside another is part of
    the outer one's content."""
    out: list[str | None] = []
    end = 0
    for match in _BOXED.finditer(text):
        if match.start() < end:
            continue
        content, end = _box_at(text, match.end())
        out.append(content)
    return out


def last_boxed(text: str) -> str | None:
    """The content of the last top-level box in `text`; None when there is none or it is
    unterminated."""
    found = boxes(text)
    return found[-1] if found else None


def boxed_answer(text: str) -> str | None:
    """The boxed answer a completion commits to: its last box, if every box in it agrees with
    it (the same text, or the same value: MATH's solutions write `\\boxed{\\frac{66}{6}} =
    \\boxed{11}`); None when there is no box, the last is unterminated or they differ."""
    found = boxes(text)
    if not found or found[-1] is None:
        return None
    last = found[-1]
    others = {b for b in found[:-1] if _squash(b or "") != _squash(last)}
    if others:
        value = parse(_math_source(last))
        for other in others:
            if other is None or not (value and math_verify(value, parse(_math_source(other)))):
                return None
    return last


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


# "The answer is X", "The final answer is: X", "Final answer: X", "**Answer:** X": the rest of
# the line after the last such statement.
_ANCHOR = re.compile(r"(?im)\b(?:final\s+)?answer\b[\s*]*(?:is\b\s*:?|[:：])[\s*]*(.*)$")
_MATH_DELIMS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def stated_answer(text: str) -> str | None:
    """The rest of the completion's last final-answer statement's line, sentence end and math
    delimiters removed; None when it has none."""
    matches = list(_ANCHOR.finditer(text))
    if not matches:
        return None
    span = matches[-1].group(1).strip().rstrip(".!*").strip()
    for left, right in _MATH_DELIMS:
        if span.startswith(left) and span.endswith(right) and len(span) > len(left + right):
            span = span[len(left) : -len(right)].strip()
            break
    return span or None


def answer_span(completion: str) -> str | None:
    """What the completion gives as its final answer (see the module): its agreed box, else
    its last final-answer statement; None when it gives none."""
    if boxes(completion):
        return boxed_answer(completion)
    return stated_answer(completion)


# ---- numbers -------------------------------------------------------------------------------

_INT = r"(?:\d{1,3}(?:(?:,|\{,\})\d{3})+|\d+)"  # 1,000 and 1{,}000 as thousands separators
_DEC = rf"(?:{_INT}(?:\.\d*)?|\.\d+)"
_EXP = r"(?:\{\s*[-+]?\d+\s*\}|[-+]?\d)"
_FRAC = (
    r"\\[dt]?frac\s*(?:\{\s*(?P<p1>-?\d+)\s*\}|(?P<p2>\d))\s*(?:\{\s*(?P<q1>\d+)\s*\}|(?P<q2>\d))"
    r"|(?P<p3>\d+)\s*/\s*(?P<q3>\d+)"
)
_SCI = (
    rf"{_DEC}\s*(?:\\times|\\cdot|\*|×)\s*10\s*\^\s*{_EXP}"  # 4.5\times10^{33}
    rf"|\d+(?:\.\d+)?[eE][-+]?\d+"  # 4.5e33
    rf"|10\s*\^\s*{_EXP}"  # 10^{3}
)
_NUMERAL = re.compile(rf"[-+−]?\s*(?:{_FRAC}|{_SCI}|{_DEC})\s*(?:\\?%)?")
# Formatting that keeps its content, and text commands that hold units (removed) or numbers.
_KEEP = re.compile(r"\\(?:boxed|fbox|textbf|mathbf|displaystyle\s*)\{([^{}]*)\}")
_TEXT = re.compile(r"\\(?:text|textrm|mathrm|mbox|operatorname)\s*\{([^{}]*)\}")
_SPACES = re.compile(r"\\[,!;:> ]|\\quad|\\qquad|~")
_DECOR = re.compile(r"\\\$|\$|\^\s*\{?\\circ\}?|\\circ|°|\\left|\\right|\\displaystyle")
_UNIT_WORDS = re.compile(r"\s+[A-Za-z][A-Za-z\s.]*$")


def numeral(text: str, *, reduced: bool = True) -> str | None:
    """`text` as the number it writes, with its units, `$`, `^\\circ`, thousands separators and
    a leading `x =` set aside; None when it is not a number but an expression (arithmetic
    left to do, a hedge, a list, a word). With `reduced`, a fraction that is an integer in
    disguise (`84/4`) is an expression too."""
    s = text.strip()
    if "=" in s:  # `x = 3`: math-verify compares the right-hand side; so does this
        s = s.rsplit("=", 1)[1]
    for _ in range(4):
        s = _KEEP.sub(r"\1", s)
    s = _TEXT.sub(lambda m: m.group(1) if re.search(r"\d", m.group(1)) else " ", s)
    s = _DECOR.sub("", _SPACES.sub(" ", s)).strip()
    s = _UNIT_WORDS.sub("", s).strip()
    while s.startswith("{") and s.endswith("}") and "{" not in s[1:-1]:
        s = s[1:-1].strip()
    match = _NUMERAL.fullmatch(s)
    if match is None:
        return None
    if reduced:
        p = match.group("p1") or match.group("p2") or match.group("p3")
        q = match.group("q1") or match.group("q2") or match.group("q3")
        if q is not None and (int(q) == 0 or (int(q) != 1 and int(p) % int(q) == 0)):
            return None
    return s


@lru_cache(maxsize=65536)
def gold_is_number(answer: str) -> bool:
    """Whether the gold answer is a number, so that only a number may equal it."""
    return numeral(answer, reduced=False) is not None


# ---- math-verify ---------------------------------------------------------------------------

# 4.5e33 as written in data sets; math-verify would read it as 4.5 * e * 33.
_SCIENTIFIC = re.compile(r"^(-?\d+(?:\.\d+)?)[eE]([+-]?\d+)$")
# Alternatives offered side by side: "84 or 85", "84 \text{ or } 85", "either 84 or 85".
_HEDGE = re.compile(r"\bor\b|\beither\b", re.I)


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
    """1.0 if the completion's final answer (`answer_span`) equals the gold answer, else 0.0;
    a number's gold is equalled by a number only (see the module)."""
    gold = parse_gold(answer)
    span = answer_span(completion)
    if span is None or (_HEDGE.search(span) and not _HEDGE.search(answer)):
        return 0.0
    if gold_is_number(answer) and numeral(span) is None:
        return 0.0
    pred = parse(_math_source(span))
    return 1.0 if pred and math_verify(gold, pred) else 0.0
