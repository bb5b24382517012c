"""SmolLM2-135M-Instruct on the tiny-world domains: accuracy, format rate, length and truncation
per level, asked as the pipeline asks it (the domain's answer-format instruction) and without.

    python -m benchmarks.smollm2_profile [--questions 25] [--samples 4] [--max-new-tokens 256]
        [--temperature 1.0] [--dtype bfloat16] [--draw inverse_cdf] [--domains math mcq code]
        [--levels 1 2 3 4 5] [--prompts instructed plain] [--out FILE]

For each domain (`math` is the arith ladder) and level, `--questions` train questions of the
tiny generators (seed 0), `--samples` completions each at `--temperature`, scored by the
pipeline's verifiers (`grpo_core.analysis.sampling.sample_problems`: math-verify for math,
`Answer: X` for mcq, the sandbox for code) and its format term (`format_reward`). Two prompts:

- `instructed`: the chat template around the question worded by `chat_text`, the answer format
  asked for last (`\\boxed{}`, `Answer: X`, a function): what `model.chat: true` sends;
- `plain`: the chat template around the tiny prompt itself ("Q: 3+5=?\\nA: "): what it sent
  before `chat_text`.

A level is in the learnable band when its instructed accuracy is 10-90%: there GRPO's groups of
8 mostly have both right and wrong answers. The model is the `base` stage's conversion of the
wheel (grpo_core/models/packaged.py), in a scratch directory unless `--model` names one. Run it
alone on the machine. The last line printed is JSON; `--out` writes the table (Markdown) and
the JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.cpu_dtype import SMOLLM2, scratch_copy
from grpo_core.analysis.sampling import sample_problems
from grpo_core.config.sampling import SamplingParams
from grpo_core.data.prompts import render_prompt
from grpo_core.data.tiny import arith, code, mcq
from grpo_core.models.loading import load_model
from grpo_core.models.precision import set_dtype
from grpo_core.rewards.shaping import format_reward
from grpo_core.rewards.verify import CodeRewardConfig

GENERATORS = {"math": arith.generate_level, "mcq": mcq.generate_level, "code": code.generate_level}
LEVELS = (1, 2, 3, 4, 5)
BAND = (0.1, 0.9)


def problems(domain: str, level: int, n: int) -> list[dict]:
    return GENERATORS[domain](level, n, 0, seed=0)["train"][:n]


def profile(model, tokenizer, rows: list[dict], cfg: SamplingParams, instructed: bool, desc: str):
    """One (domain, level, prompt) cell: the completions' mean accuracy, format rate, length
    and truncation."""
    asked = [
        {
            **r,
            "prompt": render_prompt(
                tokenizer, r["prompt"], True, r["domain"] if instructed else None
            ),
        }
        for r in rows
    ]
    torch.manual_seed(0)
    out = sample_problems(model, tokenizer, asked, cfg, desc, code=CodeRewardConfig())
    fmt = [
        format_reward(asked[o["index"]]["domain"], o["completion"], asked[o["index"]]["answer"])
        for o in out
    ]
    return {
        "accuracy": float(np.mean([o["reward"] for o in out])),
        "format": float(np.mean(fmt)),
        "length": float(np.mean([o["length"] for o in out])),
        "truncated": float(np.mean([o["truncated"] for o in out])),
        "example": out[0]["completion"][:300],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", help="HF model directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--questions", type=int, default=25, help="questions per domain and level")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--levels", type=int, nargs="+", default=list(LEVELS))
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--draw", default="inverse_cdf", choices=["multinomial", "inverse_cdf"])
    ap.add_argument("--domains", nargs="+", default=list(GENERATORS), choices=list(GENERATORS))
    ap.add_argument("--prompts", nargs="+", default=["instructed", "plain"])
    ap.add_argument("--out", type=Path, help="write the Markdown table here (and .json)")
    args = ap.parse_args()
    scratch = scratch_copy(SMOLLM2) if args.model is None else None
    args.model = args.model or scratch.name
    model, tokenizer = load_model(args.model, device=torch.device("cpu"))
    model = set_dtype(model.eval(), args.dtype)
    cfg = SamplingParams(
        samples=args.samples,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        batch_size=64,
        dtype=args.dtype,
        draw=args.draw,
    )
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "model")}
    out: dict = {"settings": settings, "cells": []}
    start = time.perf_counter()
    for domain in args.domains:
        for level in args.levels:
            rows = problems(domain, level, args.questions)
            for prompt in args.prompts:
                cell = profile(
                    model,
                    tokenizer,
                    rows,
                    cfg,
                    prompt == "instructed",
                    f"{domain} L{level} {prompt}",
                )
                cell |= {"domain": domain, "level": level, "prompt": prompt}
                out["cells"].append(cell)
                print(json.dumps({k: v for k, v in cell.items() if k != "example"}), flush=True)
    out["seconds"] = round(time.perf_counter() - start)
    out["learnable"] = {
        d: [
            c["level"]
            for c in out["cells"]
            if c["domain"] == d
            and c["prompt"] == "instructed"
            and BAND[0] <= c["accuracy"] <= BAND[1]
        ]
        for d in args.domains
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
        args.out.write_text(table(out))
    print(json.dumps({k: v for k, v in out.items() if k != "cells"}))


def table(out: dict) -> str:
    s = out["settings"]
    lines = [
        "# SmolLM2-135M-Instruct on the tiny-world domains",
        "",
        f"`python -m benchmarks.smollm2_profile` ({out['seconds']} s): {s['questions']} questions "
        f"per level x {s['samples']} samples at T = {s.get('temperature', 1.0):g}, up to "
        f"{s['max_new_tokens']} new tokens, "
        f"{s['dtype']}, draw {s['draw']}. Accuracy by the pipeline's verifiers; format: the "
        "answer in the domain's form (`format_reward`); truncated: no end of turn within the "
        "budget. Learnable band: instructed accuracy 10-90%.",
        "",
        "| domain | level | prompt | accuracy | format | length (tokens) | truncated |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in out["cells"]:
        lines.append(
            f"| {c['domain']} | {c['level']} | {c['prompt']} | {100 * c['accuracy']:.1f}% | "
            f"{100 * c['format']:.1f}% | {c['length']:.0f} | {100 * c['truncated']:.1f}% |"
        )
    lines += [
        "",
        "Levels in the learnable band: "
        + "; ".join(f"{d}: {v or 'none'}" for d, v in out["learnable"].items()),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
