"""The `accelerate.Accelerator` of a launched training process (stages.train, and the worker of
tests/test_distributed.py): DDP (configs/accelerate/ddp_cpu2.yaml, *_gpu*) or DeepSpeed ZeRO
(configs/accelerate/zero*.yaml), on GPUs or, with none visible, on the CPU over gloo."""

from __future__ import annotations

import importlib
import os

import torch


def uses_deepspeed() -> bool:
    """Started by `accelerate launch` with a DeepSpeed config (the launcher sets this)."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def make_accelerator():
    """An Accelerator for this launched process.

    Without a GPU: collectives over gloo. accelerate picks gloo by itself for DDP, but under
    DeepSpeed it would leave the backend to DeepSpeed's CPU accelerator, and every process
    then runs alone (num_processes 1) without a word; DeepSpeed must also be told to run on
    the CPU (DS_ACCELERATOR, read when it is first imported), and its CPU communication
    backend would compile a shared-memory all-reduce op (g++, ~40 s) used only by inference
    kernels, never by training: skipped."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    # Buffers (rotary frequencies) are constants: no broadcast at every forward, which
    # would need every process to run as many forwards as the others.
    handlers: list = [DistributedDataParallelKwargs(broadcast_buffers=False)]
    cpu = not torch.cuda.is_available()
    if cpu:
        handlers.append(InitProcessGroupKwargs(backend="gloo"))
        if uses_deepspeed():
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
            # importlib: `deepspeed.comm.torch` as an attribute is the torch package, which
            # deepspeed.comm re-exports.
            importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    # DeepSpeed on the CPU runs with use_cpu false (its config), so `cpu` goes to DDP only.
    return Accelerator(cpu=cpu and not uses_deepspeed(), kwargs_handlers=handlers)


def zero_state_globals() -> list:
    """The DeepSpeed classes a ZeRO optimizer's state_dict() holds besides tensors and plain
    values (its loss scaler, its stage, its parameter-to-partition map): what torch.load must
    allow to read a saved shard with weights_only (torch.serialization.safe_globals)."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]
