"""`arith`: L-digit addition with a digit-by-digit reference solution.

Level L adds two L-digit operands. The reference solution works right to left, one line per
digit with its carry, then the answer in `\\boxed{}`:

    Q: 47+38=?
    A: 7+8=15
    4+3+1=8
    \\boxed{85}

The step-by-step target is what makes the ladder learnable by a sub-million-parameter model
(answer-only training fails beyond one digit), and the number of steps grows with the level.
"""

from __future__ import annotations

import json

import numpy as np

from grpo_core.data.tiny.common import split_indices

DOMAIN = "math"
SOURCE = "arith"


def prompt(a: int, b: int) -> str:
    return f"Q: {a}+{b}=?\nA: "


def solution(a: int, b: int) -> str:
    """Right-to-left digit sums with carries, then `\\boxed{a+b}`."""
    da, db = str(a)[::-1], str(b)[::-1]
    lines, carry = [], 0
    for i in range(max(len(da), len(db))):
        x = int(da[i]) if i < len(da) else 0
        y = int(db[i]) if i < len(db) else 0
        s = x + y + carry
        lines.append(f"{x}+{y}" + (f"+{carry}" if carry else "") + f"={s}")
        carry = s // 10
    lines.append(f"\\boxed{{{a + b}}}")
    return "\n".join(lines)


def operand_range(level: int) -> tuple[int, int]:
    """Inclusive range of L-digit operands (level 1 includes 0)."""
    return (0 if level == 1 else 10 ** (level - 1), 10**level - 1)


def space_size(level: int) -> int:
    lo, hi = operand_range(level)
    return (hi - lo + 1) ** 2


def _pair(level: int, index: int) -> tuple[int, int]:
    lo, hi = operand_range(level)
    i, j = divmod(int(index), hi - lo + 1)
    return lo + i, lo + j


def generate_level(level: int, n_train: int, n_eval: int, seed: int) -> dict[str, list[dict]]:
    """Train and eval rows for one level, deterministic in (level, seed).

    The splits are disjoint when the level's problem space is at least twice the eval size
    (eval drawn without replacement, train from the rest). Level 1 has only 100 distinct
    problems, so there both splits draw from the whole space and overlap by construction.
    """
    rng = np.random.default_rng([seed, level])
    train_idx, eval_idx = split_indices(rng, space_size(level), n_train, n_eval)

    def rows(split: str, indices: list[int]) -> list[dict]:
        out = []
        for k, index in enumerate(indices):
            a, b = _pair(level, index)
            out.append(
                {
                    "id": f"{SOURCE}-{split}-L{level}-{k:05d}",
                    "domain": DOMAIN,
                    "source": SOURCE,
                    "level": level,
                    "prompt": prompt(a, b),
                    "answer": str(a + b),
                    "solution": solution(a, b),
                    "meta": json.dumps({"a": a, "b": b}),
                }
            )
        return out

    return {"train": rows("train", train_idx), "eval": rows("eval", eval_idx)}
