"""The worked example of docs/algorithms.md#off-context-grpo: one tiny-world problem, its
unguided prompt x, its guided prompt x~, a response y sampled from x~ by models/base, and the
importance weight of each token of y.

    python scripts/oc_example.py [--id arith-train-L5-00007] [--fraction 0.6] [--seed 0]

Reads models/base and data/prepared/train.parquet (run `dvc repro base` first). Prints markdown.
"""

from __future__ import annotations

import argparse

import pyarrow.parquet as pq
import torch

from grpo_core.algorithms.offcontext import importance_weights
from grpo_core.data.prompts import hinted_prompt
from grpo_core.models.loading import load_model
from grpo_core.rewards.verify import verify_batch
from grpo_core.rollout.sampler import generate
from grpo_core.rollout.scoring import score_rollouts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--id", default="arith-train-L5-00007")
    ap.add_argument("--fraction", type=float, default=0.6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--samples", type=int, default=16, help="draws; the correct one with the lowest w is shown"
    )
    args = ap.parse_args()
    rows = pq.read_table("data/prepared/train.parquet").to_pylist()
    problem = next(r for r in rows if r["id"] == args.id)
    model, tok = load_model("models/base")
    x = problem["prompt"]
    x_hint = hinted_prompt(x, problem["solution"], args.fraction)
    torch.manual_seed(args.seed)
    ro = generate(model, tok, [x_hint], args.samples, 1.0, 72)
    n = args.samples
    rewards = verify_batch([problem["domain"]] * n, ro.texts, [problem["answer"]] * n)
    logp_hint, _ = score_rollouts(model, ro, 1.0, n)
    ctx = tok(x, add_special_tokens=False)["input_ids"]
    weights = []
    for i in range(n):  # log pi(y|x) from one plain forward of [x | y] per sample
        ids = ro.completion_ids[i][ro.completion_mask[i].bool()].tolist()
        with torch.no_grad():
            logits = model(torch.tensor([ctx + ids])).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        logp_x = torch.stack([lp[len(ctx) - 1 + j, t] for j, t in enumerate(ids)])
        w = importance_weights(logp_x, logp_hint[i, : len(ids)])
        weights.append((ids, logp_x, w))
    # shown: the correct sample whose weights fall lowest (the first sample if none is correct)
    correct = [i for i in range(n) if rewards[i] == 1.0] or [0]
    row = min(correct, key=lambda i: float(weights[i][2].min()))
    ids, logp_x, w = weights[row]
    logp_hint = logp_hint[row : row + 1]
    logp_x = logp_x.unsqueeze(0)
    show = lambda s: s.replace("\n", "\\n")  # noqa: E731
    print(f"x  = `{show(x)}`\n\nx~ = `{show(x_hint)}`  (fraction {args.fraction})\n")
    print(f"y  = `{show(ro.texts[row])}`  (reward {rewards[row]:.0f}, sample {row} of {n})\n")
    print("| token | p(y_t given x~) | p(y_t given x) | w_t |\n|---|---|---|---|")
    for j, t in enumerate(ids):
        text = show(tok.decode([t])) or "EOS"
        p_h, p_x = float(logp_hint[0, j].exp()), float(logp_x[0, j].exp())
        print(f"| `{text}` | {p_h:.3f} | {p_x:.3f} | {float(w[j]):.3f} |")
    print(
        f"\nmean w over y: {float(w.mean()):.3f}; "
        f"at the floor 0.01: {int((w <= 0.01).sum())} of {len(ids)}"
    )


if __name__ == "__main__":
    main()
