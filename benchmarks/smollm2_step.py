"""One GRPO step of the real trainer on SmolLM2-135M-Instruct: seconds, and where they go.

    python -m benchmarks.smollm2_step [--prompts 8] [--group 8] [--new-tokens 96] [--steps 3]
        [--configs bfloat16:inverse_cdf:16:hf bfloat16:inverse_cdf:16:hf_merged ...]
        [--eval-problems 150] [--eval-samples 4] [--eval-tokens 128] [--eval-batch 64 ...]
        [--eval-compact off|on|both] [--out FILE]

A step is `GRPOTrainer.step` (grpo_core/training/trainer.py) with the `grpo` preset and LoRA
(r 16 on every linear layer but the head): `--prompts` level-2 arith questions in the chat
template x `--group` completions of exactly `--new-tokens` tokens (EOS held back, as
`benchmarks.step_time` does, so every configuration does the same work), then
`train.updates_per_batch` (2) optimizer steps in micro-batches over every row. The reward is a
coin per completion (a hash of its text: about half of each group right), so every group has
signal and every row is in the update, as in a step that learns, with no extra term in the loss.
Each configuration `dtype:draw:micro_batch_size:rollout_backend[:temperature]` (temperature
1, the params default, unless given) runs `--steps` steps in a
process of its own; the first is not timed (allocation), the median of the rest is reported,
with the median time in generation and the process's peak RSS, and one more step, untimed,
under torch's FLOP counter gives the FLOPs of the rest (scoring and updates). A last process
times an evaluation as a study cell runs it (`eval_config`: `--eval-problems` x
`--eval-samples` completions of up to `--eval-tokens` tokens, calls of `--eval-batch`; one
process per call size and, with `--eval-compact`, with finished rows leaving the batch). The
shares of the matmul limit divide FLOPs by seconds by the bf16 matmul's rate at SmolLM2's
shapes, measured first (`matmul_rates`). Run it alone on the machine:
another job on the 2 cores halves any number here. The last line printed is JSON; `--out`
writes the table (Markdown) and the JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import sys
import time
import zlib
from pathlib import Path

from benchmarks.cpu_dtype import SMOLLM2, scratch_copy

DEFAULT_CONFIGS = [
    "float32:multinomial:16:hf",
    "bfloat16:inverse_cdf:16:hf",
    "bfloat16:inverse_cdf:16:hf_merged",
]
DOMAIN = "coin"  # the benchmark's reward (`coin`)


def coin(completion: str, answer: str) -> float:
    """1 for about half of all completions, fixed by the text: signal in every group."""
    return float(zlib.crc32(completion.encode()) % 2)


def _fields(config: str) -> tuple[str, str, str, str, float]:
    """`dtype:draw:micro_batch_size:rollout_backend[:temperature]` (temperature 1 unless
    given) as its fields."""
    dtype, draw, micro, backend, *rest = config.split(":")
    return dtype, draw, micro, backend, float(rest[0]) if rest else 1.0


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

    dtype, draw, micro, backend, temperature = _fields(config)
    n, g, t = args["prompts"], args["group"], args["new_tokens"]
    train = {"prompts_per_step": n, "group_size": g, "max_new_tokens": t, "dtype": dtype}
    train["temperature"] = temperature
    train |= {"draw": draw, "micro_batch_size": int(micro), "warmup_steps": 0}
    train["rollout_backend"] = backend
    train["lora"] = {"enabled": True, "r": 16, "alpha": 32, "target_modules": "all-linear"}
    params = parse_params({"train": train})
    verify.VERIFIERS[DOMAIN] = coin
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
    step_s, gen_s = statistics.median(timed_steps), statistics.median(gen)
    peak = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    # One more step, not timed, under torch's FLOP counter: the matmul and attention FLOPs of
    # "the rest" (scoring and updates, forward and backward), the generation's left out.
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    in_generation: list[int] = []

    def counted(*a, **kw):
        before = counter.get_total_flops()
        out = timed(*a, **kw)
        in_generation.append(counter.get_total_flops() - before)
        return out

    sampling.generate = sampler.generate = counted
    with counter:
        trainer.step(questions[:n])
    rest_flops = counter.get_total_flops() - sum(in_generation)
    n_params = sum(p.numel() for name, p in model.named_parameters() if "lora_" not in name)
    queue.put(
        {
            "config": config,
            "step_s": round(step_s, 1),
            "generate_s": round(gen_s, 1),
            "update_s": round(step_s - gen_s, 1),
            "steps": times,
            "peak_rss_gb": peak,
            # 2 x parameters per generated token (attention left out), as benchmarks.cpu_dtype
            "generate_flop": 2 * n_params * n * g * t,
            "rest_flop": int(rest_flops),
        }
    )


def eval_config(model_dir: str, args: dict, queue, batch: int, compact: bool) -> None:
    """Evaluation as a study cell's evaluate stage runs it on a trained policy (a plain bf16
    model, LoRA merged): `sample_problems` of `--eval-problems` level-2 arith questions x
    `--eval-samples` completions of up to `--eval-tokens` tokens at T = 0.2, inverse-CDF
    draws, no log-probs, in generate calls of `batch` sequences, finished rows leaving the
    batch with `compact`. Reports the seconds, the tokens and the share of completions
    rewarded (the same model and draws: other rewards would mean other completions)."""
    import torch

    from grpo_core.analysis.sampling import sample_problems
    from grpo_core.config.sampling import SamplingParams
    from grpo_core.data.prompts import render_prompt
    from grpo_core.data.tiny import arith
    from grpo_core.models.loading import load_model
    from grpo_core.models.precision import set_dtype

    model, tokenizer = load_model(model_dir, device=torch.device("cpu"))
    model = set_dtype(model, "bfloat16").eval()
    rows = arith.generate_level(2, args["eval_problems"], 0, seed=1)["train"]
    problems = [
        {
            "domain": "math",
            "answer": r["answer"],
            "prompt": render_prompt(tokenizer, r["prompt"], True, "math"),
        }
        for r in rows[: args["eval_problems"]]
    ]
    cfg = SamplingParams(
        samples=args["eval_samples"],
        max_new_tokens=args["eval_tokens"],
        batch_size=batch,
        temperature=0.2,
        draw="inverse_cdf",
        compact=compact,
    )
    torch.manual_seed(0)
    start = time.perf_counter()
    out = sample_problems(model, tokenizer, problems, cfg, "evaluation")
    seconds = time.perf_counter() - start
    tokens = sum(r["length"] for r in out)
    n_params = sum(p.numel() for p in model.parameters())
    queue.put(
        {
            "config": "evaluation",
            "eval_batch": batch,
            "compact": compact,
            "completions": len(out),
            "rewarded": round(sum(r["reward"] for r in out) / len(out), 4),
            "tokens": tokens,
            "eval_s": round(seconds, 1),
            "generate_flop": 2 * n_params * tokens,
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
    ap.add_argument("--configs", nargs="*", default=DEFAULT_CONFIGS, help="none: evaluation only")
    ap.add_argument("--eval-problems", type=int, default=150, help="0: no evaluation row")
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--eval-tokens", type=int, default=128)
    ap.add_argument("--eval-batch", type=int, nargs="+", default=[64], help="calls' sizes")
    ap.add_argument(
        "--eval-compact",
        choices=["off", "on", "both"],
        default="off",
        help="finished rows leave the batch (sampling's `compact`)",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    scratch = scratch_copy(SMOLLM2) if args.model is None else None
    args.model = args.model or scratch.name
    settings = {"prompts": args.prompts, "group": args.group, "new_tokens": args.new_tokens}
    settings["steps"] = args.steps
    settings["command"] = " ".join(["python -m benchmarks.smollm2_step", *sys.argv[1:]])
    for k in ("eval_problems", "eval_samples", "eval_tokens", "eval_batch", "eval_compact"):
        settings[k] = getattr(args, k)
    out = {"settings": settings, "matmul_gflops": matmul_rates(args), "results": []}
    ctx = mp.get_context("spawn")
    runs = [(one_config, (c,)) for c in args.configs]
    if args.eval_problems:
        compact = {"off": [False], "on": [True], "both": [False, True]}[args.eval_compact]
        runs += [(eval_config, (b, c)) for b in args.eval_batch for c in compact]
    for target, extra in runs:
        queue = ctx.Queue()
        if target is one_config:
            a = (args.model, extra[0], settings, queue)
        else:
            a = (args.model, settings, queue, *extra)
        proc = ctx.Process(target=target, args=a)
        proc.start()
        result = shares(queue.get(), out["matmul_gflops"])
        proc.join()
        print(json.dumps(result), flush=True)
        out["results"].append(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
        args.out.write_text(table(out))
    print(json.dumps(out))


def matmul_rates(args) -> dict[str, float]:
    """The bf16 matmul's GFLOP/s on these cores at SmolLM2's MLP shapes: decoding (one row
    per sequence) and an update's (`benchmarks.cpu_dtype`'s shapes), the limits the shares
    are taken against."""
    import torch

    from benchmarks.cpu_dtype import matmul_gflops

    rows = args.prompts * args.group
    return {
        "decode": round(matmul_gflops(rows, 576, 1536, torch.bfloat16), 1),
        "update": round(matmul_gflops(16 * 128, 576, 1536, torch.bfloat16), 1),
    }


def shares(result: dict, rates: dict[str, float]) -> dict:
    """`result` with the share of the matmul limit its generation (and evaluation) and its
    update reached: useful FLOPs / seconds / the matmul's rate."""
    decode, update = rates["decode"] * 1e9, rates["update"] * 1e9
    seconds = result["generate_s"] if "generate_s" in result else result["eval_s"]
    # (a floor of 0.05 s: a tiny model's seconds round to 0)
    share = result["generate_flop"] / max(seconds, 0.05) / decode
    result["generate_share"] = round(share, 2)
    if "rest_flop" in result:
        share = result["rest_flop"] / max(result["update_s"], 0.05) / update
        result["rest_share"] = round(share, 2)
    return result


def table(out: dict) -> str:
    s, rates = out["settings"], out["matmul_gflops"]
    steps = [r for r in out["results"] if r["config"] != "evaluation"]
    lines = [
        "# SmolLM2-135M-Instruct on 2 CPU threads: a GRPO step (LoRA) and an evaluation",
        "",
        f"`{s.get('command', 'python -m benchmarks.smollm2_step')}`, alone on the machine.",
        "",
    ]
    if steps:
        lines += _step_table(s, rates, steps)
    evals = [r for r in out["results"] if r["config"] == "evaluation"]
    if evals:
        lines += [
            f"Evaluation (`eval_config`): {evals[0]['completions']} completions of up to "
            f"{s['eval_tokens']} tokens, bf16, T = 0.2, no log-probs; the decode share against "
            f"{rates['decode']} GFLOP/s.",
            "",
            "| call size | finished rows leave | seconds | tokens | rewarded | decode share "
            "| peak RSS (GB) |",
            "|---|---|---|---|---|---|---|",
        ]
    for r in evals:
        lines.append(
            f"| {r['eval_batch']} | {'yes' if r['compact'] else 'no'} | **{r['eval_s']}** | "
            f"{r['tokens']} | {r['rewarded']} | {r['generate_share']} | {r['peak_rss_gb']} |"
        )
    return "\n".join(lines) + "\n"


def _step_table(s: dict, rates: dict, steps: list[dict]) -> list[str]:
    lines = [
        f"A step: {s['prompts']} prompts x {s['group']} completions "
        f"x exactly {s['new_tokens']} new tokens, a coin-flip reward (every row in the update), "
        f"2 updates per batch; median of the {s['steps'] - 1} steps after the first. Shares of the "
        f"bf16 matmul limit at SmolLM2's shapes ({rates['decode']} GFLOP/s decoding, "
        f"{rates['update']} in an update): generation counts 2 x parameters per token, the "
        "rest torch's FLOP counter (matmuls and attention, forward and backward).",
        "",
        "| dtype | draw | micro-batch | rollout backend | T | step (s) | generation (s) "
        "| the rest (s) | generation share | rest share | peak RSS (GB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in steps:
        dtype, draw, micro, backend, temperature = _fields(r["config"])
        lines.append(
            f"| {dtype} | {draw} | {micro} | {backend} | {temperature:g} | {r['step_s']} | "
            f"{r['generate_s']} | {r['update_s']} | {r.get('generate_share', '–')} | "
            f"{r.get('rest_share', '–')} | {r['peak_rss_gb']} |"
        )
    return lines + [""]


if __name__ == "__main__":
    main()
