"""How well a base model reads a hint: its sampled accuracy on train questions of levels 4 and 5
without a hint and with the hint at each fraction (OC-GRPO's guided prompt x~).

    python scripts/hint_probe.py [--model models/base] [--questions 128] [--samples 4]

Reads data/prepared/train.parquet. Prints, per level and fraction, avg@samples and pass@samples.
"""

from __future__ import annotations

import argparse

import numpy as np
import pyarrow.parquet as pq
import torch

from grpo_core.data.prompts import hinted_prompt
from grpo_core.models.loading import load_model
from grpo_core.rewards.verify import verify_batch
from grpo_core.rollout.sampler import generate

FRACTIONS = (None, 0.2, 0.4, 0.6, 0.8, 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="models/base")
    ap.add_argument("--questions", type=int, default=128)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--levels", type=int, nargs="+", default=[4, 5])
    args = ap.parse_args()
    model, tok = load_model(args.model)
    rows = pq.read_table("data/prepared/train.parquet").to_pylist()
    rng = np.random.default_rng(1)
    n, k = args.questions, args.samples
    print("level  hint      avg    pass")
    for level in args.levels:
        pool = [r for r in rows if r["level"] == level]
        qs = [pool[i] for i in rng.choice(len(pool), n, replace=False)]
        for f in FRACTIONS:
            prompts = [
                q["prompt"] if f is None else hinted_prompt(q["prompt"], q["solution"], f)
                for q in qs
            ]
            torch.manual_seed(0)
            ro = generate(model, tok, prompts, k, 1.0, 72)
            answers = [q["answer"] for q in qs for _ in range(k)]
            r = np.array(
                verify_batch([q["domain"] for q in qs for _ in range(k)], ro.texts, answers)
            )
            r = r.reshape(n, k)
            hint = "none" if f is None else f"{f:g}"
            print(
                f"L{level}     {hint:6s} {100 * r.mean():5.1f}  {100 * (r.max(1) > 0).mean():5.1f}"
            )


if __name__ == "__main__":
    main()
