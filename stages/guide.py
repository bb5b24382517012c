"""guide: params `guide`, `reward.code`, `seed`, models/base, data/profile.parquet, the train
split -> data/guides.parquet (for each profiled question the base never solved: the smallest
hint fraction that unlocks it, or null).

A hint is a prefix of the reference solution in the prompt, Off-Context GRPO's guided prompt x~
(`hinted_prompt`, rendered for the base's chat flag); the base writes the whole response and is
rewarded on it alone. A question is unlocked at a fraction when one of `guide.samples`
responses is correct."""

from __future__ import annotations

import pyarrow as pa
import torch

from grpo_core.analysis.guides import find_guides
from grpo_core.config.guide import GuideStage
from grpo_core.config.user_reward import resolve
from grpo_core.data.schema import read_problems
from grpo_core.io import read_stage_output, write_parquet
from grpo_core.models.loading import load_model, uses_chat
from grpo_core.models.precision import set_dtype
from stages.common import log, main

GUIDE_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("level", pa.int32()),
        ("fraction", pa.float64()),  # null: no fraction unlocked the question
        ("pass_rate", pa.float64()),  # at that fraction
        ("tried", pa.list_(pa.float64())),
    ]
)


def guide(params: GuideStage) -> None:
    profile = read_stage_output("data/profile.parquet", ["id", "bin"], "profile").to_pylist()
    unsolved = {r["id"] for r in profile if r["bin"] == "unsolved"}
    train = read_problems("data/prepared/train.parquet").to_pylist()
    problems = [p for p in train if p["id"] in unsolved]
    rows: list[dict] = []
    if problems:
        model, tokenizer = load_model("models/base")
        model = set_dtype(model, params.guide.dtype)
        chat = uses_chat("models/base")
        torch.manual_seed(params.seed)
        # unrendered problems: find_guides adds the hint to each prompt, then renders it
        rows = find_guides(
            model,
            tokenizer,
            problems,
            params.guide,
            chat=chat,
            code=params.reward.code,
            function=resolve(params.reward.function),
        )
    write_parquet(pa.Table.from_pylist(rows, schema=GUIDE_SCHEMA), "data/guides.parquet")
    found = [r["fraction"] for r in rows if r["fraction"] is not None]
    log.info(
        "%d unsolved questions; %d unlocked, by fraction: %s",
        len(rows),
        len(found),
        {f: found.count(f) for f in params.guide.fractions},
    )


if __name__ == "__main__":
    main(guide, GuideStage)
