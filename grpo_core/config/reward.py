"""The `reward` section: verifiers' settings (`reward.code`) and the training reward's shaping."""

from __future__ import annotations

from pydantic import Field

from grpo_core.config.code_reward import CodeRewardParams
from grpo_core.config.core import PositiveInt, Section
from grpo_core.config.user_reward import RewardFunctionSpec


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
        "`reward.overlong_cache` tokens of the budget). Null in params.yaml: the `algo` "
        "preset's value (grpo_core.algorithms.presets.REWARD_PRESETS): 0.5 for dapo (DAPO "
        "sec. 3.4's weight 1 on a +1/-1 correctness reward, for our 1/0), 0 for the others.",
    )


class RewardParams(Section):
    """Verifiers (every stage that scores completions) and shaping (`train` only)."""

    code: CodeRewardParams = CodeRewardParams()
    function: RewardFunctionSpec = None
    weights: RewardWeights = RewardWeights()
    overlong_cache: PositiveInt = Field(
        14,
        description="L_cache of the overlong punishment: completions longer than "
        "max_new_tokens - overlong_cache tokens are penalised linearly. Null in params.yaml: "
        "20% of train.max_new_tokens, as DAPO's 4,096 of 20,480 tokens (14 of the default 72; "
        "grpo_core.algorithms.presets.overlong_cache).",
    )
