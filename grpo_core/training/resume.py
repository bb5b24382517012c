"""The resume state of a stopped run: what continuing after a checkpoint needs besides its
weights (the trainer's optimizer, scheduler and CoDaPO queue, the question sampler, the step
metrics and log rows so far), valid only for a run with the same params and inputs."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

from grpo_core.config.launch import launch_config
from grpo_core.config.train import TrainStage
from grpo_core.io import atomic_path
from grpo_core.training.batch import QuestionSampler
from grpo_core.training.checkpoints import RUN_DIR
from grpo_core.training.parallel import zero_state_globals
from grpo_core.training.trainer import GRPOTrainer

log = logging.getLogger(__name__)

# What the train stage reads (with the params): a resume state is valid only for the same inputs.
TRAIN_INPUTS = [
    "models/base",
    "data/prepared/train.parquet",
    "data/profile.parquet",
    "data/guides.parquet",
]


def _file_digest(path: Path, whole: bool) -> str:
    """sha256 of a file, or for model weights of its size, first and last MiB (a fingerprint
    that does not read a 15 GB checkpoint)."""
    h = hashlib.sha256(str(path.stat().st_size).encode())
    with open(path, "rb") as f:
        if whole:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        else:
            h.update(f.read(1 << 20))
            f.seek(max(0, path.stat().st_size - (1 << 20)))
            h.update(f.read())
    return h.hexdigest()


def run_fingerprint(params: TrainStage, inputs: list[str]) -> str:
    """What a run depends on: the resolved params it reads (`launch` with its accelerate
    config: a ZeRO optimizer state is sharded by the number of processes) and its input files.
    A resume state with another fingerprint belongs to another run and is discarded."""
    h = hashlib.sha256()
    record = {
        "seed": params.seed,
        "algo": params.algo,
        "train": params.train.model_dump(),
        "reward": params.reward.model_dump(),
        "launch": params.launch,
        "launch_config": yaml.safe_load(launch_config(params.launch).read_text()),
    }
    h.update(json.dumps(record, sort_keys=True).encode())
    for name in inputs:
        path = Path(name)
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in (f for f in files if f.exists()):
            h.update(f"{f}:{_file_digest(f, whole=f.suffix != '.safetensors')}".encode())
    return h.hexdigest()


def _shard_name(rank: int) -> str:
    return "trainer.pt" if rank == 0 else f"trainer-rank{rank}.pt"


def save_resume(
    fingerprint: str,
    step: int,
    trainer: GRPOTrainer,
    sampler: QuestionSampler,
    history: list[dict],
    log_rows: list[dict],
    barrier: Callable[[], None] | None = None,
    run_dir: Path = RUN_DIR,
) -> None:
    """Everything but the weights (run_dir/step-N has those) to continue after `step`.

    Every process calls it. With one process or DDP every process holds the same state and the
    main one writes it (trainer.pt). Under DeepSpeed each holds only its shard of the optimizer
    state: the others write theirs to run_dir/resume.shards (trainer-rank{r}.pt, each
    atomically), and once all are written (`barrier`) the main process moves them beside its
    own (trainer.pt) and state.json into the new resume state, which replaces the last one in
    one rename: a kill at any point leaves the last complete state (the processes share the
    file system)."""
    shards = run_dir / "resume.shards"
    parallel = trainer.parallel
    sharded = parallel.sharded
    if sharded:
        if barrier is None and parallel.world > 1:
            raise ValueError("save_resume under DeepSpeed needs the barrier: shards come first")
        state = trainer.state_dict()  # every process, in step
        if parallel.rank != 0:
            with atomic_path(shards / _shard_name(parallel.rank)) as tmp:
                torch.save(state, tmp)
        if barrier is not None:
            barrier()
    if parallel.rank != 0:
        return
    if not sharded:
        state = trainer.state_dict()
    with atomic_path(run_dir / "resume") as tmp:
        tmp.mkdir()
        torch.save(state, tmp / "trainer.pt")
        for rank in range(1, parallel.world if sharded else 1):
            (shards / _shard_name(rank)).rename(tmp / _shard_name(rank))
        record = {
            "fingerprint": fingerprint,
            "step": step,
            "world": parallel.world,
            "sharded": sharded,
            "sampler": sampler.state_dict(),
            "history": history,
            "log_rows": log_rows,
        }
        (tmp / "state.json").write_text(json.dumps(record))


def load_resume(
    fingerprint: str, clean: bool = True, rank: int = 0, run_dir: Path = RUN_DIR
) -> dict | None:
    """The state of a stopped run with this fingerprint, or None (a fresh run: any other
    run's leftovers are removed, unless `clean` is false: a process other than the main one
    only reads, after the main one). `rank`: this process, whose shard of a DeepSpeed state
    ("trainer") it reads."""
    resume = run_dir / "resume"
    state_file = resume / "state.json"
    if state_file.exists():
        state = json.loads(state_file.read_text())
        sharded = state.get("sharded", False)
        shards = [resume / _shard_name(r) for r in range(state.get("world", 1) if sharded else 1)]
        if state["fingerprint"] == fingerprint and all(f.exists() for f in shards):
            path = resume / _shard_name(rank if sharded else 0)
            allowed = zero_state_globals() if sharded else []
            with torch.serialization.safe_globals(allowed):
                # On the CPU: the optimizer moves its state to its parameters' devices.
                state["trainer"] = torch.load(path, map_location="cpu", weights_only=True)
            return state
        if clean:
            log.info(
                "%s belongs to another run (params, launch or inputs changed): starting afresh",
                run_dir,
            )
    if clean:
        shutil.rmtree(run_dir, ignore_errors=True)
    return None
