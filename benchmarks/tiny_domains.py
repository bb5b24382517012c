"""Learnability calibration of the `mcq` and `code` tiny worlds: is there a level ladder?

    python -m benchmarks.tiny_domains [--steps 350] [--batch-size 64] [--n-eval 30]

Builds the default tiny model (`TinyModelParams()`) on a character tokenizer of the train
split of both domains, warm-starts it by SFT on their mix (levels weighted as the default
`model.sft.level_weights`), then decodes greedily `--n-eval` eval questions per level and
domain and prints accuracy per level: mcq is right when the last `Answer: X` names the gold
letter; code when the program passes every hidden test (the mean fraction of tests passed is
printed too). One CPU thread, so the numbers are comparable between runs on a shared machine.
The last line printed is JSON.

350 steps (about 4 minutes) is where the domains start to be learned, so the numbers move a
lot with small changes (code L1-L5 measured 100/93/90/43/7% and 90/20/7/3/0% in two runs whose
only difference was the mcq prompt format): read them as "learnable or not", and give the
pipeline's SFT more steps than arith alone needs when these domains join the mix.

Completions are scored by the pipeline's own verifiers (`grpo_core.rewards.verify.verify_batch`:
programs run in the sandbox).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from grpo_core.config.model import SFTParams, TinyModelParams
from grpo_core.data.prompts import guide_wording
from grpo_core.data.tiny import code, mcq
from grpo_core.models.sft import warm_start
from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model
from grpo_core.rewards.verify import verify_batch

DOMAINS = {"mcq": mcq.generate_level, "code": code.generate_level}
LEVELS = [1, 2, 3, 4, 5]


def working(text: str) -> list[str]:
    """An mcq completion's digit lines: all but its last two (placing step, letter)."""
    return text.split("\n")[:-2]


@torch.no_grad()
def greedy(model, tokenizer, prompts: list[str], max_new_tokens: int, batch: int) -> list[str]:
    out = []
    for start in range(0, len(prompts), batch):
        enc = tokenizer(
            prompts[start : start + batch],
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
        )
        ids = model.generate(
            **enc,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        out += tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=350)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--n-train", type=int, default=2000, help="train rows per level and domain")
    ap.add_argument("--n-eval", type=int, default=30, help="eval questions per level and domain")
    ap.add_argument("--max-new-tokens", type=int, default=72)
    ap.add_argument("--domains", nargs="+", default=list(DOMAINS), choices=DOMAINS)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)

    train, evals = [], []
    for domain in args.domains:
        for level in LEVELS:
            rows = DOMAINS[domain](level, args.n_train, args.n_eval, args.seed)
            train += rows["train"]
            evals += rows["eval"]
    prompts = [r["prompt"] for r in train]
    targets = [r["solution"] for r in train]
    tokenizer = build_char_tokenizer(prompts + targets + guide_wording(prompts))
    model = build_tiny_model(tokenizer, TinyModelParams(), args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tiny model: {n_params} parameters, vocabulary {len(tokenizer)}", flush=True)

    sft = SFTParams(steps=args.steps, batch_size=args.batch_size, lr=args.lr, stop=None)
    t0 = time.perf_counter()
    losses = warm_start(
        model, tokenizer, prompts, targets, np.array([r["level"] for r in train]), sft, args.seed
    ).losses
    sft_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    texts = greedy(model, tokenizer, [r["prompt"] for r in evals], args.max_new_tokens, 150)
    gen_s = time.perf_counter() - t0

    result: dict = {
        "steps": args.steps,
        "batch_size": args.batch_size,
        "sft_s": round(sft_s, 1),
        "s_per_step": round(sft_s / max(args.steps, 1), 3),
        "final_loss": round(float(np.mean(losses[-10:])), 4) if losses else None,
        "generate_s": round(gen_s, 1),
    }
    for domain in args.domains:
        acc, partial, exact, work = {}, {}, {}, {}
        for level in LEVELS:
            pairs = [
                (t, r)
                for t, r in zip(texts, evals, strict=True)
                if r["source"] == domain and r["level"] == level
            ]
            # The pipeline's own verifiers: mcq letters, and programs in the sandbox.
            scores = verify_batch(
                [r["domain"] for _, r in pairs],
                [t for t, _ in pairs],
                [r["answer"] for _, r in pairs],
            )
            if domain == "code":
                partial[level] = round(float(np.mean(scores)), 3)
            acc[level] = round(float(np.mean([s == 1.0 for s in scores])), 3)
            exact[level] = round(float(np.mean([t == r["solution"] for t, r in pairs])), 3)
            if domain == "mcq":  # the digit-by-digit working alone, before placing and letter
                work[level] = round(
                    float(np.mean([working(t) == working(r["solution"]) for t, r in pairs])), 3
                )
        result[domain] = acc
        result[f"{domain}_exact"] = exact
        print(f"{domain}: accuracy by level {acc}")
        print(f"{domain}: completion == reference solution {exact}")
        if partial:
            print(f"{domain}: mean fraction of tests passed {partial}")
        if work:
            result[f"{domain}_working"] = work
            print(f"{domain}: digit working right {work}")
        sample = next((t, r) for t, r in zip(texts, evals, strict=True) if r["source"] == domain)
        print(f"{domain} sample: {sample[1]['prompt']!r} -> {sample[0]!r}")
        if partial:
            result[f"{domain}_tests_passed"] = partial
    print(json.dumps(result))


if __name__ == "__main__":
    main()
