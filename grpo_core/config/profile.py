"""`profile` stage params: the `profile` section, and what the stage reads of `train` and
`reward`."""

from __future__ import annotations

from pydantic import Field

from grpo_core.config.code_reward import ScoringRewardView
from grpo_core.config.core import PositiveInt, Seed, StageParams
from grpo_core.config.runtime import Numerics, Threads
from grpo_core.config.sampling import SamplingParams
from grpo_core.config.selection import TrainSelectionView


class ProfileParams(SamplingParams):
    """`profile` stage: the base model's pass rate and confidence on the training questions
    (of `train.levels`)."""

    max_per_level: PositiveInt = Field(
        500,
        description="Questions profiled per level and source (the first ones of the train "
        "split). "
        "A curriculum other than `all` trains on profiled questions only.",
    )


class ProfileStage(StageParams):
    """What `profile` reads."""

    numerics: Numerics = "portable"
    threads: Threads = 2
    seed: Seed = 0
    profile: ProfileParams = ProfileParams()
    train: TrainSelectionView = TrainSelectionView()
    reward: ScoringRewardView = ScoringRewardView()
