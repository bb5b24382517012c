"""evaluate: params `eval`, `seed`, models/base, models/policy, the eval split ->
metrics/eval.json, metrics/eval_by_level.csv (plot), data/eval_samples.parquet"""

from __future__ import annotations

import csv
import io

import pyarrow as pa
import torch

from grpo_core.config import EvalParams, Params
from grpo_core.evaluation import summarize
from grpo_core.io import atomic_path, write_json, write_parquet
from grpo_core.models import load_model
from grpo_core.sample import sample_problems
from grpo_core.schema import read_problems
from stages.common import log, main

MODELS = {"base": "models/base", "policy": "models/policy"}


def sample_model(
    path: str, problems: list[dict], cfg: EvalParams, seed: int, name: str
) -> list[dict]:
    model, tokenizer = load_model(path)
    torch.manual_seed(seed)
    rows = sample_problems(model, tokenizer, problems, cfg, f"eval {name}")
    out = []
    for r in rows:
        p = problems[r.pop("index")]
        out.append({"model": name, **{k: p[k] for k in ("id", "source", "domain", "level")}, **r})
    return out


def evaluate(params: Params) -> None:
    cfg = params.eval
    problems = read_problems("data/prepared/eval.parquet").to_pylist()
    samples: list[dict] = []
    metrics: dict[str, dict] = {}
    for name, path in MODELS.items():
        rows = sample_model(path, problems, cfg, params.seed, name)
        samples.extend(rows)
        metrics[name] = summarize(
            [r["source"] for r in rows],
            [r["level"] for r in rows],
            [r["id"] for r in rows],
            [r["reward"] for r in rows],
            cfg.pass_at,
        )
        log.info("%s: %s", name, metrics[name])

    levels = sorted({p["level"] for p in problems})
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["source", "level", *MODELS])
    for source in sorted(metrics["base"]):
        for level in levels:
            key = f"level{level}"
            if key in metrics["base"][source]:
                writer.writerow(
                    [source, level, *(round(metrics[m][source][key], 4) for m in MODELS)]
                )
    with atomic_path("metrics/eval_by_level.csv") as tmp:
        tmp.write_text(buf.getvalue())
    write_json(metrics, "metrics/eval.json")
    write_parquet(pa.Table.from_pylist(samples), "data/eval_samples.parquet")


if __name__ == "__main__":
    main(evaluate)
