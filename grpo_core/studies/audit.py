"""What the policies learned, read from their evaluation completions (each cell's and base's
completions.parquet): per arm and level, the share of sampled completions rewarded and the form
in which the rewarded ones gave their answer (`verify.answer_form`: boxed, stated, program,
other), and the shapes of the rewarded completions most often written, so that a shortcut ("The
answer is 7." and nothing else) or a hack (a reward paid for `other`) shows in the report.

A shape is the completion with each run of digits written `#` and its whitespace collapsed:
"3+4=7\\n\\boxed{7}" and "5+2=7\\n\\boxed{7}" are one shape, "#+#=#⏎\\boxed{#}"."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from grpo_core.rewards.verify import ANSWER_FORMS, answer_form
from grpo_core.studies.results import Results
from grpo_core.studies.spec import BASE, cell_key

SHAPE_CHARS = 90  # a shape longer than this is cut, with "…"


def folder(results: Results, variant: str, seed: int) -> Path:
    """Where the cell (or, for BASE, the base evaluation) of `variant` at `seed` lives."""
    if variant == BASE:
        return results.directory / "base" / str(seed)
    return results.directory / "cells" / cell_key(variant, seed)


def sampled_completions(results: Results, variant: str) -> list[dict]:
    """The variant's sampled evaluation completions over its done seeds, each with its seed
    and its `form` (computed from the text, the question's domain from questions.parquet,
    where a cell was written before the column was kept). Greedy ones are left out: the
    accuracies the report compares are avg@k over the sampled ones."""
    out = []
    for seed in sorted(results.summaries.get(variant, {})):
        path = folder(results, variant, seed)
        if not (path / "completions.parquet").exists():
            continue
        rows = pq.read_table(path / "completions.parquet").to_pylist()
        if rows and "form" not in rows[0]:
            questions = pq.read_table(path / "questions.parquet", columns=["id", "domain"])
            domain = dict(zip(*questions.to_pydict().values(), strict=True))
            for r in rows:
                r["form"] = answer_form(domain[r["id"]], r["completion"])
        out += [r | {"seed": seed} for r in rows if r["decoding"] == "sampled"]
    return out


def shape(completion: str) -> str:
    """The completion with digit runs as `#`, whitespace runs as one space (a line break as
    ⏎), cut to `SHAPE_CHARS`."""
    text = re.sub(r"\d+", "#", completion.strip())
    text = re.sub(r"\s*\n\s*", "⏎", text)
    text = re.sub(r"[ \t]+", " ", text)
    return text if len(text) <= SHAPE_CHARS else text[: SHAPE_CHARS - 1] + "…"


def form_table(results: Results) -> tuple[list[str], list[list[str]]]:
    """Head and rows: per arm (the base first) and reported level, the sampled completions
    counted, the share rewarded (reward > 0), and among the rewarded the share in each form
    that occurs anywhere in the study."""
    by_arm = {v: sampled_completions(results, v) for v in (BASE, *results.study.variants)}
    seen = {r["form"] for rows in by_arm.values() for r in rows if r["reward"] > 0}
    forms = [f for f in ANSWER_FORMS if f in seen]
    head = ["arm", "level", "completions", "rewarded", *(f"rewarded: {f}" for f in forms)]
    rows = []
    for arm, comps in by_arm.items():
        for level in results.reported_levels():
            at = [r for r in comps if r["level"] == level]
            if not at:
                continue
            won = [r for r in at if r["reward"] > 0]
            count = Counter(r["form"] for r in won)
            shares = [f"{count[f] / len(won):.0%}" if won else "–" for f in forms]
            rows.append([arm, str(level), str(len(at)), f"{len(won) / len(at):.1%}", *shares])
    return head, rows


def common_shapes(results: Results, top: int = 3) -> list[list[str]]:
    """Per arm, the `top` shapes of its rewarded sampled completions (all levels and seeds):
    the shape, its count and share of the arm's rewarded completions, and one real example."""
    rows = []
    for arm in (BASE, *results.study.variants):
        won = [r for r in sampled_completions(results, arm) if r["reward"] > 0]
        counts = Counter(shape(r["completion"]) for r in won)
        example = {}
        for r in won:
            example.setdefault(shape(r["completion"]), r["completion"])
        for s, n in counts.most_common(top):
            text = example[s].strip().replace("\n", "⏎").replace("`", "'")
            text = text if len(text) <= SHAPE_CHARS else text[: SHAPE_CHARS - 1] + "…"
            quoted = s.replace("`", "'")
            rows.append([arm, f"`{quoted}`", f"{n} ({n / len(won):.0%})", f"`{text}`"])
    return rows
