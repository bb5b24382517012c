"""evaluate: params `eval`, `seed`, models/base, models/policy, the eval split ->
metrics/eval.json, metrics/eval_by_level.csv (plot), data/eval_samples.parquet"""

from __future__ import annotations

import csv
import io

import pyarrow as pa
import torch
from tqdm.auto import tqdm

from grpo_core.config import EvalParams, Params
from grpo_core.evaluation import summarize
from grpo_core.io import atomic_path, write_json, write_parquet
from grpo_core.models import load_model
from grpo_core.rewards import score
from grpo_core.rollout import generate
from grpo_core.schema import read_problems
from stages.common import log, main

MODELS = {"base": "models/base", "policy": "models/policy"}


def sample_model(
    path: str, problems: list[dict], cfg: EvalParams, seed: int, name: str
) -> list[dict]:
    model, tokenizer = load_model(path)
    model.eval()
    torch.manual_seed(seed)
    per_call = max(1, cfg.batch_size // cfg.samples)
    rows = []
    for start in tqdm(range(0, len(problems), per_call), desc=f"eval {name}", unit="batch"):
        chunk = problems[start : start + per_call]
        ro = generate(
            model,
            tokenizer,
            [p["prompt"] for p in chunk],
            cfg.samples,
            cfg.temperature,
            cfg.max_new_tokens,
        )
        lengths = ro.lengths.tolist()
        for i, text in enumerate(ro.texts):
            p = chunk[i // cfg.samples]
            rows.append(
                {
                    "model": name,
                    "id": p["id"],
                    "source": p["source"],
                    "domain": p["domain"],
                    "level": p["level"],
                    "sample": i % cfg.samples,
                    "completion": text,
                    "reward": score(p["domain"], text, p["answer"]),
                    "length": lengths[i],
                    "truncated": bool(ro.truncated[i]),
                }
            )
    return rows


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
