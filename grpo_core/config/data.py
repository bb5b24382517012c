"""`prepare` stage params: the `data` section (which problems exist, how the splits are
drawn)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from grpo_core.config.core import PositiveInt, Section, Seed, StageParams, TinyLevel

# Where local dataset files live: the `prepare` stage's dependency in dvc.yaml, so DVC reruns it
# when one of them changes.
RAW_DIR = "data/raw"


def under_raw_dir(path: str) -> bool:
    """Whether `path` (relative to the repository root, the working directory of every stage,
    or absolute) lies inside data/raw/; ".." is resolved by its text, symlinks are kept: DVC
    hashes what is at the path."""
    root = Path.cwd()
    full = Path(os.path.normpath(root / Path(path).expanduser()))
    return full.is_relative_to(root / RAW_DIR)


class DatasetSpec(Section):
    """A real dataset, mapped to the problem schema by an adapter (grpo_core.data.adapters)."""

    name: str = Field(
        description="Adapter name: gsm8k, math_train, math500, aime24, aime25, amc23, "
        "minerva_math, olympiadbench, gpqa_diamond, arc_challenge, mmlu_stem, humaneval, mbpp."
    )
    path: str | None = Field(
        None,
        description="A local file (or directory of files) in the dataset's own column layout "
        "(parquet, json, jsonl, csv) under data/raw/, the dependency of `prepare` in dvc.yaml, "
        "so that editing it reruns `prepare`: a path elsewhere is refused, DVC would not see it "
        "change. null loads the adapter's hub id through `datasets` (needs the network or a "
        "warm HF cache).",
    )
    split: str | None = Field(None, description="Dataset split; null: the adapter's default.")
    limit: PositiveInt | None = Field(None, description="At most this many problems (first ones).")

    @field_validator("path")
    @classmethod
    def _tracked_by_dvc(cls, path: str | None) -> str | None:
        if path is not None and not under_raw_dir(path):
            raise ValueError(
                f"outside {RAW_DIR}/, so DVC would not rerun `prepare` when the file changes: "
                f"move it under {RAW_DIR}/, which the prepare stage tracks"
            )
        return path


def _dataset_spec(value: object) -> object:
    # `- math500` is shorthand for `- {name: math500}`.
    return {"name": value} if isinstance(value, str) else value


DatasetList = list[Annotated[DatasetSpec, BeforeValidator(_dataset_spec)]]


class DataParams(Section):
    """`prepare` stage: which problems exist and how the splits are drawn."""

    domains: list[Literal["arith", "mcq", "code"]] = Field(
        default=["arith"],
        description="Tiny-world generators: arith (math: L-digit addition), mcq (multiple "
        "choice), code (a small Python function, checked in the sandbox); [] for none.",
    )
    levels: list[TinyLevel] = Field(
        default=[1, 2, 3, 4, 5], min_length=1, description="Difficulty levels (1 = easiest)."
    )
    train_per_level: PositiveInt = Field(2000, description="Training problems per level.")
    eval_per_level: PositiveInt = Field(
        300,
        description="Held-out problems per level. With 4 samples each, 300 keep the paired "
        "standard error of a level's base-vs-policy difference under 2 points (measured by "
        "benchmarks/repro.py on the default run).",
    )
    train: DatasetList = Field(
        default=[],
        description="Real datasets added to the train split, e.g. [gsm8k, math_train]. Their "
        "problems have level 0 unless the dataset grades difficulty (MATH: 1-5), so include 0 "
        "in train.levels to train on them.",
    )
    eval: DatasetList = Field(
        default=[],
        description="Real benchmarks added to the eval split, e.g. [math500, aime24, "
        "gpqa_diamond, humaneval]; each is reported on its own in metrics/eval.json.",
    )

    @model_validator(mode="after")
    def _some_problems(self) -> DataParams:
        if not self.domains and not (self.train and self.eval):
            raise ValueError("no problems: give data.domains, or both data.train and data.eval")
        return self


class PrepareStage(StageParams):
    """What `prepare` reads."""

    seed: Seed = 0
    data: DataParams = DataParams()
