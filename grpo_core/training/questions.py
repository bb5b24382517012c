"""The training questions of a run: the train split narrowed by `train` (levels, domains,
curriculum), with their reference solutions and OC-GRPO's guide fractions (in fixed mode, a
guided twin beside each question the guide stage unlocked)."""

from __future__ import annotations

import dataclasses
import logging

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from grpo_core.analysis.difficulty import CURRICULA
from grpo_core.config.train import TrainStage
from grpo_core.data.prompts import render_prompt
from grpo_core.data.schema import read_problems, select_problems
from grpo_core.errors import InputError
from grpo_core.training.batch import GUIDED_SUFFIX, Question

log = logging.getLogger(__name__)


def training_questions(params: TrainStage) -> list[Question]:
    """The questions of `train.levels` and `train.domains`, narrowed by `train.curriculum`
    (from the profile), with their reference solutions; in OC-GRPO's fixed mode, with their
    guide fractions and, after them, a guided twin of each question that has one (the
    reference's offline augmentation: the original row is kept)."""
    cfg = params.train
    table = read_problems("data/prepared/train.parquet")
    table = select_problems(table, cfg.levels, cfg.domains)
    if cfg.curriculum != "all":
        profile = pq.read_table("data/profile.parquet", columns=["id", "bin"])
        ids = profile.filter(pc.is_in(profile["bin"], pa.array(CURRICULA[cfg.curriculum])))
        table = table.filter(pc.is_in(table["id"], ids["id"]))
    guides = {}
    if cfg.oc_grpo.mode == "fixed":
        rows = pq.read_table("data/guides.parquet", columns=["id", "fraction"]).to_pylist()
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
    if not questions:
        raise InputError(
            f"train.levels={cfg.levels}, train.domains={cfg.domains}, "
            f"train.curriculum={cfg.curriculum!r}: no training problems (a curriculum other "
            "than 'all' draws from data/profile.parquet only)"
        )
    log.info(
        "%d training questions at levels %s (curriculum %s), %d guided twins",
        len(questions),
        cfg.levels,
        cfg.curriculum,
        len(twins),
    )
    return questions + twins


def render_questions(questions: list[Question], tokenizer, chat: bool) -> list[Question]:
    """Questions whose prompts went through the chat template where the model takes one
    (the plain text kept in `raw_prompt`, for OC-GRPO's hinted prompts)."""
    if not chat:
        return questions
    return [
        dataclasses.replace(
            q, prompt=render_prompt(tokenizer, q.prompt, chat), raw_prompt=q.prompt, chat=True
        )
        for q in questions
    ]
