"""The math verifier: math-verify as the engine, with a hand-written rule for what counts as
the completion's answer and, where the gold answer is a number, what counts as a number.

What is read (`answer_span`), after full-width characters (`８５`, U+FF01-FF5E) are read as
their ASCII forms:
- the completion's `\\boxed{}` answer: its last top-level box, provided every top-level box in
  the completion says the same thing (boxes that disagree are a hedge: no answer). A box
  inside a box reads as written, in place: `\\boxed{\\boxed{7}}` is 7, `\\boxed{84\\boxed{85}}`
  is 8485, never the inner 85;
- with no box, its final-answer statements ("The answer is X", "Final answer: X", "Answer: X";
  a statement repeated on its line, "Final Answer: The final answer is X", is read through):
  each gives the answer it states first, and they must all agree, as boxes must (two
  final-answer lines that disagree are a hedge: no answer). A statement's answer is its first
  math segment (`$...$`, `\\(...\\)`) or, in plain text, what comes before the first word of
  prose: "The answer is 85 dollars.", "... 85, which is the sum.", "... 85 (eighty-five)." and
  "... 84 because 47+38=85." state 85, 85, 85 and 84 (the stated answer, never the right-hand
  side of a later equation). A line that offers alternatives anywhere ("84 or 85") is kept
  whole, so that the hedge rule below sees it. A statement with no answer before its prose
  ("The answer is in the solution above.") states nothing and is not counted;
- otherwise nothing: reward 0. Prose with no anchor is not searched for a number, so a
  restated question ("8 + 8 can be solved using basic addition.") has nothing to offer.
  verl's MATH scorer reads the last box only; TRL's `accuracy_reward` reads a box or LaTeX
  after "answer"; lighteval falls back to the rightmost bare number (docs/rewards-and-benchmarks.md
  compares them).

What is credited (`math_reward`): math-verify's `verify(gold, prediction)` on that span, as
math-verify's documentation prescribes (gold parsed first, in that order), except that:
- where the gold answer is a number (an integer, decimal, fraction, mixed number, percentage
  or scientific notation, with units, `$`, `^\\circ` or a parenthesised word around it), the
  answer must be a number too (`numeral`), and math-verify is given that number alone (its
  units, words and thousands separators set aside): an expression that still holds
  arithmetic on numbers (`47+38`, `8 \\times 9`, `2^{10}`, `84/4`) is not that number,
  although math-verify, which compares values, would equal it to the gold. A fraction counts
  as a number unless it is an integer in disguise; a mixed number (`2\\frac{1}{4}`) only with a
  proper fraction. Scientific notation (`10^3`, `2\\times10^{3}`, `2e3`) is a number only where
  the gold is written in it (`4.5e33`): against a plain gold such as 1000 it is a power and a
  product left to evaluate, refused like `2^{10}`. An equation is a number only as `name =
  number` (`x = 3`, `AB = 5`): one with a number on its left (`85 = 47+38`, `x = 47+38 = 85`)
  is working, not an answer;
- an answer that hedges between values ("84 or 85") is wrong, unless the gold says "or" too.
Where the gold itself is an expression (`2+\\sqrt{3}`, `\\frac{\\pi}{2}`) expressions stay
valid answers: math-verify decides.

Refused on purpose (tests/test_false_negatives.py): a number written in words ("eighty-five"),
a plain space as thousands separator (`1 000`, which reads as two numbers), and scientific
notation against a plain gold, as above.
"""

from __future__ import annotations

import re
from functools import lru_cache

from math_verify import parse
from math_verify import verify as math_verify

from grpo_core.errors import InputError

_BOXED = re.compile(r"\\(?:boxed|fbox)")
# Full-width forms (U+FF01-FF5E: `８５`, `Ｃ`, `：`) and the ideographic space, as ASCII.
_FULLWIDTH = {cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


def halfwidth(text: str) -> str:
    """`text` with full-width digits, letters and punctuation read as their ASCII forms."""
    return text.translate(_FULLWIDTH)


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


def unboxed(text: str) -> str:
    """`text` with every box replaced by its content, in place (`84\\boxed{85}` -> `8485`)."""
    out, end = [], 0
    for match in _BOXED.finditer(text):
        if match.start() < end:
            continue
        content, after = _box_at(text, match.end())
        if content is None:
            break
        out += [text[end : match.start()], unboxed(content)]
        end = after
    return "".join(out) + text[end:]


def last_boxed(text: str) -> str | None:
    """The content of the last top-level box in `text`; None when there is none or it is
    unterminated."""
    found = boxes(text)
    return found[-1] if found else None


def _agreed(found: list[str | None]) -> str | None:
    """The last of `found` if every other says the same (the same text, or the same value:
    MATH's solutions write `\\boxed{\\frac{66}{6}} = \\boxed{11}`); None when any is None or
    two differ (a hedge)."""
    if not found or found[-1] is None:
        return None
    last = found[-1]
    others = {b for b in found[:-1] if b is None or _squash(b) != _squash(last)}
    if others:
        value = parse(_math_source(last))
        for other in others:
            if other is None or not (value and math_verify(value, parse(_math_source(other)))):
                return None
    return last


def boxed_answer(text: str) -> str | None:
    """The boxed answer a completion commits to: its last box, if every box in it agrees with
    it (`_agreed`); None when there is no box, the last is unterminated or they differ."""
    return _agreed(boxes(text))


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


# "The answer is X", "The final answer is: X", "Final answer: X", "**Answer:** X": the rest of
# the line after the first such statement on it, read through a repeated one.
_ANCHOR = re.compile(r"(?i)\b(?:final\s+)?answer\b[\s*]*(?:is\b\s*:?|[:：])[\s*]*")
_REPEATED = re.compile(r"(?i)(?:(?:the|my)\s+)?(?:[a-z]+\s+)?answer\b[\s*]*(?:is\b\s*:?|:)[\s*]*")
_MATH_DELIMS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
# A word of prose: two letters or more, not a LaTeX command's name.
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
# Alternatives offered side by side: "84 or 85", "84 \text{ or } 85", "either 84 or 85".
_HEDGE = re.compile(r"\bor\b|\beither\b", re.I)


def statements(text: str) -> list[str]:
    """The rest of the line after each line's first final-answer statement ("Final Answer:
    The final answer is X" gives "X"), in order."""
    out = []
    for line in halfwidth(text).splitlines():
        match = _ANCHOR.search(line)
        if match is None:
            continue
        rest = line[match.end() :]
        while again := _REPEATED.match(rest):
            rest = rest[again.end() :]
        out.append(rest.strip())
    return out


def _prose_start(text: str) -> int:
    """Where the first word of prose outside braces begins (`len(text)`: none); the hedge
    words "or" and "either" are not prose here."""
    for match in _WORD.finditer(text):
        depth = text.count("{", 0, match.start()) - text.count("}", 0, match.start())
        if depth <= 0 and match.group().lower() not in ("or", "either"):
            return match.start()
    return len(text)


def statement_value(rest: str) -> str | None:
    """The answer a final-answer statement gives, from the rest of its line: its first math
    segment, or the plain text before its first word of prose, sentence ends removed; the
    whole line where it offers alternatives; None when it states nothing (see the module)."""
    rest = rest.strip().lstrip("*").strip()  # markdown emphasis: **85**
    value = after = None
    for left, right in _MATH_DELIMS:
        if rest.startswith(left):
            end = rest.find(right, len(left))
            if end > len(left):
                value, after = rest[len(left) : end], rest[end + len(right) :]
            break
    if value is None:
        cut = _prose_start(rest)
        value, after = rest[:cut], rest[cut:]
    if _HEDGE.search(after):
        value = rest
    return value.strip().rstrip(".,;:!*([-– ").strip() or None


def stated_answer(text: str) -> str | None:
    """The answer the completion's final-answer statements give, if they agree (`_agreed`);
    None when it has none or they differ."""
    found = [v for v in map(statement_value, statements(text)) if v is not None]
    return _agreed(found) if found else None


def answer_span(completion: str) -> str | None:
    """What the completion gives as its final answer (see the module): its agreed box, else
    its agreed final-answer statements; None when it gives none."""
    completion = halfwidth(completion)
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
# 2\frac{1}{4}: a whole number and a proper fraction (math-verify reads it as 9/4).
_MIXED = (
    r"\d+\s*\\[dt]?frac\s*"
    r"(?:\{\s*(?P<m1>\d+)\s*\}|(?P<m2>\d))\s*(?:\{\s*(?P<n1>\d+)\s*\}|(?P<n2>\d))"
)
_SCI = (
    rf"{_DEC}\s*(?:\\times|\\cdot|\*|×)\s*10\s*\^\s*{_EXP}"  # 4.5\times10^{33}
    rf"|\d+(?:\.\d+)?[eE][-+]?\d+"  # 4.5e33
    rf"|10\s*\^\s*{_EXP}"  # 10^{3}
)
_NUMERAL = re.compile(rf"[-+−]?\s*(?:{_MIXED}|{_FRAC}|{_SCI}|{_DEC})\s*(?:\\?%)?")
_PLAIN_NUMERAL = re.compile(rf"[-+−]?\s*(?:{_MIXED}|{_FRAC}|{_DEC})\s*(?:\\?%)?")
# 1\,000 (a thin space between digit groups) as 1,000.
_THIN_SEPARATOR = re.compile(r"(?<=\d)(?:\\,|\\ |~|[\u2009\u202f])(?=\d{3}(?!\d))")
# Formatting that keeps its content, and text commands that hold units (removed, with an
# exponent: `\text{ cm}^{2}`) or numbers.
_KEEP = re.compile(r"\\(?:boxed|fbox|textbf|mathbf|displaystyle\s*)\{([^{}]*)\}")
_TEXT = re.compile(
    r"\\(?:text|textrm|mathrm|mbox|operatorname)\s*\{([^{}]*)\}(\s*\^\s*(?:\{\s*\d\s*\}|\d))?"
)
_SPACES = re.compile(r"\\[,!;:> ]|\\quad|\\qquad|~")
_DECOR = re.compile(r"\\\$|\$|\^\s*\{?\\circ\}?|\\circ|°|\\left|\\right|\\displaystyle")
# Trailing unit words (`85 apples`, `85 cm^2`) and a parenthesised word (`85 (eighty-five)`).
_UNIT_WORDS = re.compile(
    r"(?:\s+[A-Za-z][A-Za-z\s.]*(?:\^\s*\{?\s*\d\s*\}?)?|\s*\([A-Za-z][A-Za-z\s.,'-]*\))+$"
)
_SUBSCRIPT = re.compile(r"_\{[^{}]*\}|_\w")


def numeral(text: str, *, reduced: bool = True, scientific: bool = True) -> str | None:
    """`text` as the number it writes, with its units, `$`, `^\\circ`, thousands separators, a
    parenthesised word and a leading `name =` set aside; None when it is not a number but an
    expression (arithmetic left to do, an equation with a number on its left, a hedge, a
    list, a word). With `reduced`, a fraction that is an integer in disguise (`84/4`) or a
    mixed number whose fraction is not proper is an expression too; without `scientific`,
    so is scientific notation (`10^3`, `2\\times10^{3}`, `2e3`)."""
    s = _THIN_SEPARATOR.sub(",", text.strip())
    for _ in range(4):
        s = _KEEP.sub(r"\1", s)
    s = _TEXT.sub(
        lambda m: m.group(1) + (m.group(2) or "") if re.search(r"\d", m.group(1)) else " ", s
    )
    s = _DECOR.sub("", _SPACES.sub(" ", s)).strip()
    s = _UNIT_WORDS.sub("", s).strip()
    if "=" in s:  # `x = 3`: math-verify compares the right-hand side; so does this
        lhs, s = s.rsplit("=", 1)
        if re.search(r"\d", _SUBSCRIPT.sub("", lhs)):
            return None
        s = s.strip()
    while s.startswith("{") and s.endswith("}") and "{" not in s[1:-1]:
        s = s[1:-1].strip()
    match = (_NUMERAL if scientific else _PLAIN_NUMERAL).fullmatch(s)
    if match is None:
        return None
    if reduced:
        p = match.group("p1") or match.group("p2") or match.group("p3")
        q = match.group("q1") or match.group("q2") or match.group("q3")
        if q is not None and (int(q) == 0 or (int(q) != 1 and int(p) % int(q) == 0)):
            return None
        p, q = match.group("m1") or match.group("m2"), match.group("n1") or match.group("n2")
        if q is not None and not 0 < int(p) < int(q):
            return None
    return s


@lru_cache(maxsize=65536)
def gold_is_number(answer: str) -> bool:
    """Whether the gold answer is a number, so that only a number may equal it."""
    return numeral(answer, reduced=False) is not None


@lru_cache(maxsize=65536)
def gold_is_scientific(answer: str) -> bool:
    """Whether the gold answer is a number written in scientific notation (`4.5e33`), so that
    an answer may be written in it too."""
    return gold_is_number(answer) and numeral(answer, reduced=False, scientific=False) is None


def _plain_number(number: str) -> str:
    """A `numeral` as math-verify is given it: no thousands separators, `−` as `-`, no
    trailing decimal point (`85.`, which math-verify cannot parse)."""
    s = re.sub(r"(?<=\d)(?:,|\{,\})(?=\d{3})", "", number.replace("−", "-"))
    return re.sub(r"(?<=\d)\.(?!\d)", "", s)


# ---- math-verify ---------------------------------------------------------------------------

# 4.5e33 as written in data sets; math-verify would read it as 4.5 * e * 33.
_SCIENTIFIC = re.compile(r"^(-?\d+(?:\.\d+)?)[eE]([+-]?\d+)$")


def _math_source(answer: str) -> str:
    """What math-verify is given for a bare answer. A box inside it is read in place
    (`unboxed`: math-verify itself would read the inner box alone). A trailing percent sign
    goes outside the math (`$50$%`): math-verify reads `X%` as X/100 (and 9% as equal to 9)
    but cannot parse `\\boxed{50\\%}`."""
    body = _SCIENTIFIC.sub(r"\1\\times 10^{\2}", unboxed(answer.strip()))
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
    a number's gold is equalled by a number only, given to math-verify without its units
    (see the module)."""
    gold = parse_gold(answer)
    span = answer_span(completion)
    if span is None or (_HEDGE.search(span) and not _HEDGE.search(answer)):
        return 0.0
    if gold_is_number(answer):
        number = numeral(span, scientific=gold_is_scientific(answer))
        if number is None:
            return 0.0
        span = _plain_number(number)
    pred = parse(_math_source(span))
    return 1.0 if pred and math_verify(gold, pred) else 0.0
