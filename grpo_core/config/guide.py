"""`guide` stage params: the `guide` section (OC-GRPO's fixed guidance)."""

from __future__ import annotations

from pydantic import Field

from grpo_core.config.code_reward import ScoringRewardView
from grpo_core.config.core import Fractions, Seed, StageParams
from grpo_core.config.runtime import Numerics, Threads
from grpo_core.config.sampling import SamplingParams


class GuideParams(SamplingParams):
    """`guide` stage: for profiled questions the base never solved, the smallest prefix of
    the reference solution that unlocks them as a hint in the prompt (OC-GRPO's fixed
    guidance: the guided prompt x~, `hinted_prompt`; the base writes the whole response)."""

    fractions: Fractions = Field(
        default=[0.2, 0.4, 0.6, 0.8, 1.0],
        description="Hint fractions of the reference solution (`char_prefix`), tried in "
        "order; a question keeps the first one with at least one correct completion among "
        "`samples` sampled from its guided prompt.",
    )


class GuideStage(StageParams):
    """What `guide` reads."""

    numerics: Numerics = "portable"
    threads: Threads = 2
    seed: Seed = 0
    guide: GuideParams = GuideParams()
    reward: ScoringRewardView = ScoringRewardView()
