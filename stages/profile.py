"""profile: params `profile`, `train.levels`, `train.domains`, `reward.code`, `seed`,
models/base, the train split -> data/profile.parquet (per question: pass rate, confidence,
mean length, difficulty bin)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import torch

from grpo_core.analysis.difficulty import summarize_profile
from grpo_core.analysis.sampling import sample_problems
from grpo_core.config.profile import ProfileStage
from grpo_core.config.user_reward import resolve
from grpo_core.data.prompts import render_prompts
from grpo_core.data.schema import check_selection, read_problems, select_problems
from grpo_core.io import write_parquet
from grpo_core.models.loading import load_model, uses_chat
from grpo_core.models.precision import set_dtype
from stages.common import log, main

TRAIN_SPLIT = "data/prepared/train.parquet"

PROFILE_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("level", pa.int32()),
        ("samples", pa.int32()),
        ("pass_rate", pa.float64()),
        ("mean_logprob", pa.float64()),
        ("confidence", pa.float64()),
        ("mean_length", pa.float64()),
        ("bin", pa.string()),
    ]
)


def profiled_questions(
    table: pa.Table, levels: list[int], per_level: int, domains: list[str] | None = None
) -> list[dict]:
    """The first `per_level` training problems of each level in `levels` (and domain in
    `domains`, unless None), of each source, so that every domain and dataset of a mixed train
    split is profiled."""
    table = select_problems(table, levels, domains)
    out = []
    for source in dict.fromkeys(table["source"].to_pylist()):
        of_source = table.filter(pc.equal(table["source"], source))
        for level in levels:
            rows = of_source.filter(pc.equal(of_source["level"], level)).slice(0, per_level)
            out.extend(rows.to_pylist())
    return out


def profile(params: ProfileStage) -> None:
    cfg = params.profile
    levels, domains = params.train.levels, params.train.domains
    table = read_problems(TRAIN_SPLIT)
    check_selection(table, select_problems(table, levels, domains), levels, domains, TRAIN_SPLIT)
    problems = profiled_questions(table, levels, cfg.max_per_level, domains)
    model, tokenizer = load_model("models/base")
    model = set_dtype(model, cfg.dtype)
    problems = render_prompts(problems, tokenizer, uses_chat("models/base"))
    torch.manual_seed(params.seed)
    samples = sample_problems(
        model,
        tokenizer,
        problems,
        cfg,
        "profile",
        with_logprobs=True,
        code=params.reward.code,
        function=resolve(params.reward.function),
    )
    rows = summarize_profile(problems, samples)
    out = pa.Table.from_pylist(rows, schema=PROFILE_SCHEMA)
    write_parquet(out, "data/profile.parquet")
    for level in params.train.levels:
        lv = [r for r in rows if r["level"] == level]
        bins = {b: sum(r["bin"] == b for r in lv) for b in ("unsolved", "hard", "easy", "solved")}
        log.info(
            "level %d: %d questions, mean pass rate %.3f, bins %s",
            level,
            len(lv),
            sum(r["pass_rate"] for r in lv) / max(len(lv), 1),
            bins,
        )


if __name__ == "__main__":
    main(profile, ProfileStage)
