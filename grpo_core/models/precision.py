"""The dtype a stage computes in (`dtype` in train, profile, guide and eval): float32, the
reference, or bfloat16.

bfloat16 (`to_bfloat16`) casts the parameters to bf16 in place; buffers stay as they are (the
rotary embedding's inverse frequencies are float32 in HF's models: bf16 would shift the angles
of late positions). The sampler and the scorer take their softmax of the logits in float32
either way. Measured on SmolLM2-135M-Instruct (benchmarks/results/cpu-dtype-smollm2.md), a
bf16 model's token log-probs differ from float32's by 0.035 nats on average (0.004 for a
completion's mean); a float32 output head on the bf16 body takes that to 0.028 at a fifth of
the model's multiplications in float32, not worth it. Sampler and learner share the model, so
the importance ratio of the first update is still exactly 1.

Under LoRA the adapters peft adds afterwards stay float32 (its `autocast_adapter_dtype`), so
the optimizer updates float32 weights; full fine-tuning of bf16 weights would lose every
update smaller than 2^-8 of a weight, and `train` refuses it.
"""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def set_dtype(model, dtype: str):
    """`model` (float32, as `load_model` gives it) computing in `dtype`: unchanged for
    float32, `to_bfloat16` for bfloat16. An unknown name is a ValueError."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: allowed values are {list(DTYPES)}")
    return model if dtype == "float32" else to_bfloat16(model)


def to_bfloat16(model):
    """Cast `model`'s parameters to bf16 in place; its buffers keep their dtype."""
    for p in model.parameters():
        if p.dtype == torch.float32:
            p.data = p.data.to(torch.bfloat16)
    return model
