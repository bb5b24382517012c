"""train: params `algo`, `train`, `seed`, models/base, the train split, data/profile.parquet
(curricula), data/guides.parquet (OC-GRPO fixed) -> models/policy/ (HF directory, LoRA merged,
with the resolved train params in grpo_lab.json), metrics/train/ (dvclive),
data/rollouts.parquet (one row per question per step)"""

from __future__ import annotations

import copy
import dataclasses

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from dvclive import Live

from grpo_core.config import Params
from grpo_core.difficulty import CURRICULA
from grpo_core.errors import InputError
from grpo_core.io import atomic_path, write_json, write_parquet
from grpo_core.models import load_model, uses_chat
from grpo_core.prompts import render_prompt
from grpo_core.schema import read_problems, select_problems
from grpo_core.trainer import GRPOTrainer, Question, add_lora, run
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
    ]
)


def training_questions(params: Params) -> list[Question]:
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


def train(params: Params) -> None:
    cfg = params.train
    questions = training_questions(params)
    policy, tokenizer = load_model("models/base")
    questions = render_questions(questions, tokenizer, uses_chat("models/base"))
    reference = None
    if cfg.lora.enabled:
        policy = add_lora(policy, cfg.lora)
    elif cfg.kl_coef > 0:
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
    trainer = GRPOTrainer(policy, tokenizer, cfg, reference=reference, reward=params.reward)

    log_rows: list[dict] = []
    # Step metrics go to metrics/train (declared as metrics and plots in dvc.yaml); dvclive
    # must not write dvc.yaml or make experiments of its own inside a DVC stage.
    with Live(dir="metrics/train", save_dvc_exp=False, dvcyaml=None) as live:

        def on_step(step: int, metrics: dict[str, float], rows: list[dict]) -> None:
            for name, value in metrics.items():
                live.log_metric(name, value)
            live.next_step()
            log_rows.extend({"step": step, **row} for row in rows)

        run(trainer, questions, cfg.steps, params.seed, on_step=on_step)

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


if __name__ == "__main__":
    main(train)
