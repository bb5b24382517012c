"""train: params `algo`, `train`, `seed`, models/base, the train split, data/profile.parquet
(curricula), data/guides.parquet (OC-GRPO fixed) -> models/policy/ (HF directory, LoRA merged,
with the resolved train params in grpo_lab.json), checkpoints/step-N/ (weights every
`train.checkpoint_every` steps and at the end), metrics/train/ (dvclive),
data/rollouts.parquet (one row per question per step)

With `launch` naming an accelerate config of more than one process, the stage relaunches
itself through `accelerate launch`; every process trains its share, and only the main one
writes files (the others wait at barriers), except under DeepSpeed ZeRO, where each process
also writes its shard of the optimizer state into the resume state."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
import yaml
from dvclive import Live
from safetensors.torch import load_file

from grpo_core.analysis.difficulty import CURRICULA
from grpo_core.config.launch import launch_config
from grpo_core.config.train import TrainStage
from grpo_core.data.prompts import render_prompt
from grpo_core.data.schema import read_problems, select_problems
from grpo_core.errors import InputError
from grpo_core.io import atomic_path, write_json, write_parquet
from grpo_core.models.loading import load_model, uses_chat
from grpo_core.rollout.backends import VLLMBackend
from grpo_core.training.distributed import make_accelerator, zero_state_globals
from grpo_core.training.trainer import GRPOTrainer, Question, QuestionSampler, add_lora, run
from stages.common import log, main

# data/rollouts.parquet: one row per question per step (GRPOTrainer._log_rows).
ROLLOUT_LOG = pa.schema(
    [
        ("step", pa.int32()),
        ("id", pa.string()),
        ("level", pa.int32()),
        ("reward_mean", pa.float64()),
        ("reward_std", pa.float64()),
        ("mean_length", pa.float64()),
        ("confidence", pa.float64()),  # exp(mean token log-prob of the group), pi_old
        ("difficulty", pa.float64()),  # 1 - group accuracy
        ("value", pa.float64()),  # CoDaPO value; null for other algorithms
        ("adv_abs_mean", pa.float64()),  # mean |advantage| over the group (after weighting)
        ("logp_correct", pa.float64()),  # mean token log-prob of correct rollouts; null if none
        ("logp_incorrect", pa.float64()),
        ("guided", pa.bool_()),  # OC-GRPO: the group was re-rolled with a guide prefix
        ("guide_fraction", pa.float64()),
        ("resampled", pa.bool_()),  # CoDaPO: the question was repeated from the last step
        ("trained", pa.bool_()),  # the group entered the loss
        # Per completion token of the group, over the step's optimizer updates: the coefficient
        # the loss put on grad log pi (advantage x ratio x clip mask x CoDaPO / OC-GRPO weight),
        # its absolute value, and the fraction of tokens clipped; null if not trained.
        ("update_weight_abs", pa.float64()),
        ("update_weight_mean", pa.float64()),
        ("clip_frac", pa.float64()),
    ]
)
CHECKPOINTS = Path("checkpoints")
# What the run reads (with the params): a resume state is valid only for the same inputs.
TRAIN_INPUTS = [
    "models/base",
    "data/prepared/train.parquet",
    "data/profile.parquet",
    "data/guides.parquet",
]
# A run in progress: its checkpoints and, at each, what resuming needs. A killed run leaves it
# here (DVC removes a stage's outputs before rerunning it, but not this), and the next run with
# the same params and inputs continues from it. On success its checkpoints move to checkpoints/.
RUN_DIR = Path(".grpo_lab/train")
# Under DeepSpeed: where each process other than the main one writes its shard of the trainer
# state before the main process moves them all into the new resume state (save_resume).
SHARDS = RUN_DIR / "resume.shards"


def checkpoint_dir(root: Path, step: int) -> Path:
    """root/step-000010: the policy after `step` RL steps."""
    return root / f"step-{step:06d}"


def save_checkpoint(policy, step: int) -> None:
    """The policy's weights after `step` steps: the whole model, or with LoRA the adapters
    only (peft's format; `dynamics` merges B @ A itself), written atomically."""
    with atomic_path(checkpoint_dir(RUN_DIR, step)) as tmp:
        policy.save_pretrained(tmp)


def load_checkpoint(policy, directory: Path) -> None:
    """Weights saved by `save_checkpoint` back into `policy` (built as the run built it)."""
    if (directory / "adapter_model.safetensors").exists():
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(policy, load_file(directory / "adapter_model.safetensors"))
        return
    index = directory / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values()))
        if index.exists()
        else ["model.safetensors"]
    )
    missing = {k for k in policy.state_dict()}
    for name in files:  # one shard at a time
        shard = load_file(directory / name)
        _, unexpected = policy.load_state_dict(shard, strict=False)
        if unexpected:
            raise InputError(f"{directory / name}: tensors the model lacks: {unexpected}")
        missing -= set(shard)
    tied = {"lm_head.weight"} if policy.config.tie_word_embeddings else set()
    if missing - tied:
        raise InputError(f"{directory}: no weights for {sorted(missing - tied)}")


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


def save_resume(fingerprint: str, step: int, trainer, sampler, history, log_rows, barrier=None):
    """Everything but the weights (checkpoints/step-N has those) to continue after `step`.

    Every process calls it. With one process or DDP every process holds the same state and the
    main one writes it (trainer.pt). Under DeepSpeed each holds only its shard of the optimizer
    state: the others write theirs to SHARDS (trainer-rank{r}.pt, each atomically), and once
    all are written (`barrier`) the main process moves them beside its own (trainer.pt) and
    state.json into the new resume state, which replaces the last one in one rename: a kill
    at any point leaves the last complete state (the processes share the file system)."""
    sharded = trainer.deepspeed
    if sharded:
        if barrier is None and trainer.world > 1:
            raise ValueError("save_resume under DeepSpeed needs the barrier: shards come first")
        state = trainer.state_dict()  # every process, in step
        if trainer.rank != 0:
            with atomic_path(SHARDS / _shard_name(trainer.rank)) as tmp:
                torch.save(state, tmp)
        if barrier is not None:
            barrier()
    if trainer.rank != 0:
        return
    if not sharded:
        state = trainer.state_dict()
    with atomic_path(RUN_DIR / "resume") as tmp:
        tmp.mkdir()
        torch.save(state, tmp / "trainer.pt")
        for rank in range(1, trainer.world if sharded else 1):
            (SHARDS / _shard_name(rank)).rename(tmp / _shard_name(rank))
        record = {
            "fingerprint": fingerprint,
            "step": step,
            "world": trainer.world,
            "sharded": sharded,
            "sampler": sampler.state_dict(),
            "history": history,
            "log_rows": log_rows,
        }
        (tmp / "state.json").write_text(json.dumps(record))


def load_resume(fingerprint: str, clean: bool = True, rank: int = 0) -> dict | None:
    """The state of a stopped run with this fingerprint, or None (a fresh run: any other
    run's leftovers are removed, unless `clean` is false: a process other than the main one
    only reads, after the main one). `rank`: this process, whose shard of a DeepSpeed state
    ("trainer") it reads."""
    resume = RUN_DIR / "resume"
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
                RUN_DIR,
            )
    if clean:
        shutil.rmtree(RUN_DIR, ignore_errors=True)
    return None


def publish_checkpoints() -> None:
    """Move the finished run's checkpoints to checkpoints/ (the DVC output) in one rename."""
    shutil.rmtree(RUN_DIR / "resume", ignore_errors=True)  # a rerun must not resume a finished run
    with atomic_path(CHECKPOINTS) as tmp:
        tmp.mkdir()
        for step_dir in sorted(RUN_DIR.glob("step-*")):
            step_dir.rename(tmp / step_dir.name)
    shutil.rmtree(RUN_DIR, ignore_errors=True)


def training_questions(params: TrainStage) -> list[Question]:
    """The questions of `train.levels` and `train.domains`, narrowed by `train.curriculum`
    (from the profile),
    with their reference solutions and, for OC-GRPO's fixed mode, their guide fractions."""
    cfg = params.train
    table = read_problems("data/prepared/train.parquet")
    table = select_problems(table, cfg.levels, cfg.domains)
    if cfg.curriculum != "all":
        profile = pq.read_table("data/profile.parquet", columns=["id", "bin"])
        ids = profile.filter(pc.is_in(profile["bin"], pa.array(CURRICULA[cfg.curriculum])))
        table = table.filter(pc.is_in(table["id"], ids["id"]))
    guides = {}
    if cfg.oc_grpo.mode == "fixed":
        rows = pq.read_table("data/guides.parquet", columns=["id", "fraction"]).to_pylist()
        guides = {r["id"]: r["fraction"] for r in rows if r["fraction"] is not None}
    columns = ["id", "domain", "level", "prompt", "answer", "solution"]
    questions = [
        Question(**r, guide_fraction=guides.get(r["id"])) for r in table.select(columns).to_pylist()
    ]
    if not questions:
        raise InputError(
            f"train.levels={cfg.levels}, train.domains={cfg.domains}, "
            f"train.curriculum={cfg.curriculum!r}: no training problems (a curriculum other "
            "than 'all' draws from data/profile.parquet only)"
        )
    log.info(
        "%d training questions at levels %s (curriculum %s, %d with a guide)",
        len(questions),
        cfg.levels,
        cfg.curriculum,
        len(guides),
    )
    return questions


def render_questions(questions: list[Question], tokenizer, chat: bool) -> list[Question]:
    """Questions whose prompts went through the chat template where the model takes one."""
    if not chat:
        return questions
    return [
        dataclasses.replace(q, prompt=render_prompt(tokenizer, q.prompt, chat)) for q in questions
    ]


def launch_processes(params: TrainStage) -> int:
    """How many processes `launch` names (its accelerate config's num_processes)."""
    path = launch_config(params.launch)
    config = yaml.safe_load(path.read_text()) or {}
    n = config.get("num_processes", 1)
    if not isinstance(n, int) or n < 1:
        raise InputError(f"launch={params.launch!r}: {path}: num_processes must be >= 1, got {n!r}")
    return n


def in_launched_process() -> bool:
    """Started by `accelerate launch` / torchrun (which set these), not by dvc or a user."""
    return "RANK" in os.environ or "LOCAL_RANK" in os.environ


def relaunch(params: TrainStage) -> int:
    """Run this stage again under `accelerate launch` with the `launch` config; its exit
    status."""
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(launch_config(params.launch)),
        "-m",
        "stages.train",
        *sys.argv[1:],
    ]
    log.info("launching %d processes: %s", launch_processes(params), " ".join(cmd))
    return subprocess.run(cmd, check=False).returncode


def train(params: TrainStage) -> None:
    if launch_processes(params) > 1 and not in_launched_process():
        training_questions(params)  # a missing input fails here, once, before any launch
        code = relaunch(params)
        if code:
            sys.exit(code)
        return
    accelerator = None
    if in_launched_process():
        # DDP or DeepSpeed ZeRO; with no GPU visible (configs/accelerate/*_cpu2.yaml hide
        # them), over gloo.
        accelerator = make_accelerator()
    main_process = accelerator is None or accelerator.is_main_process

    def barrier() -> None:
        if accelerator is not None:
            accelerator.wait_for_everyone()

    cfg = params.train
    questions = training_questions(params)
    policy, tokenizer = load_model("models/base")
    questions = render_questions(questions, tokenizer, uses_chat("models/base"))
    reference = None
    if cfg.lora.enabled:
        policy = add_lora(policy, cfg.lora)
    elif cfg.kl_coef > 0:
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
    fingerprint = run_fingerprint(params, TRAIN_INPUTS)
    # The main process reads the resume state and removes another run's leftovers; then the
    # others read what it left.
    resume = load_resume(fingerprint) if main_process else None
    barrier()
    if not main_process:
        resume = load_resume(fingerprint, clean=False, rank=accelerator.process_index)
    sampler = QuestionSampler(len(questions), params.seed)
    history: list[dict] = []  # step metrics
    log_rows: list[dict] = []
    start = 0
    if resume is not None:
        start = resume["step"]
        load_checkpoint(policy, checkpoint_dir(RUN_DIR, start))
        sampler.load_state_dict(resume["sampler"])
        history, log_rows = resume["history"], resume["log_rows"]
        log.info("resuming from step %d of %d (%s)", start, cfg.steps, RUN_DIR)
    # Built after the resumed weights are in: preparing broadcasts them from the main process.
    backend = None
    if cfg.rollout_backend == "vllm":  # synced from the policy before the first rollout
        backend = VLLMBackend(
            "models/base",
            tokenizer,
            gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
            seed=params.seed,
        )
    trainer = GRPOTrainer(
        policy,
        tokenizer,
        cfg,
        reference=reference,
        reward=params.reward,
        accelerator=accelerator,
        backend=backend,
    )
    if resume is not None:
        trainer.load_state_dict(resume["trainer"], questions)

    # Step metrics go to metrics/train (declared as metrics and plots in dvc.yaml); dvclive
    # must not write dvc.yaml or make experiments of its own inside a DVC stage.
    live_or_none = (
        Live(dir="metrics/train", save_dvc_exp=False, dvcyaml=None)
        if main_process
        else contextlib.nullcontext()
    )
    with live_or_none as live:

        def log_step(metrics: dict[str, float]) -> None:
            if live is None:
                return
            for name, value in metrics.items():
                live.log_metric(name, value)
            live.next_step()

        for metrics in history:  # a resumed run's curves start at step 0 too
            log_step(metrics)

        def on_step(step: int, metrics: dict[str, float], rows: list[dict]) -> None:
            log_step(metrics)
            history.append(metrics)
            log_rows.extend({"step": step, **row} for row in rows)
            done = step + 1
            if done % cfg.checkpoint_every == 0 or done == cfg.steps:
                # Every process holds the same weights: the main one writes them; and the same
                # trainer state but under DeepSpeed, where each writes its shard.
                if main_process:
                    save_checkpoint(policy, done)
                save_resume(fingerprint, done, trainer, sampler, history, log_rows, barrier)
                barrier()

        run(trainer, questions, cfg.steps, params.seed, on_step, sampler=sampler, start=start)

    if not main_process:
        barrier()  # the main process writes the outputs
        return
    if cfg.lora.enabled:
        policy = policy.merge_and_unload()
    with atomic_path("models/policy") as tmp:
        policy.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        # The train params after the algo preset was applied: what this policy was trained with.
        record = {
            "algo": params.algo,
            "train": cfg.model_dump(),
            "reward": params.reward.model_dump(),
            "chat": uses_chat("models/base"),
        }
        write_json(record, tmp / "grpo_lab.json")
    write_parquet(pa.Table.from_pylist(log_rows, schema=ROLLOUT_LOG), "data/rollouts.parquet")
    publish_checkpoints()
    barrier()


if __name__ == "__main__":
    main(train, TrainStage)
