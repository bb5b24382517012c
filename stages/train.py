"""train: params `algo`, `train`, `seed`, models/base, the train split ->
models/policy/ (HF directory, LoRA merged), metrics/train/ (dvclive), data/rollouts.parquet"""

from __future__ import annotations

import copy

import pyarrow as pa
import pyarrow.compute as pc
from dvclive import Live

from grpo_core.config import Params
from grpo_core.errors import InputError
from grpo_core.io import atomic_path, write_parquet
from grpo_core.models import load_model
from grpo_core.schema import read_problems
from grpo_core.trainer import GRPOTrainer, Question, add_lora, run
from stages.common import log, main


def train(params: Params) -> None:
    cfg = params.train
    table = read_problems("data/prepared/train.parquet")
    table = table.filter(pc.is_in(table["level"], pa.array(cfg.levels, pa.int32())))
    questions = [
        Question(r["id"], r["domain"], r["level"], r["prompt"], r["answer"])
        for r in table.select(["id", "domain", "level", "prompt", "answer"]).to_pylist()
    ]
    if not questions:
        raise InputError(f"train.levels={cfg.levels}: no training problems at these levels")
    log.info("%d training questions at levels %s", len(questions), cfg.levels)

    policy, tokenizer = load_model("models/base")
    reference = None
    if cfg.lora.enabled:
        policy = add_lora(policy, cfg.lora)
    elif cfg.kl_coef > 0:
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
    trainer = GRPOTrainer(policy, tokenizer, cfg, reference=reference)

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
    write_parquet(pa.Table.from_pylist(log_rows), "data/rollouts.parquet")


if __name__ == "__main__":
    main(train)
