"""One GRPO step of the real trainer on SmolLM2-135M-Instruct: seconds, and where they go.

    python -m benchmarks.smollm2_step [--prompts 8] [--group 8] [--new-tokens 96] [--steps 3]
        [--configs bfloat16:inverse_cdf:16:hf bfloat16:inverse_cdf:16:hf_merged ...] [--out FILE]

A step is `GRPOTrainer.step` (grpo_core/training/trainer.py) with the `grpo` preset and LoRA
(r 16 on every linear layer but the head): `--prompts` level-2 arith questions in the chat
template x `--group` completions of exactly `--new-tokens` tokens (EOS held back, as
`benchmarks.step_time` does, so every configuration does the same work), then
`train.updates_per_batch` (2) optimizer steps in micro-batches over every row. The reward is a
coin per completion (a hash of its text: about half of each group right), so every group has
signal and every row is in the update, as in a step that learns, with no extra term in the loss.
Each configuration `dtype:draw:micro_batch_size:rollout_backend` runs `--steps` steps in a
process of its own; the first is not timed (allocation), the median of the rest is reported,
with the median time in generation and the process's peak RSS. Run it alone on the machine:
another job on the 2 cores halves any number here. The last line printed is JSON; `--out`
writes the table (Markdown) and the JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import time
import zlib
from pathlib import Path

from benchmarks.cpu_dtype import SMOLLM2, scratch_copy

DEFAULT_CONFIGS = [
    "float32:multinomial:16:hf",
    "bfloat16:inverse_cdf:16:hf",
    "bfloat16:inverse_cdf:16:hf_merged",
]
DOMAIN = "coin"  # the benchmark's reward (`_coin`)


def _coin(completion: str, answer: str) -> float:
    """1 for about half of all completions, fixed by the text: signal in every group."""
    return float(zlib.crc32(completion.encode()) % 2)


def one_config(model_dir: str, config: str, args: dict, queue) -> None:
    import torch

    import grpo_core.rollout.sampler as sampler
    import grpo_core.training.sampling as sampling
    from grpo_core.config.params import parse_params
    from grpo_core.data.prompts import render_prompt
    from grpo_core.data.tiny import arith
    from grpo_core.models.loading import load_model
    from grpo_core.models.precision import set_dtype
    from grpo_core.rewards import verify
    from grpo_core.training.batch import Question
    from grpo_core.training.run import policy_and_reference, rollout_backend
    from grpo_core.training.trainer import GRPOTrainer

    dtype, draw, micro, backend = config.split(":")
    n, g, t = args["prompts"], args["group"], args["new_tokens"]
    train = {"prompts_per_step": n, "group_size": g, "max_new_tokens": t, "dtype": dtype}
    train |= {"draw": draw, "micro_batch_size": int(micro), "warmup_steps": 0}
    train["rollout_backend"] = backend
    train["lora"] = {"enabled": True, "r": 16, "alpha": 32, "target_modules": "all-linear"}
    params = parse_params({"train": train})
    verify.VERIFIERS[DOMAIN] = _coin
    model, tokenizer = load_model(model_dir, device=torch.device("cpu"))
    model = set_dtype(model, dtype)
    rows = arith.generate_level(2, n * args["steps"], 0, seed=0)["train"]
    questions = [
        Question(
            r["id"], DOMAIN, 2, render_prompt(tokenizer, r["prompt"], True, "math"), r["answer"]
        )
        for r in rows
    ]
    generate = sampler.generate
    spent: list[float] = []

    def timed(*a, **kw):
        start = time.perf_counter()
        out = generate(*a, **kw, min_new_tokens=t)
        spent.append(time.perf_counter() - start)
        return out

    # The policy samples through the name GroupSampler imported, the merged copy through the
    # sampler module's.
    sampling.generate = sampler.generate = timed
    torch.manual_seed(0)
    model, reference = policy_and_reference(model, params.train)
    trainer = GRPOTrainer(
        model,
        tokenizer,
        params.train,
        reference=reference,
        reward=params.reward,
        backend=rollout_backend(params, tokenizer, model),
    )
    times = []
    for step in range(args["steps"]):
        start = time.perf_counter()
        trainer.step(questions[step * n : (step + 1) * n])
        times.append(time.perf_counter() - start)
    timed_steps, gen = times[1:] or times, spent[1:] or spent
    queue.put(
        {
            "config": config,
            "step_s": round(statistics.median(timed_steps), 1),
            "generate_s": round(statistics.median(gen), 1),
            "update_s": round(statistics.median(timed_steps) - statistics.median(gen), 1),
            "steps": times,
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", help="HF model directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    scratch = scratch_copy(SMOLLM2) if args.model is None else None
    args.model = args.model or scratch.name
    settings = {"prompts": args.prompts, "group": args.group, "new_tokens": args.new_tokens}
    settings["steps"] = args.steps
    out = {"settings": settings, "results": []}
    ctx = mp.get_context("spawn")
    for config in args.configs:
        queue = ctx.Queue()
        proc = ctx.Process(target=one_config, args=(args.model, config, settings, queue))
        proc.start()
        result = queue.get()
        proc.join()
        print(json.dumps(result), flush=True)
        out["results"].append(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
        args.out.write_text(table(out))
    print(json.dumps(out))


def table(out: dict) -> str:
    s = out["settings"]
    lines = [
        "# One GRPO step on SmolLM2-135M-Instruct, LoRA, 2 CPU threads",
        "",
        f"`python -m benchmarks.smollm2_step`: {s['prompts']} prompts x {s['group']} completions "
        f"x exactly {s['new_tokens']} new tokens, a coin-flip reward (every row in the update), "
        f"2 updates per batch; median of {s['steps']} steps after the first.",
        "",
        "| dtype | draw | micro-batch | rollout backend | step (s) | generation (s) | the rest (s) "
        "| peak RSS (GB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in out["results"]:
        dtype, draw, micro, backend = r["config"].split(":")
        lines.append(
            f"| {dtype} | {draw} | {micro} | {backend} | {r['step_s']} | {r['generate_s']} | "
            f"{r['update_s']} | {r['peak_rss_gb']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
