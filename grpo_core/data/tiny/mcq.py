"""`mcq`: science-style multiple choice on L-digit quantities, four options, gold = the letter.

Level L adds two L-digit quantities with a unit. The options are sorted and evenly spaced by
one unit of the operands' top place (10^(L-1)), as in many exam items, so the distractors are
the sum with one to three carries into the top place lost or invented; the correct letter is
uniform over A-D. The reference solution is arith's digit-by-digit work, whose last line gives
the sum's top part (`4+3+1=8`: 8 tens), then how many steps that lies above option A, then
the letter as the final line:

    A) 65 B) 75 C) 85 D) 95
    Q: mass in g: 47+38=?
    A: 7+8=15
    4+3+1=8
    8-6=2
    Answer: C

Why not the textbook "write the sum, find it among the options": finding a multi-digit number
among four near-miss numbers is a content lookup, and the 0.8M-parameter model did not learn
it (level 1: the sum right 90%, the letter 42% after 900 SFT steps of 32 on levels 1-2 alone).
Copying option A's top part, a one-digit subtraction and a fixed 0-3 -> A-D table are the
positional, arith-like steps it does learn. The lower digits of the sum never decide the
letter (all options share them), so the difficulty is the carry chain into the top place.
"""

from __future__ import annotations

import numpy as np

from grpo_core.data.tiny import arith
from grpo_core.data.tiny.common import generate_rows

DOMAIN = "mcq"
SOURCE = "mcq"
LETTERS = "ABCD"
# Salt for the rngs, so mcq does not draw the very operand pairs arith draws at the same seed.
_SALT = 0x6D6371

# The options come first and the question ends exactly as arith's prompt does (`47+38=?`),
# so the operand digits sit at the same offsets from the completion as in arith: copying them
# is what the digit-by-digit working needs, and arith's training then carries over. The
# quantity and unit are decoration.
UNITS = (
    ("mass", "g"),
    ("mass", "kg"),
    ("length", "cm"),
    ("length", "m"),
    ("volume", "mL"),
    ("time", "s"),
)


def step(level: int) -> int:
    """Spacing of the options: one unit of the operands' top place."""
    return 10 ** (level - 1)


def options(total: int, level: int, position: int) -> list[int]:
    """Four sorted options spaced by `step(level)`, `total` at index `position`."""
    return [total + (i - position) * step(level) for i in range(len(LETTERS))]


def prompt(a: int, b: int, unit: tuple[str, str], opts: list[int]) -> str:
    listed = " ".join(f"{letter}) {v}" for letter, v in zip(LETTERS, opts, strict=True))
    return f"{listed}\nQ: {unit[0]} in {unit[1]}: {a}+{b}=?\nA: "


def solution(a: int, b: int, level: int, opts: list[int]) -> str:
    """arith's digit lines (without `\\boxed{}`), `top(sum)-top(A)=i`, `Answer: <letter i>`."""
    steps = arith.solution(a, b).rsplit("\n", 1)[0]
    # The last digit line's result is exactly (a+b) // step: the top place with its carry.
    top, top_a = (a + b) // step(level), opts[0] // step(level)
    return f"{steps}\n{top}-{top_a}={top - top_a}\nAnswer: {LETTERS[top - top_a]}"


def _problem(level: int, index: int, rng: np.random.Generator) -> dict:
    a, b = arith._pair(level, index)
    unit = UNITS[int(rng.integers(len(UNITS)))]
    # Uniform over the positions that keep every option >= 0: all four from level 2 up
    # unless the top part of the sum is 2 (10+10), at level 1 unless the sum is below 3.
    position = int(rng.integers(min(len(LETTERS), (a + b) // step(level) + 1)))
    opts = options(a + b, level, position)
    return {
        "prompt": prompt(a, b, unit, opts),
        "answer": LETTERS[position],
        "solution": solution(a, b, level, opts),
        "meta": {"a": a, "b": b, "unit": unit[1], "options": opts, "sum": a + b},
    }


def generate_level(level: int, n_train: int, n_eval: int, seed: int) -> dict[str, list[dict]]:
    """Train and eval rows for one level, deterministic in (level, seed).

    The problem space is arith's operand pairs (the unit and the letter are
    decoration), split as in `common.split_indices`: disjoint from level 2 up at the default
    sizes; level 1 has 100 pairs, so its splits overlap by construction.
    """
    return generate_rows(
        domain=DOMAIN,
        source=SOURCE,
        salt=_SALT,
        space=arith.space_size(level),
        make_problem=lambda index, rng: _problem(level, index, rng),
        level=level,
        n_train=n_train,
        n_eval=n_eval,
        seed=seed,
    )
