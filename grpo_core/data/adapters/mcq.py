"""Multiple-choice benchmarks: GPQA, ARC, MMLU (STEM subjects).

`answer` is the gold letter ("A".."J"); the prompt lists the options as "A) text" lines and
asks for a last line "Answer: X"; `meta["options"]` holds the option texts in that order.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from grpo_core.data import prompts
from grpo_core.data.adapters.base import Row, RowError, as_text, present, required
from grpo_core.data.prompts import OPTION_LETTERS


def _mcq(key: Any, question: str, options: list[str], gold: int, solution: str, meta: dict) -> dict:
    if not options[gold]:
        raise RowError(f"the correct option ({OPTION_LETTERS[gold]}) is empty")
    return {
        "key": key,
        "level": 0,
        "prompt": prompts.mcq_prompt(question, options),
        "answer": OPTION_LETTERS[gold],
        "solution": solution,
        "meta": present({**meta, "options": options}),
    }


def _options(values: Any, what: str) -> list[str]:
    options = [as_text(v) for v in (values or [])]
    if not 2 <= len(options) <= len(OPTION_LETTERS):
        raise RowError(f"{what} must be 2 to {len(OPTION_LETTERS)} options, got {options!r}")
    return options


def shuffled_order(n: int, key: str, seed: int) -> list[int]:
    """A permutation of range(n) fixed by (seed, key): the same on every run and machine."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    order = list(range(n))
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


def gpqa(row: Row, index: int, seed: int) -> dict:
    key = as_text(row.get("Record ID")) or index
    columns = ["Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"]
    choices = _options([row[c] for c in columns], "the four answers")
    order = shuffled_order(len(choices), str(key), seed)
    options = [choices[i] for i in order]
    gold = order.index(0)
    explanation = as_text(row.get("Explanation"))
    solution = f"{explanation}\n\nAnswer: {OPTION_LETTERS[gold]}" if explanation else ""
    meta = {
        "high_level_domain": as_text(row.get("High-level domain")),
        "subdomain": as_text(row.get("Subdomain")),
    }
    question = required(row, ["Question"], "Question")
    return _mcq(key, question, options, gold, solution, meta)


def arc(row: Row, index: int, seed: int) -> dict:
    choices = row["choices"] or {}
    options = _options(choices.get("text"), "choices.text")
    labels = [as_text(label) for label in choices.get("label") or []]
    answer_key = as_text(row["answerKey"])
    # Some ARC questions are labelled 1-4 instead of A-D: the letter is the option's position.
    if len(labels) != len(options) or answer_key not in labels:
        raise RowError(f"answerKey {answer_key!r} is not one of the labels {labels!r}")
    question = required(row, ["question"], "question")
    key = as_text(row.get("id")) or index
    return _mcq(key, question, options, labels.index(answer_key), "", {})


# STEM subjects as grouped by common harnesses (lm-evaluation-harness `mmlu_stem`,
# OpenCompass `mmlu-stem`): the MMLU paper's STEM categories plus anatomy.
MMLU_STEM_SUBJECTS = frozenset(
    {
        "abstract_algebra",
        "anatomy",
        "astronomy",
        "college_biology",
        "college_chemistry",
        "college_computer_science",
        "college_mathematics",
        "college_physics",
        "computer_security",
        "conceptual_physics",
        "electrical_engineering",
        "elementary_mathematics",
        "high_school_biology",
        "high_school_chemistry",
        "high_school_computer_science",
        "high_school_mathematics",
        "high_school_physics",
        "high_school_statistics",
        "machine_learning",
    }
)


def mmlu_stem(row: Row, index: int, seed: int) -> dict | None:
    subject = as_text(row["subject"])
    if subject not in MMLU_STEM_SUBJECTS:
        return None
    options = _options(row["choices"], "choices")
    answer = row["answer"]
    # cais/mmlu stores a ClassLabel index; some copies store the letter.
    gold = answer
    if isinstance(answer, str):
        gold = OPTION_LETTERS.index(answer) if len(answer) == 1 and answer in OPTION_LETTERS else -1
    if not isinstance(gold, int) or not 0 <= gold < len(options):
        raise RowError(f"answer {answer!r} is not one of the {len(options)} options")
    question = required(row, ["question"], "question")
    return _mcq(index, question, options, gold, "", {"subject": subject})
