"""The `reward.code` section: the sandbox limits every stage that scores code reads; and with
`reward.function`, the view of the `reward` section of a stage that scores completions."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from grpo_core.config.core import PositiveFloat, PositiveInt, Section
from grpo_core.config.user_reward import RewardFunctionSpec


class CodeRewardParams(Section):
    """The sandbox that runs completions' programs against the problem's tests
    (grpo_core.rewards.sandbox). Limits apply to each program."""

    workers: PositiveInt = Field(2, description="Programs checked in parallel.")
    timeout_s: PositiveFloat = Field(5.0, description="Wall-clock limit, seconds.")
    cpu_time_s: PositiveInt = Field(5, description="CPU-time limit, seconds (RLIMIT_CPU).")
    memory_mb: PositiveInt = Field(512, description="Address-space limit, MiB (RLIMIT_AS).")
    max_output_bytes: PositiveInt = Field(
        1 << 20, description="Output cap: a program printing more is killed (reward 0)."
    )
    max_processes: PositiveInt = Field(16, description="Processes a program may run at once.")
    binary: bool = Field(
        False,
        description="Training reward 1 only when every test passes; else the partial credit: "
        "the tests passed beyond the best trivial program's (grpo_core/rewards/code.py). "
        "Sampled evaluation (profile, guide, evaluate) always scores all or nothing.",
    )


class CodeRewardView(Section):
    """`reward.code` of a `reward` section whose shaping keys belong to the `train` stage."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    code: CodeRewardParams = CodeRewardParams()


class ScoringRewardView(CodeRewardView):
    """`reward.code` and `reward.function`: what a stage that scores completions reads."""

    function: RewardFunctionSpec = None
