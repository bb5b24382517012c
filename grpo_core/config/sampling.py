"""How a stage samples completions from a fixed model: the fields `profile`, `guide` and
`eval` share."""

from __future__ import annotations

from pydantic import Field

from grpo_core.config.core import Draw, Dtype, PositiveFloat, PositiveInt, Section


class SamplingParams(Section):
    """How a stage samples completions from a fixed model."""

    samples: PositiveInt = Field(8, description="Completions per question.")
    temperature: PositiveFloat = Field(1.0, description="Sampling temperature.")
    max_new_tokens: PositiveInt = Field(
        72,
        description="Most tokens of a completion; one cut there has no final answer and "
        "scores 0 (the tiny world's solutions take at most 48).",
    )
    batch_size: PositiveInt = Field(
        512,
        description="The most sequences in one generate call or scoring forward: whole "
        "questions share a call while `samples` fits (batch_size // samples of them), and a "
        "question's samples beyond it are split over calls. It bounds memory, but the calls "
        "draw from one random stream in turn, so another value draws other samples.",
    )
    dtype: Dtype = "float32"
    draw: Draw = "multinomial"
    compact: bool = Field(
        False,
        description="Finished completions leave the batch (and its KV cache) instead of being "
        "decoded to the longest one's end: faster where lengths vary (SmolLM2's evaluation of "
        "600 completions: 18-29% less time, benchmarks/results/smollm2-eval-compact.md). The "
        "random numbers are the same, but a row's logits, computed beside fewer rows, move by "
        "float rounding: in float32 a near tie may flip a token now and then; in bf16 most "
        "completions come out different from the same distribution (the rewarded share within "
        "the evaluation's noise). A setting of the run, off by default.",
    )
