"""`train.levels` and `train.domains`: the part of the `train` section that `profile` reads
too. In a module of its own so that editing the rest of `train`'s declaration does not rerun
`profile`."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from grpo_core.config.core import Level, Section


class TrainSelection(Section):
    """`train.levels` and `train.domains`: which training questions exist for the run (and for
    the `profile` stage, which measures the base model on them)."""

    levels: list[Level] = Field(
        default=[3, 4],
        min_length=1,
        description="Levels to train on: the learnable band (solved sometimes, not always); "
        "0 is the level of real datasets that grade no difficulty.",
    )
    domains: list[Literal["math", "mcq", "code"]] | None = Field(
        None,
        description="Domains to train on; null: every domain of the train split. Mixing "
        "domains in one run is a choice: on the tiny world, training on all three eroded the "
        "arith levels it did not train on (docs/pipeline.md).",
    )


class TrainSelectionView(TrainSelection):
    """`train.levels` and `train.domains` of a `train` section whose other keys belong to the
    `train` stage (which validates them)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
