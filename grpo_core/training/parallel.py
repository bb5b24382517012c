"""Data parallelism behind one small interface: how many processes train and which one this is,
each process's share of the work, the gather of the rollouts, the backward with the world-size
factor, the optimizer step and the optimizer state. `SingleProcess` is one process; `DDP` and
`DeepSpeedZeRO` run under `accelerate launch`.

Every process holds the same full batch and takes every decision that depends on it exactly
as one process would; only the work is split, by whole groups: each process samples and
rewards its block of a step's groups (then all gather the rows), and trains on its block of
the trained groups, with the loss normalised by the whole batch's counts so that the averaged
gradient is one process's.

Also the `accelerate.Accelerator` of a launched process (stages.train, and the worker of
tests/test_distributed.py): DDP (configs/accelerate/ddp_cpu2.yaml, *_gpu*) or DeepSpeed ZeRO
(configs/accelerate/zero*.yaml), on GPUs or, with none visible, on the CPU over gloo."""

from __future__ import annotations

import importlib
import os
from contextlib import contextmanager, nullcontext

import torch

from grpo_core.training.batch import Sampled


def share(n: int, rank: int, world: int) -> tuple[int, int]:
    """[lo, hi): rank's contiguous block of n items split as evenly as can be."""
    return rank * n // world, (rank + 1) * n // world


class SingleProcess:
    """One process: it does all the work, and there is nothing to communicate."""

    world = 1
    rank = 0
    sharded = False  # each process holds only its shard of the optimizer state (ZeRO)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        """Wait for every process."""

    def close(self) -> None:
        """The last call of a launched process: wait for every process, then take the process
        group down (its communication threads joined, not left to the interpreter's exit)."""

    def prepare(self, policy, optimizer, reference, cfg):
        """(what the loss runs through, the optimizer, the unwrapped policy, the reference)."""
        return policy, optimizer, policy, reference

    def share(self, n: int) -> tuple[int, int]:
        """[lo, hi): this process's block of `n` groups to sample."""
        return share(n, self.rank, self.world)

    def train_share(
        self, kept: torch.Tensor, group_size: int, rank: int | None = None
    ) -> tuple[int, int]:
        """[lo, hi): the positions among the trained rows `kept` (row indices of the batch,
        increasing) that process `rank` (this one by default) trains: its contiguous block of
        their groups."""
        if self.world == 1:
            return 0, len(kept)
        groups = (kept // group_size).tolist()
        distinct = sorted(set(groups))
        rank = self.rank if rank is None else rank
        g_lo, g_hi = share(len(distinct), rank, self.world)
        if g_lo == g_hi:
            return 0, 0
        first, last = distinct[g_lo], distinct[g_hi - 1]
        lo = groups.index(first)
        hi = len(groups) - groups[::-1].index(last)
        return lo, hi

    def padding_backwards(
        self, kept: torch.Tensor, n_chunks: int, group_size: int, micro_batch_size: int
    ) -> int:
        """How many zero backward passes this process runs before its own `n_chunks` in each
        update, only to take part in the collectives. DDP all-reduces once, at the last
        backward: one for a process with no rows."""
        return 0 if n_chunks else 1

    def backward(self, loss: torch.Tensor, last: bool = True) -> None:
        """Backward of this process's part of the batch loss (normalised by the whole batch's
        counts). `last`: the update's last backward."""
        loss.backward()

    def no_sync(self):
        """A context for the backwards before the last: no gradient all-reduce in them."""
        return nullcontext()

    def optimizer_step(self, model, optimizer, max_grad_norm: float) -> torch.Tensor:
        """Clip, step and zero the gradients; the gradient norm before clipping."""
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [q for q in model.parameters() if q.requires_grad], max_grad_norm
        )
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def all_reduce_sum(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Every process's sums added up (one process: its own are the totals)."""
        return tensors

    def gather(self, local: Sampled | None, pad_id: int) -> Sampled:
        """Every process's rollouts, in rank order, on every process."""
        assert local is not None
        return local

    def optimizer_extras(self) -> dict:
        """What the trainer state holds besides the optimizer's state_dict."""
        return {}

    def gathered(self, model=None):
        """A context, entered by every process, in which the policy's parameters are whole
        on every process: for sampling (no collective per forward) and for saving. Nothing to
        do unless the weights are sharded (ZeRO-3)."""
        return nullcontext()

    def load_optimizer_state(self, optimizer, state: dict) -> None:
        optimizer.load_state_dict(state["optimizer"])


class DDP(SingleProcess):
    """Processes started by `accelerate launch`: DDP (on the CPU over gloo with no GPU)."""

    def __init__(self, accelerator):
        self.accelerator = accelerator
        self.world = accelerator.num_processes
        self.rank = accelerator.process_index
        self.policy = None  # the wrapped policy, once prepared

    def barrier(self) -> None:
        self.accelerator.wait_for_everyone()

    def close(self) -> None:
        # Without it, a gloo process group is torn down at the interpreter's exit, where a
        # process was seen to abort ("terminate called without an active exception").
        self.accelerator.wait_for_everyone()
        self.accelerator.end_training()

    def prepare(self, policy, optimizer, reference, cfg):
        # The scheduler stays the trainer's: accelerate's would step once per process. Under
        # DeepSpeed it still sets the lr of the AdamW param groups ZeRO steps with.
        self.policy, optimizer = self.accelerator.prepare(policy, optimizer)
        model = self.accelerator.unwrap_model(self.policy)
        if reference is not None:
            reference = reference.to(self.accelerator.device)
        return self.policy, optimizer, model, reference

    def backward(self, loss: torch.Tensor, last: bool = True) -> None:
        """DDP and ZeRO average gradients over processes, hence the factor: the average of
        world x the parts is their sum, one process's gradient (DDP's accumulation boundary
        is `no_sync`'s absence)."""
        self.accelerator.backward(loss * self.world)

    def no_sync(self):
        return self.accelerator.no_sync(self.policy)

    def all_reduce_sum(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        import torch.distributed as dist

        if self.world == 1:
            return tensors
        names = list(tensors)
        flat = torch.cat([tensors[k].detach().float().reshape(-1) for k in names])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        out, i = {}, 0
        for k in names:
            n = tensors[k].numel()
            out[k] = flat[i : i + n].reshape(tensors[k].shape)
            i += n
        return out

    def gather(self, local: Sampled | None, pad_id: int) -> Sampled:
        """`local`: this process's block of groups (None if it has none), on the CPU."""
        import torch.distributed as dist

        parts: list[Sampled | None] = [None] * self.world
        dist.all_gather_object(parts, local)
        full = Sampled.cat([p for p in parts if p is not None], pad_id)
        return full.to(self.accelerator.device)


class DeepSpeedZeRO(DDP):
    """DeepSpeed ZeRO under `accelerate launch`: the policy becomes its engine, which owns the
    optimizer step, and each process holds its shard of the optimizer state."""

    sharded = True

    def prepare(self, policy, optimizer, reference, cfg):
        self._configure(self.accelerator.state.deepspeed_plugin.deepspeed_config, cfg)
        return super().prepare(policy, optimizer, reference, cfg)

    @staticmethod
    def _configure(ds_config: dict, cfg) -> None:
        """What the run's params decide in the DeepSpeed config, before the engine is built:
        clipping at train.max_grad_norm (the engine clips, not us), the micro-batch size (no
        dataloader to take it from), and no accumulation counting by the engine: the number
        of micro-batches per update varies (dynamic sampling, uneven shares), so `update`
        marks the last one itself and the engine must not divide the loss by a fixed count."""
        ds_config["gradient_clipping"] = cfg.max_grad_norm
        ds_config["gradient_accumulation_steps"] = 1
        ds_config["train_micro_batch_size_per_gpu"] = cfg.micro_batch_size
        ds_config.pop("train_batch_size", None)  # derived again from the two above

    def padding_backwards(
        self, kept: torch.Tensor, n_chunks: int, group_size: int, micro_batch_size: int
    ) -> int:
        """ZeRO reduces gradients at every backward, so every process runs as many as the one
        with the most micro-batches (each process knows every share: no communication)."""
        mbs = micro_batch_size
        most = 1
        for rank in range(self.world):
            lo, hi = self.train_share(kept, group_size, rank)
            most = max(most, -(-(hi - lo) // mbs))
        return most - n_chunks

    def backward(self, loss: torch.Tensor, last: bool = True) -> None:
        # Not accelerator.backward: that would run the engine's optimizer step after every
        # backward outside an accumulate() block. `optimizer_step` steps the engine once.
        self.policy.set_gradient_accumulation_boundary(last)
        self.policy.backward(loss * self.world)

    def no_sync(self):
        return nullcontext()  # ZeRO reduces at every backward

    @property
    def stage(self) -> int:
        return self.accelerator.state.deepspeed_plugin.zero_stage

    @contextmanager
    def gathered(self, model=None):
        """Under ZeRO-3, every parameter of the policy (or of `model`, a module whose weights
        the engine sharded, as the unwrapped policy `train_policy` returns) gathered whole on
        every process for the block: one all-gather each way, not one per module per forward.
        Read-only: changes made inside are dropped.

        Around forwards (sampling token by token, scoring, however unevenly the processes
        share them) the engine's module hooks are off, so that no forward runs a collective or
        releases a parameter. The policy must fit whole on one device: said before anything
        is gathered. Under ZeRO-1/2 the weights are whole already."""
        if self.stage != 3:
            yield
            return
        import deepspeed

        engine = self.policy
        module = model if model is not None else engine.module
        params = list(module.parameters())
        _check_fits(params, params[0].device)
        with deepspeed.zero.GatheredParameters(params):
            if engine is None or model is not None:  # saving: no forward inside
                yield
                return
            offload = engine.optimizer.parameter_offload
            for q in params:
                q.ds_active_sub_modules.clear()
            offload._remove_module_hooks()
            offload.forward_hooks, offload.backward_hooks = [], []
            try:
                yield
            finally:
                offload.setup_zero_stage3_hooks()

    def optimizer_step(self, model, optimizer, max_grad_norm: float) -> torch.Tensor:
        # The engine clips (gradient_clipping = max_grad_norm), steps and zeroes the
        # gradients; the norm is the one before clipping, as clip_grad_norm_'s.
        self.policy.step()
        return self.policy.get_global_grad_norm()

    def optimizer_extras(self) -> dict:
        """The optimizer state is this process's ZeRO shard (its partition of the Adam moments
        and of the fp32 master weights; DeepSpeed's own per-rank format, as
        `engine.save_checkpoint` writes it): with it go the engine's step counters and whose
        shard it is. Every process saves its own, and loads it back into an engine of the same
        world size and config."""
        engine = self.policy
        return {
            "engine": {
                "global_steps": engine.global_steps,
                "global_samples": engine.global_samples,
                "skipped_steps": engine.skipped_steps,
            },
            "rank": self.rank,
            "world": self.world,
        }

    def load_optimizer_state(self, optimizer, state: dict) -> None:
        """This process's ZeRO shard back into the engine, as `engine.load_checkpoint` does
        (the weights are already in: the engine was built from them). The fp32 master weights
        come from the shard (load_from_fp32_weights, DeepSpeed's default), not from the 16-bit
        weights, so a bf16 run continues exactly too."""
        if (state.get("rank"), state.get("world")) != (self.rank, self.world):
            raise ValueError(
                f"ZeRO optimizer state of process {state.get('rank')} of {state.get('world')}, "
                f"loaded into process {self.rank} of {self.world}"
            )
        engine = self.policy
        # A list by rank, as DeepSpeed reads its per-rank files: a shard saved by the same
        # world size (not elastic) is read from this process's entry only.
        shards: list[dict | None] = [None] * self.world
        shards[self.rank] = state["optimizer"]
        engine.optimizer.load_state_dict(
            shards,
            load_optimizer_states=True,
            load_from_fp32_weights=engine.zero_load_from_fp32_weights(),
        )
        for key, value in state["engine"].items():
            setattr(engine, key, value)


def _check_fits(params: list, device: torch.device) -> None:
    """The policy's whole weights fit on `device` beside what it holds: else an InputError
    that says by how much, and what to do."""
    if device.type != "cuda":
        return
    need = sum(q.ds_numel * q.element_size() for q in params)
    free = torch.cuda.mem_get_info(device)[0]
    if need > 0.8 * free:
        from grpo_core.errors import InputError

        raise InputError(
            f"launch: ZeRO-3 gathers the policy's weights whole for each rollout batch "
            f"({need / 1e9:.1f} GB), more than this GPU has free ({free / 1e9:.1f} GB, keeping "
            "a fifth for activations): use LoRA (train.lora.enabled=true), which leaves the "
            "weights far smaller, or a GPU with more memory; the vLLM backend "
            "(train.rollout_backend=vllm) needs them whole too, in its own engine"
        )


def data_parallel(accelerator=None) -> SingleProcess:
    """How this process trains: alone (no accelerator), DDP, or DeepSpeed ZeRO."""
    if accelerator is None:
        return SingleProcess()
    if accelerator.state.deepspeed_plugin is not None:
        return DeepSpeedZeRO(accelerator)
    return DDP(accelerator)


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
