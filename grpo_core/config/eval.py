"""`evaluate` stage params: the `eval` section (how base and policy are scored)."""

from __future__ import annotations

from pydantic import Field, model_validator

from grpo_core.config.code_reward import ScoringRewardView
from grpo_core.config.core import PositiveFloat, PositiveInt, Seed, StageParams
from grpo_core.config.runtime import Numerics, Threads
from grpo_core.config.sampling import SamplingParams


class EvalParams(SamplingParams):
    """`evaluate` stage: how base and policy are scored on the held-out split."""

    seed: Seed | None = Field(
        None,
        description="Seed of evaluation sampling alone; null: the top-level `seed`. Varying it "
        "re-scores the same base and policy with other samples.",
    )
    samples: PositiveInt = Field(4, description="k samples per question (avg@k, pass@k).")
    temperature: PositiveFloat = Field(1.0, description="Sampling temperature, as papers report.")
    pass_at: list[PositiveInt] = Field(default=[4], description="k values reported as pass@k.")
    greedy: bool = Field(
        True, description="Also decode each question once greedily and report `greedy`."
    )

    @model_validator(mode="after")
    def _pass_at_within_samples(self) -> EvalParams:
        too_big = [k for k in self.pass_at if k > self.samples]
        if too_big:
            raise ValueError(f"pass_at values {too_big} exceed samples ({self.samples})")
        return self


class EvaluateStage(StageParams):
    """What `evaluate` reads."""

    numerics: Numerics = "portable"
    threads: Threads = 2
    seed: Seed = 0
    eval: EvalParams = EvalParams()
    reward: ScoringRewardView = ScoringRewardView()

    @property
    def eval_seed(self) -> int:
        """The evaluation's seed: `eval.seed`, or the top-level `seed` when it is null."""
        return self.seed if self.eval.seed is None else self.eval.seed
