"""`base` stage params: the `model` section (which model RL starts from; the tiny world's
architecture and warm start)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from grpo_core.config.core import PositiveFloat, PositiveInt, Section, Seed, StageParams


class TinyModelParams(Section):
    """Architecture of the tiny-world decoder (a standard Qwen2 config)."""

    hidden_size: PositiveInt = 128
    num_layers: PositiveInt = 3
    num_heads: PositiveInt = 4
    intermediate_size: PositiveInt = 512
    max_position_embeddings: PositiveInt = 256

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> TinyModelParams:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by "
                f"num_heads ({self.num_heads})"
            )
        return self


class SFTParams(Section):
    """Warm start of the tiny model on reference solutions (before any RL)."""

    steps: Annotated[int, Field(ge=0)] = Field(
        500, description="Optimizer steps. Fewer leaves more of the ladder for RL to learn."
    )
    batch_size: PositiveInt = 64
    lr: PositiveFloat = 3e-3
    warmup_steps: Annotated[int, Field(ge=0)] = 20
    level_weights: list[Annotated[float, Field(ge=0)]] = Field(
        default=[1.0, 1.0, 1.0, 0.5, 0.15],
        description="Sampling weight of each level (level 1 first) in the SFT mixture; "
        "low weights on hard levels leave them unsolved, which is what RL studies need.",
    )


class ModelParams(Section):
    """`base` stage: which model RL starts from."""

    name: str = Field(
        "tiny",
        description="'tiny' builds and warm-starts the tiny-world model; anything else is a "
        "Hugging Face hub id (e.g. Qwen/Qwen2.5-Math-1.5B) or a local model directory.",
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit).")
    chat: bool = Field(
        False,
        description="Wrap every prompt in the tokenizer's chat template as one user message "
        "(instruct models). Base models, the tiny one included, take plain prompts.",
    )
    tiny: TinyModelParams = TinyModelParams()
    sft: SFTParams = SFTParams()


class BaseStage(StageParams):
    """What `base` reads."""

    seed: Seed = 0
    model: ModelParams = ModelParams()
