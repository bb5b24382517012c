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

bfloat16 is a speed-up only on a CPU that multiplies it in hardware (oneDNN's bf16 kernels:
AVX-512 with BF16, or AMX). On an AVX2-only CPU (the AMD EPYC of benchmarks/results/
cpu-matmul-avx2.md) torch falls back to slower kernels: a bf16 matmul at SmolLM2's shapes ran
8x slower than float32 there (19 against 160 GFLOP/s), 140x with the weight in the other
layout, so `set_dtype` warns, and float32 is the dtype for such a machine.
"""

from __future__ import annotations

import functools
import logging
import platform
from pathlib import Path

import torch

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def set_dtype(model, dtype: str):
    """`model` (float32, as `load_model` gives it) computing in `dtype`: unchanged for
    float32, `to_bfloat16` for bfloat16. An unknown name is a ValueError."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: allowed values are {list(DTYPES)}")
    if dtype == "float32":
        return model
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    if on_cpu and not bf16_is_native():
        log.warning(
            "dtype bfloat16 on a CPU without bf16 matmul units (%s; oneDNN reports no bf16 "
            "support): bf16 multiplies here far slower than float32 (8-140x on an AVX2 EPYC: "
            "benchmarks/results/cpu-matmul-avx2.md); set the stage's dtype to float32 "
            "on this machine",
            cpu_name(),
        )
    return to_bfloat16(model)


@functools.cache
def bf16_is_native() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware, as oneDNN reports it (AVX-512 with
    its BF16 instructions, or AMX): where it does not, torch computes bf16 matmuls with
    fallback kernels (benchmarks/results/cpu-matmul-avx2.md)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN
        return False


@functools.cache
def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's processor string."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def to_bfloat16(model):
    """Cast `model`'s parameters to bf16 in place; its buffers keep their dtype."""
    for p in model.parameters():
        if p.dtype == torch.float32:
            p.data = p.data.to(torch.bfloat16)
    return model
