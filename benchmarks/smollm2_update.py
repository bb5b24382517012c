"""One micro-batch of SmolLM2's update, forward and backward, timed: what the micro-batch size
and the attention kernel change in "the rest" of a step (issue 41).

    python -m benchmarks.smollm2_update [--sizes 8 16 32 64] [--attention default math]
        [--prompt 70] [--completion 96] [--repeats 3] [--model DIR] [--out FILE]

The policy is SmolLM2-135M-Instruct in bf16 with LoRA r 16 on every linear layer (the
`smollm2` study's), trained as `PolicyUpdate` trains it (`token_logprobs` at T = 0.2, the
fused head, the rows of a group sharing their prompt's pass): `--sizes` rows of a prompt of
`--prompt` random tokens shared by each 8 (a group) and `--completion` random completion
tokens, then `logp.sum().backward()`. Each size and attention kernel (`default`: what torch
picks, its CPU flash attention; `math`: `SDPBackend.MATH`) is run once untimed and
`--repeats` times timed; the median is reported, and per row. Run it alone on the machine.
The last line printed is JSON; `--out` writes the table (Markdown) and the JSON beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmarks.cpu_dtype import SMOLLM2, scratch_copy
from grpo_core.config.params import parse_params
from grpo_core.models.loading import load_model
from grpo_core.models.precision import set_dtype
from grpo_core.rollout.scoring import token_logprobs
from grpo_core.training.run import policy_and_reference

GROUP = 8


def policy(model_dir: Path | None = None):
    """SmolLM2 (or the model in `model_dir`) in bf16 with the study's LoRA, in train mode, and
    the scratch directory to clean up (None for `model_dir`)."""
    scratch = None if model_dir else scratch_copy(SMOLLM2)
    model, _ = load_model(model_dir or scratch.name, device=torch.device("cpu"))
    model = set_dtype(model, "bfloat16")
    lora = {"enabled": True, "r": 16, "alpha": 32, "target_modules": "all-linear"}
    params = parse_params({"train": {"dtype": "bfloat16", "lora": lora}})
    torch.manual_seed(0)
    model, _ = policy_and_reference(model, params.train)
    model.train()
    return model, scratch


def time_one(model, rows: int, prompt: int, completion: int, attention: str, repeats: int):
    gen = torch.Generator().manual_seed(rows)
    prompts = torch.randint(100, 40000, (max(rows // GROUP, 1), prompt), generator=gen)
    ids = torch.cat(
        [
            prompts.repeat_interleave(GROUP, 0)[:rows],
            torch.randint(100, 40000, (rows, completion), generator=gen),
        ],
        dim=1,
    )
    attn = torch.ones_like(ids)
    kernel = sdpa_kernel(SDPBackend.MATH) if attention == "math" else contextlib.nullcontext()
    seconds = []
    with kernel:
        for i in range(repeats + 1):
            start = time.perf_counter()
            logp, _ = token_logprobs(model, ids, attn, prompt, 0.2)
            logp.sum().backward()
            if i:  # the first is not timed (allocation)
                seconds.append(time.perf_counter() - start)
    model.zero_grad(set_to_none=True)
    median = statistics.median(seconds)
    return {"rows": rows, "attention": attention, "seconds": round(median, 3),
            "per_row": round(median / rows, 4), "runs": [round(s, 3) for s in seconds]}  # fmt: skip


def table(out: dict) -> str:
    lines = [
        "# SmolLM2's update: one micro-batch forward and backward (LoRA r 16, bf16, T = 0.2)",
        "",
        f"`{out['command']}`, alone on the machine: a prompt of {out['prompt']} tokens shared "
        f"by each {GROUP} rows, {out['completion']} completion tokens a row; the median of "
        f"{out['repeats']} runs after one untimed.",
        "",
        "| rows | attention | seconds | seconds a row |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['rows']} | {r['attention']} | {r['seconds']} | {r['per_row']} |"
        for r in out["results"]
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--attention", nargs="+", default=["default", "math"])
    ap.add_argument("--prompt", type=int, default=70)
    ap.add_argument("--completion", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", type=Path, help="a converted model directory (default: SmolLM2)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    model, scratch = policy(args.model)
    results = [
        time_one(model, rows, args.prompt, args.completion, kernel, args.repeats)
        for kernel in args.attention
        for rows in args.sizes
    ]
    if scratch is not None:
        scratch.cleanup()
    out = {"command": "python -m benchmarks.smollm2_update " + " ".join(sys.argv[1:])}
    out |= {"prompt": args.prompt, "completion": args.completion, "repeats": args.repeats}
    out["results"] = results
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
        args.out.write_text(table(out))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
