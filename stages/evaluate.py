"""evaluate: params `eval`, `reward.code`, `seed`, models/base, models/policy, the eval split
and its sources -> metrics/eval.json (with each real benchmark's provenance and licence),
metrics/eval_by_level.csv (plot), data/eval_samples.parquet (every sampled and greedy
completion with its reward)"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow as pa

from grpo_core.analysis.evaluation import format_table, sample_model, summarize
from grpo_core.config.eval import EvaluateStage
from grpo_core.data.schema import read_problems
from grpo_core.io import atomic_path, digest, write_json, write_parquet
from grpo_core.models.loading import require_model
from stages.common import main

MODELS = {"base": "models/base", "policy": "models/policy"}
EVAL_SET = "data/prepared/eval.parquet"
SOURCES = "data/prepared/sources.json"


def provenance() -> dict[str, str]:
    """What this evaluation ran on, by content (`grpo_core.io.digest`): the base model, the
    policy and the eval set. Two runs' accuracies are comparable only on the same `base` and
    `eval_set`: the tiny base is rebuilt by every machine that runs `base`, and it moves
    between machines (`stages.compare` reads these; `dvc metrics diff` prints them when they
    differ)."""
    return {
        "base": digest(MODELS["base"]),
        "policy": digest(MODELS["policy"]),
        "eval_set": digest(EVAL_SET),
    }


def evaluate(params: EvaluateStage) -> None:
    cfg = params.eval
    problems = read_problems(EVAL_SET).to_pylist()
    for path in MODELS.values():
        require_model(path)  # both before sampling either
    samples: list[dict] = []
    metrics: dict[str, dict] = {}
    for name, path in MODELS.items():
        sampled, greedy = sample_model(path, problems, params, name)
        samples.extend(sampled + greedy)
        metrics[name] = summarize(sampled, cfg.pass_at, greedy)

    levels = sorted({p["level"] for p in problems})
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["source", "level", "series", "accuracy"])  # long: series = the model
    for source in sorted(set(metrics["base"]) - {"by_domain"}):
        for m in MODELS:
            for level in levels:
                key = f"level{level}"
                if key in metrics[m][source]:
                    writer.writerow([source, level, m, round(metrics[m][source][key], 4)])
    with atomic_path("metrics/eval_by_level.csv") as tmp:
        tmp.write_text(buf.getvalue())
    sources = json.loads(Path(SOURCES).read_text())[
        "eval"
    ]  # the real benchmarks: where, and under which licence
    write_json({**metrics, "provenance": provenance(), "benchmarks": sources}, "metrics/eval.json")
    write_parquet(pa.Table.from_pylist(samples), "data/eval_samples.parquet")
    print(format_table(metrics))


if __name__ == "__main__":
    main(evaluate, EvaluateStage)
