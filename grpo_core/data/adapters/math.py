"""Math benchmarks: GSM8K, MATH (train split and MATH-500), AIME, AMC, Minerva, OlympiadBench.

`answer` is the bare gold answer as math-verify reads it; a row without one (GSM8K without
"####", a MATH solution without `\\boxed{}`) raises `RowError`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from grpo_core.data import prompts
from grpo_core.data.adapters.base import Row, RowError, RowMapper, as_text, cell, present, required
from grpo_core.rewards.math import last_boxed


def _math(key: Any, problem: str, answer: str, solution: str, level: int, meta: dict) -> dict:
    return {
        "key": key,
        "level": level,
        "prompt": prompts.math_prompt(problem),
        "answer": answer,
        "solution": solution,
        "meta": present(meta),
    }


# ---------------------------------------------------------------------------------------------
# Math


def gsm8k(row: Row, index: int, seed: int) -> dict:
    question = required(row, ["question"], "question")
    rationale, sep, final = as_text(row["answer"]).rpartition("####")
    answer = final.strip().replace(",", "")
    if not sep or not answer:
        raise RowError("the answer has no final '#### <number>' line")
    rationale = re.sub(r"<<[^>]*>>", "", rationale).strip()
    solution = f"{rationale}\nThe final answer is \\boxed{{{answer}}}."
    return _math(index, question, answer, solution, 0, {})


_MATH_LEVEL = re.compile(r"Level\s+(\d+|\?)")


def _math_level(value: Any) -> int:
    if isinstance(value, int):
        return value
    match = _MATH_LEVEL.fullmatch(as_text(value))
    if not match:
        raise RowError(f"level {value!r} is neither 'Level N' nor 'Level ?'")
    return 0 if match.group(1) == "?" else int(match.group(1))


def math_train(row: Row, index: int, seed: int) -> dict:
    solution = required(row, ["solution"], "solution")
    answer = last_boxed(solution)
    if not answer:
        raise RowError("the solution has no \\boxed{} answer")
    meta = {"type": as_text(row["type"])}
    problem = required(row, ["problem"], "problem")
    return _math(index, problem, answer, solution, _math_level(row["level"]), meta)


def math500(row: Row, index: int, seed: int) -> dict:
    meta = {"subject": as_text(row["subject"])}
    return _math(
        as_text(row["unique_id"]),
        required(row, ["problem"], "problem"),
        required(row, ["answer"], "answer"),
        as_text(row.get("solution")),
        _math_level(row["level"]),
        meta,
    )


def competition(problem_cols: Sequence[str], id_cols: Sequence[str]) -> RowMapper:
    """AIME/AMC-style rows: a problem, a short answer, maybe an id, solution, url and year."""

    def to_row(row: Row, index: int, seed: int) -> dict:
        key = as_text(cell(row, *id_cols)) or index
        meta = {"url": as_text(row.get("url")), "year": as_text(row.get("year"))}
        return _math(
            key,
            required(row, problem_cols, "problem"),
            required(row, ["answer", "Answer"], "answer"),
            as_text(cell(row, "solution", "Solution")),
            0,
            meta,
        )

    return to_row


def olympiadbench(row: Row, index: int, seed: int) -> dict:
    finals = row["final_answer"]
    finals = [finals] if isinstance(finals, str) else list(finals or [])
    answers = [as_text(a).strip("$").strip() for a in finals]
    answers = [a for a in answers if a]
    if not answers:
        raise RowError("empty final_answer")
    problem = required(row, ["question"], "question")
    context = as_text(row.get("context"))
    if context:
        problem = f"{context}\n{problem}"
    solutions = row.get("solution")
    solutions = [solutions] if isinstance(solutions, str) else list(solutions or [])
    meta = {
        k: row.get(k)
        for k in ("subfield", "answer_type", "unit", "is_multiple_answer", "error", "language")
    }
    return _math(
        as_text(row.get("id")) or index,
        problem,
        ", ".join(answers),
        "\n\n".join(as_text(s) for s in solutions),
        0,
        meta,
    )
