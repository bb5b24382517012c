"""evaluate: params `eval`, `reward.code`, `seed`, models/base, models/policy, the eval split
-> metrics/eval.json, metrics/eval_by_level.csv (plot), data/eval_samples.parquet (every
sampled and greedy completion with its reward)"""

from __future__ import annotations

import csv
import io

import pyarrow as pa
import torch

from grpo_core.analysis.evaluation import summarize
from grpo_core.analysis.sampling import sample_problems
from grpo_core.config.eval import EvaluateStage
from grpo_core.data.prompts import render_prompts
from grpo_core.data.schema import read_problems
from grpo_core.io import atomic_path, write_json, write_parquet
from grpo_core.models.loading import load_model, uses_chat
from stages.common import log, main

MODELS = {"base": "models/base", "policy": "models/policy"}


def sample_model(
    path: str, problems: list[dict], params: EvaluateStage, name: str
) -> tuple[list[dict], list[dict]]:
    """Sampled rows (`eval.samples` per question) and greedy rows (one per question, if
    `eval.greedy`) of one model, each with its problem's id, source, domain and level."""
    cfg, code = params.eval, params.reward.code
    model, tokenizer = load_model(path)
    problems = render_prompts(problems, tokenizer, uses_chat(path))
    torch.manual_seed(params.eval_seed)
    runs = {"sampled": False, "greedy": True} if cfg.greedy else {"sampled": False}
    out: dict[str, list[dict]] = {}
    for run, greedy in runs.items():
        rows = sample_problems(
            model, tokenizer, problems, cfg, f"eval {name} {run}", code=code, greedy=greedy
        )
        out[run] = [
            {
                "model": name,
                "decoding": run,
                **{k: problems[r["index"]][k] for k in ("id", "source", "domain", "level")},
                **{k: v for k, v in r.items() if k != "index"},
            }
            for r in rows
        ]
    return out["sampled"], out.get("greedy", [])


def evaluate(params: EvaluateStage) -> None:
    cfg = params.eval
    problems = read_problems("data/prepared/eval.parquet").to_pylist()
    samples: list[dict] = []
    metrics: dict[str, dict] = {}
    for name, path in MODELS.items():
        sampled, greedy = sample_model(path, problems, params, name)
        samples.extend(sampled + greedy)
        metrics[name] = summarize(sampled, cfg.pass_at, greedy)
        log.info("%s: %s", name, metrics[name])

    levels = sorted({p["level"] for p in problems})
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["source", "level", *MODELS])
    for source in sorted(set(metrics["base"]) - {"by_domain"}):
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
    main(evaluate, EvaluateStage)
