"""The training questions of a run: the train split narrowed by `train` (levels, domains,
curriculum), with their reference solutions and OC-GRPO's guide fractions (in fixed mode, a
guided twin beside each question the guide stage unlocked).

A selection that leaves fewer questions than one step's batch (`train.prompts_per_step`) is an
error naming the params that narrowed it: the sampler would fill every batch with repeats of
the same few questions, a run that looks like training and learns from a handful of prompts."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc

from grpo_core.analysis.difficulty import CURRICULA
from grpo_core.config.train import TrainStage
from grpo_core.data.prompts import log_rendered, render_prompt
from grpo_core.data.schema import check_selection, read_problems, select_problems
from grpo_core.errors import InputError
from grpo_core.io import read_stage_output
from grpo_core.training.batch import GUIDED_SUFFIX, Question

log = logging.getLogger(__name__)

TRAIN_SPLIT = "data/prepared/train.parquet"
PROFILE = "data/profile.parquet"  # written by `profile`: read by the curricula
GUIDES = "data/guides.parquet"  # written by `guide`: read by OC-GRPO's fixed mode


def _curriculum(table: pa.Table, curriculum: str) -> tuple[pa.Table, Counter]:
    """The problems of `table` in the difficulty bins of `curriculum` (from the profile), and
    how many of them the profile puts in each bin."""
    profile = read_stage_output(PROFILE, ["id", "bin"], "profile")
    profile = profile.filter(pc.is_in(profile["id"], table["id"]))
    bins = Counter(profile["bin"].to_pylist())
    ids = profile.filter(pc.is_in(profile["bin"], pa.array(CURRICULA[curriculum])))["id"]
    return table.filter(pc.is_in(table["id"], ids)), bins


def training_questions(params: TrainStage) -> list[Question]:
    """The questions of `train.levels` and `train.domains`, narrowed by `train.curriculum`
    (from the profile), with their reference solutions; in OC-GRPO's fixed mode, with their
    guide fractions and, after them, a guided twin of each question that has one (the
    reference's offline augmentation: the original row is kept).

    InputError when the selection is empty (naming `train.domains` or `train.levels`) or holds
    fewer questions than `train.prompts_per_step` (naming the curriculum, the levels, the count
    and, for a curriculum, the profile's bins)."""
    cfg = params.train
    split = read_problems(TRAIN_SPLIT)
    table = select_problems(split, cfg.levels, cfg.domains)
    check_selection(split, table, cfg.levels, cfg.domains, TRAIN_SPLIT)
    bins: Counter = Counter()
    if cfg.curriculum != "all":
        table, bins = _curriculum(table, cfg.curriculum)
    if table.num_rows < cfg.prompts_per_step:
        raise _too_few(table.num_rows, bins, params)
    guides = {}
    if cfg.oc_grpo.mode == "fixed":
        rows = read_stage_output(GUIDES, ["id", "fraction"], "guide").to_pylist()
        guides = {r["id"]: r["fraction"] for r in rows if r["fraction"] is not None}
    columns = ["id", "domain", "level", "prompt", "answer", "solution"]
    questions = [
        Question(**r, guide_fraction=guides.get(r["id"])) for r in table.select(columns).to_pylist()
    ]
    twins = [
        dataclasses.replace(q, id=q.id + GUIDED_SUFFIX, guided=True)
        for q in questions
        if q.guide_fraction is not None
    ]
    log.info(
        "%d training questions at levels %s (curriculum %s), %d guided twins",
        len(questions),
        cfg.levels,
        cfg.curriculum,
        len(twins),
    )
    return questions + twins


def _too_few(count: int, bins: Counter, params: TrainStage) -> InputError:
    """The error of a selection of `count` questions, fewer than one step's batch."""
    cfg = params.train
    domains = "" if cfg.domains is None else f", train.domains={cfg.domains}"
    noun = "question remains" if count == 1 else "questions remain"
    if cfg.curriculum == "all":
        why = ""
        fix = "add levels or domains, raise data.train_per_level"
    else:
        # The bins of the profiled questions of these levels, so the user sees where they are.
        profiled = ", ".join(f"{b} {bins[b]}" for b in ("unsolved", "hard", "easy", "solved"))
        why = (
            f" (its bins {list(CURRICULA[cfg.curriculum])} of the {sum(bins.values())} profiled "
            f"questions: {profiled})"
        )
        fix = "choose another curriculum or other levels, raise profile.max_per_level"
    return InputError(
        f"train.curriculum={cfg.curriculum!r} at train.levels={cfg.levels}{domains}: {count} "
        f"training {noun}{why}, fewer than one step's batch, train.prompts_per_step="
        f"{cfg.prompts_per_step}; {fix}, or lower train.prompts_per_step"
    )


def render_questions(questions: list[Question], tokenizer, chat: bool) -> list[Question]:
    """Questions whose prompts went through the chat template where the model takes one
    (the plain text kept in `raw_prompt`, for OC-GRPO's hinted prompts)."""
    if not chat:
        return questions
    rendered = [
        dataclasses.replace(
            q,
            prompt=render_prompt(tokenizer, q.prompt, chat, q.domain),
            raw_prompt=q.prompt,
            chat=True,
        )
        for q in questions
    ]
    log_rendered([q.prompt for q in rendered])
    return rendered
