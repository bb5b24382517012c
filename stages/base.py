"""base: params `model`, `seed`, the train split -> models/base/ (an HF model directory).

`model.name: tiny` builds a character tokenizer and a small Qwen2 and warm-starts it by SFT
on the reference solutions; any other name is resolved as a local directory or a hub id and
copied, with a record of what was resolved in models/base/grpo_lab.json.
"""

from __future__ import annotations

import shutil

from transformers import AutoTokenizer

from grpo_core.config.model import BaseStage
from grpo_core.data.schema import read_problems
from grpo_core.errors import InputError
from grpo_core.io import atomic_path, write_json
from grpo_core.models.loading import resolve_model
from grpo_core.models.sft import warm_start
from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model
from stages.common import log, main

OUT = "models/base"


def base(params: BaseStage) -> None:
    cfg = params.model
    if cfg.name != "tiny":
        source, record = resolve_model(cfg.name, cfg.revision)
        if cfg.chat and not AutoTokenizer.from_pretrained(source).chat_template:
            raise InputError(f"model.chat: {cfg.name!r} has no chat template (a base model?)")
        with atomic_path(OUT) as tmp:
            shutil.copytree(source, tmp, ignore=shutil.ignore_patterns(".*"))
            write_json({**record, "chat": cfg.chat}, tmp / "grpo_lab.json")
        log.info("models/base <- %s", record)
        return
    if cfg.chat:
        raise InputError("model.chat: the tiny model has no chat template; set it to false")

    train = read_problems("data/prepared/train.parquet")
    prompts = train.column("prompt").to_pylist()
    targets = train.column("solution").to_pylist()
    levels = train.column("level").to_numpy()
    tokenizer = build_char_tokenizer(prompts + targets)
    model = build_tiny_model(tokenizer, cfg.tiny, params.seed)
    n = sum(p.numel() for p in model.parameters())
    log.info("tiny model: %d parameters, vocabulary %d", n, len(tokenizer))
    losses = warm_start(model, tokenizer, prompts, targets, levels, cfg.sft, params.seed)
    with atomic_path(OUT) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {
            "kind": "tiny",
            "parameters": n,
            "sft_steps": cfg.sft.steps,
            "sft_final_loss": losses[-1] if losses else None,
            "chat": False,
        }
        write_json(record, tmp / "grpo_lab.json")


if __name__ == "__main__":
    main(base, BaseStage)
