"""What every benchmark adapter is made of: the `Adapter` record (hub id, config, split,
domain, needed columns, row mapper), `RowError`, and the helpers row mappers read cells with.

Conventions of the rows `load_benchmark` (`grpo_core.data.adapters.registry`) returns:

- `source` is the adapter name (the key in metrics/eval.json); `id` is
  `f"{source}-{original id}"`, or `f"{source}-{row index}"` when the dataset has no id (the
  index in the file, before any filtering); ids are unique.
- `level` is the dataset's difficulty level when it has one (MATH: 1..5, "Level ?" -> 0), else 0
  ("no level").
- `meta` is a JSON object with source-specific fields (subject, type, url, year, ...).
- math: `answer` is the bare gold answer as math-verify reads it ("85", "\\frac{1}{2}"); numbers
  stored as floats are written without a trailing ".0"; OlympiadBench's `final_answer` list is
  stripped of surrounding `$` and joined with ", ". `solution` is the reference solution, or ""
  when the dataset has none. GSM8K's solution ends with "The final answer is \\boxed{N}." in
  place of its "#### N" line, and its calculator annotations `<<...>>` are removed, so that it is
  a completion the math prompt asks for (an SFT target and a guidance prefix).
- mcq: `answer` is the gold letter ("A".."J"); the prompt lists the options as "A) text" lines
  and asks for a last line "Answer: X"; `meta["options"]` holds the option texts in that order.
  GPQA ships the correct answer first, so its options are shuffled deterministically from
  (seed, Record ID); its solution is the explanation followed by "Answer: X".
- code: `answer` is a JSON string `{"entry_point", "tests", "setup", "prefix"}`: the function
  the program must define, one Python statement per test, code to run before the tests, and
  code to prepend when the completion does not define `entry_point` (HumanEval's prompt).
  `solution` is the canonical solution (for HumanEval, the body that continues `prefix`).

A row whose gold answer is empty or has no recognisable form (GSM8K without "####", a MATH
solution without `\\boxed{}`, an MCQ key that is not one of the options, a code task without
tests) raises InputError naming the file and the row index: rows are never dropped silently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_core.data.adapters.packaged import Packaged

Row = Mapping[str, Any]
# to_row(row, index, seed) -> fields of the mapped row, or None for a row outside the benchmark
# (an MMLU subject that is not STEM). The fields: key (id without the source prefix), level,
# prompt, answer, solution, meta (a dict).
RowMapper = Callable[[Row, int, int], "dict[str, Any] | None"]


class RowError(ValueError):
    """A row cannot be mapped; `load_benchmark` adds the file and the row index."""


@dataclass(frozen=True)
class Adapter:
    hub_id: str
    config: str | tuple[str, ...] | None  # a tuple: each config is loaded, then concatenated
    split: str
    domain: str  # math | mcq | code
    columns: tuple[tuple[str, ...], ...]  # needed columns; each entry lists accepted names
    to_row: RowMapper
    # Where the rows ship inside an installed package: read from there, not from the hub,
    # when no path is given (grpo_core.data.adapters.packaged).
    package: Packaged | None = None


# ---------------------------------------------------------------------------------------------
# Field helpers


def cell(row: Row, *names: str) -> Any:
    """The value of the first of `names` that is a column of `row` (None if none is)."""
    for name in names:
        if name in row:
            return row[name]
    return None


def as_text(value: Any) -> str:
    """A cell as text: None and NaN are "", integral floats lose their ".0"."""
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        # Parquet/pandas store integer answers of a column with a missing value as floats.
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value).strip()


def required(row: Row, names: Sequence[str], what: str) -> str:
    """The text of the first of `names` that is a column of `row`; empty is a `RowError`."""
    text = as_text(cell(row, *names))
    if not text:
        raise RowError(f"empty {what} (column {names[0]!r})")
    return text


def present(meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` without its empty fields (None, "", [])."""
    return {k: v for k, v in meta.items() if v not in (None, "", [])}
