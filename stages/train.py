"""train: params `algo`, `train`, `seed`, models/base, the train split, data/profile.parquet
(curricula), data/guides.parquet (OC-GRPO fixed) -> models/policy/ (HF directory, LoRA merged,
with the resolved train params in grpo_lab.json), checkpoints/step-N/ (weights every
`train.checkpoint_every` steps and at the end), metrics/train/ (dvclive step metrics),
metrics/train.json (the run's summary: steps, rollouts, time, recent means, and the warnings of
a run that cannot learn), data/rollouts.parquet (one row per question per step)

With `launch` naming an accelerate config of more than one process, the stage relaunches
itself through `accelerate launch`; every process trains its share, and only the main one
writes files (the others wait at barriers), except under DeepSpeed ZeRO, where each process
also writes its shard of the optimizer state into the resume state."""

from __future__ import annotations

import sys

import pyarrow as pa
import torch

from grpo_core.config.train import TrainStage
from grpo_core.io import atomic_path, digest, write_json, write_parquet
from grpo_core.models.loading import load_model, uses_chat
from grpo_core.models.precision import set_dtype
from grpo_core.training.checkpoints import publish_checkpoints
from grpo_core.training.launch import in_launched_process, launch_processes, relaunch
from grpo_core.training.lora import add_lora
from grpo_core.training.parallel import data_parallel, make_accelerator
from grpo_core.training.questions import render_questions, training_questions
from grpo_core.training.rollout_log import ROLLOUT_LOG
from grpo_core.training.run import BASE_MODEL, train_policy
from stages.common import main

SUMMARY = "metrics/train.json"  # the run's summary (monitor.run_summary); DVC metrics


def train(params: TrainStage) -> None:
    if launch_processes(params) > 1 and not in_launched_process():
        training_questions(params)  # a missing input fails here, once, before any launch
        code = relaunch(params, "stages.train")
        if code:
            sys.exit(code)
        return
    torch.manual_seed(params.run_seed)  # `train.seed`, when set, reseeds the run alone
    # Launched: DDP or DeepSpeed ZeRO; with no GPU visible (configs/accelerate/*_cpu2.yaml hide
    # them), over gloo.
    accelerator = make_accelerator() if in_launched_process() else None
    process = data_parallel(accelerator)
    questions = training_questions(params)
    policy, tokenizer = load_model(BASE_MODEL)
    policy = set_dtype(policy, params.train.dtype)
    questions = render_questions(questions, tokenizer, uses_chat(BASE_MODEL))
    policy, log_rows, summary = train_policy(params, policy, tokenizer, questions, accelerator)

    with process.gathered(policy):  # ZeRO-3: the weights whole, on every process
        if process.is_main:
            save_policy(params, policy, tokenizer)
    if process.is_main:  # the others wait for its outputs
        write_parquet(pa.Table.from_pylist(log_rows, schema=ROLLOUT_LOG), "data/rollouts.parquet")
        publish_checkpoints()
        write_json(summary, SUMMARY)
    process.close()


def save_policy(params: TrainStage, policy, tokenizer) -> None:
    """models/policy: the trained weights (LoRA merged), the tokenizer, and the train params
    after the algo preset was applied (what this policy was trained with). Always float32: a
    bf16 run's adapters (float32) are merged into the float32 base (`float32_policy`)."""
    if params.train.dtype != "float32":
        policy = float32_policy(policy, params)
    if params.train.lora.enabled:
        policy = policy.merge_and_unload()
    with atomic_path("models/policy") as tmp:
        policy.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {
            "algo": params.algo,
            "train": params.train.model_dump(),
            "reward": params.reward.model_dump(),
            "chat": uses_chat(BASE_MODEL),
            "base": digest(BASE_MODEL),  # the base it was trained from (grpo_core.io.digest)
        }
        write_json(record, tmp / "grpo_lab.json")


def float32_policy(policy, params: TrainStage):
    """The LoRA policy `policy` (adapters on a bf16 base) as adapters on the float32 base: the
    same adapter weights, so that merging them rounds nothing to bf16."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    adapters = get_peft_model_state_dict(policy)
    base, _ = load_model(BASE_MODEL, device=policy.device)
    float32 = add_lora(base, params.train.lora)
    set_peft_model_state_dict(float32, adapters)
    return float32


if __name__ == "__main__":
    main(train, TrainStage)
