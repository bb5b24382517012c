"""The `reward` section: verifiers' settings (`reward.code`) and the training reward's shaping."""

from __future__ import annotations

from pydantic import Field

from grpo_core.config.code_reward import CodeRewardParams
from grpo_core.config.core import PositiveInt, Section


class RewardWeights(Section):
    """Weights of the training reward's components (TRL's reward_weights)."""

    correct: float = Field(1.0, description="The verifier's reward (1 = solved).")
    format: float = Field(
        0.0,
        description="Format reward: 1 when the answer is in the expected form (a closed "
        "\\boxed{}, one 'Answer: X' letter, a program defining the entry point).",
    )
    overlong: float = Field(
        0.0,
        description="DAPO's soft overlong punishment (0 down to -1 over the last "
        "`reward.overlong_cache` tokens of the budget); DAPO uses 1.",
    )


class RewardParams(Section):
    """Verifiers (every stage that scores completions) and shaping (`train` only)."""

    code: CodeRewardParams = CodeRewardParams()
    weights: RewardWeights = RewardWeights()
    overlong_cache: PositiveInt = Field(
        16,
        description="L_cache of the overlong punishment: completions longer than "
        "max_new_tokens - overlong_cache tokens are penalised linearly.",
    )
