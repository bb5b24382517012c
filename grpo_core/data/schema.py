"""The unified problem schema every data source maps to, and a checked reader for it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from grpo_core.errors import InputError
from grpo_core.io import read_stage_output

PROBLEM_SCHEMA = pa.schema(
    [
        ("id", pa.string()),  # unique within a split
        ("domain", pa.string()),  # math | mcq | code: selects the reward
        ("source", pa.string()),  # benchmark or generator name; the key in metrics/eval.json
        ("level", pa.int32()),  # difficulty level, 1 = easiest
        ("prompt", pa.string()),  # exactly what the model is given
        ("answer", pa.string()),  # gold final answer, as the verifier reads it
        ("solution", pa.string()),  # reference solution (SFT target, guidance prefixes)
        ("meta", pa.string()),  # JSON object with source-specific fields
    ]
)


def problems_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=PROBLEM_SCHEMA)


def select_problems(
    table: pa.Table, levels: list[int], domains: list[str] | None = None
) -> pa.Table:
    """The problems of `levels` (and of `domains`, unless None), in table order."""
    table = table.filter(pc.is_in(table["level"], pa.array(levels, pa.int32())))
    if domains is not None:
        table = table.filter(pc.is_in(table["domain"], pa.array(domains, pa.string())))
    return table


def read_problems(path: str | Path) -> pa.Table:
    """Read a problems Parquet file (written by `prepare`): missing, unreadable, short of a
    column or of a wrong type, it is an InputError naming the file."""
    table = read_stage_output(str(path), PROBLEM_SCHEMA.names, "prepare")
    try:
        return table.cast(PROBLEM_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InputError(f"{path}: columns do not match the problem schema: {exc}") from None


def check_selection(
    split: pa.Table,
    selected: pa.Table,
    levels: list[int],
    domains: list[str] | None,
    path: str | Path,
) -> None:
    """Check `selected`, the problems of the train split `split` (read from `path`) at
    `train.levels` and `train.domains`: name the param that selects nothing, a domain of
    `train.domains` with no problems at `train.levels` (even beside others that have some: a
    run that names a domain means to train on it), listing the domains there are; or
    `train.levels` without problems. Shared by `profile` and `train`, so the first stage to
    meet the selection names the right param."""
    at_levels = select_problems(split, levels)
    present = sorted(set(at_levels["domain"].to_pylist()))
    missing = [d for d in domains or [] if d not in present]
    if missing:
        elsewhere = {
            d: sorted(set(split.filter(pc.equal(split["domain"], d))["level"].to_pylist()))
            for d in missing
        }
        found = "; ".join(f"its {d} problems have levels {lv}" for d, lv in elsewhere.items() if lv)
        names = ", ".join(missing)
        raise InputError(
            f"train.domains={domains}: {path} has no {names} problems at "
            f"train.levels={levels}; the domains there: {present}"
            + (f" ({found})" if found else "")
            + f"; drop {names} from train.domains (null: every domain), or add {names} problems "
            "with data.domains or data.train"
        )
    if selected.num_rows == 0:
        there = sorted(set(split["level"].to_pylist()))
        raise InputError(
            f"train.levels={levels}: {path} has no problems at these levels; its "
            f"levels: {there} (data.levels, and 0 for the real datasets of data.train)"
        )
