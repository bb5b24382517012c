"""Time GRPO steps of one model on one device, with the HF or the vLLM rollout backend.

    python -m benchmarks.gpu_step [--model DIR] [--backend hf|vllm] [--device cuda|cpu]
        [--prompts 8] [--group 8] [--new-tokens 64] [--steps 3] [--warmup 1]
    python -m benchmarks.gpu_step --make-model DIR [--size 0.5B] [--layers N]

A step: `backend.generate` (prompts x group completions of exactly `--new-tokens` tokens: EOS
suppressed, so every step does the same work), the reward (`benchmarks.step_time.agreement`
with the reference solution), group-normalised advantages, the trainer's old log-probs
(`score_rollouts`: free with the HF backend, whose sampler recorded them; one forward pass with
vLLM), one clipped-surrogate update in micro-batches (backward, grad clip, AdamW step), then
`backend.sync_weights(model)`. With vLLM the loss is weighted by the truncated importance weights
(`grpo_core.rollout.backends.truncated_is_weights`, cap 2) and the step reports the sampler/trainer
mismatch. The first step's rollouts are checked against the backend contract
(`grpo_core.rollout.backends.check_rollouts`).

Without `--model` the tiny-world model (random weights) is built in a temporary folder.
`--make-model DIR` builds, with no download, a Qwen3 model of the shapes of a published size
(`--size`, `grpo_core.models.qwen3.SIZES`) with random weights and Qwen3's real tokenizer and
chat template (`grpo_core.models.qwen3.build_qwen3`, the builder the test suite uses);
`--layers` keeps fewer layers (a smoke test). Prompts go through the model's chat template when
its tokenizer has one (`chat` in the report).

Printed: one line per step, then one JSON line: median ms_per_step and per phase (generate,
score, update, sync), rollout and generation tokens/s, `max_memory_allocated_gb`
(torch.cuda.max_memory_allocated; with vLLM colocated it includes the engine's KV cache, which
the torch allocator holds) or the peak RSS on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local files only


def _peak_rss_gb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def run(args: argparse.Namespace, model_dir: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.step_time import agreement, bench_problems
    from grpo_core.algorithms.advantages import grpo_advantage
    from grpo_core.algorithms.losses import agg_loss, clipped_surrogate, masked_mean
    from grpo_core.data.prompts import render_prompt
    from grpo_core.rollout.backends import HFBackend, check_rollouts, truncated_is_weights
    from grpo_core.rollout.scoring import score_rollouts, token_logprobs
    from grpo_core.rollout.vllm import VLLMBackend

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch sees no GPU")
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[
        args.dtype or ("bf16" if cuda else "fp32")
    ]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    chat = bool(getattr(tokenizer, "chat_template", None))
    backend = None
    if args.backend == "vllm":  # before the policy: vLLM sizes its share from free memory
        backend = VLLMBackend(
            model_dir,
            tokenizer,
            gpu_memory_utilization=args.vllm_util,
            max_model_len=args.max_model_len,
            seed=args.seed,
            device=device,
        )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    model.config.use_cache = True
    if backend is None:
        backend = HFBackend(model, tokenizer, micro_batch_size=args.micro_batch)
    else:
        backend.sync_weights(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    n_params = sum(q.numel() for q in model.parameters())

    problems = bench_problems(args.prompts * (args.warmup + args.steps), args.seed)
    steps, mismatch = [], []
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)

    def now() -> float:
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter()

    for step in range(args.warmup + args.steps):
        batch = problems[step * args.prompts : (step + 1) * args.prompts]
        prompts = [render_prompt(tokenizer, r["prompt"], chat) for r in batch]
        torch.manual_seed(args.seed * 100_003 + step)
        model.eval()
        t0 = now()
        ro = backend.generate(
            prompts,
            args.group,
            args.temperature,
            args.new_tokens,
            min_new_tokens=args.new_tokens,
        )
        t1 = now()
        if step == 0:
            check_rollouts(ro, tokenizer, prompts, args.group, max_new_tokens=args.new_tokens)
        solutions = [batch[i // args.group]["solution"] for i in range(len(ro.texts))]
        rewards = torch.tensor(
            [agreement(t, s) for t, s in zip(ro.texts, solutions, strict=True)], device=device
        )
        adv = grpo_advantage(rewards, args.group)
        old_logp, _ = score_rollouts(model, ro, args.temperature, args.micro_batch)
        mask = ro.completion_mask
        weights = None
        if args.backend == "vllm":
            weights = truncated_is_weights(old_logp, ro.sampler_logp, mask, cap=2.0)
            diff = (old_logp.float() - ro.sampler_logp.float()).abs()
            mismatch.append(
                {
                    "abs_logp_diff_mean": float(masked_mean(diff, mask)),
                    "abs_logp_diff_max": float(diff[mask.bool()].max()),
                    "tis_weight_mean": float(masked_mean(weights, mask)),
                }
            )
        t2 = now()
        model.train()
        n_tokens = float(mask.sum())
        rows = ro.input_ids.shape[0]
        for start in range(0, rows, args.micro_batch):
            c = slice(start, start + args.micro_batch)
            logp, _ = token_logprobs(
                model, ro.input_ids[c], ro.attention_mask[c], ro.prompt_len, args.temperature
            )
            a = adv[c] if weights is None else adv[c].unsqueeze(1) * weights[c]
            out = clipped_surrogate(logp, old_logp[c], a, 0.2, 0.2)
            loss = agg_loss(out.per_token, mask[c], "token-mean", num_tokens=n_tokens)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t3 = now()
        backend.sync_weights(model)
        t4 = now()
        record = {
            "s": t4 - t0,
            "generate_s": t1 - t0,
            "score_s": t2 - t1,
            "update_s": t3 - t2,
            "sync_s": t4 - t3,
            "tokens": int(mask.sum()),
        }
        timed = step >= args.warmup
        if timed:
            steps.append(record)
        print(
            f"step {step}{'' if timed else ' (warm-up)'}: {1000 * record['s']:.0f} ms "
            f"(generate {1000 * record['generate_s']:.0f}, score {1000 * record['score_s']:.0f}, "
            f"update {1000 * record['update_s']:.0f}, sync {1000 * record['sync_s']:.0f}), "
            f"{record['tokens']} completion tokens",
            file=sys.stderr,
        )

    def med(key: str) -> float:
        return statistics.median(s[key] for s in steps)

    tokens = statistics.median(s["tokens"] for s in steps)
    report = {
        "backend": args.backend,
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if cuda else ""),
        "model": str(args.model or "tiny-world (random weights)"),
        "params": n_params,
        "vocab": len(tokenizer),
        "chat": chat,
        "dtype": str(dtype).removeprefix("torch."),
        "prompts": args.prompts,
        "group": args.group,
        "new_tokens": args.new_tokens,
        "steps": len(steps),
        "ms_per_step": round(1000 * med("s"), 1),
        "generate_ms": round(1000 * med("generate_s"), 1),
        "score_ms": round(1000 * med("score_s"), 1),
        "update_ms": round(1000 * med("update_s"), 1),
        "sync_ms": round(1000 * med("sync_s"), 1),
        "rollout_tokens_per_s": round(tokens / med("s"), 1),
        "generation_tokens_per_s": round(tokens / med("generate_s"), 1),
        "contract": "ok",
    }
    if cuda:
        report["max_memory_allocated_gb"] = round(torch.cuda.max_memory_allocated(device) / 1e9, 2)
        free, total = torch.cuda.mem_get_info(device)
        report["gpu_memory_used_gb"] = round((total - free) / 1e9, 2)
    else:
        report["peak_rss_gb"] = round(_peak_rss_gb(), 2)
    if mismatch:
        report["mismatch"] = {
            k: round(statistics.mean(m[k] for m in mismatch), 5) for k in mismatch[0]
        }
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", type=Path, help="HF model directory (default: tiny-world model)")
    ap.add_argument("--backend", choices=("hf", "vllm"), default="hf")
    ap.add_argument("--device", default="cuda", help="cuda | cpu (default cuda)")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), help="default: bf16 on cuda, fp32 on cpu")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step")
    ap.add_argument("--group", type=int, default=8, help="completions per prompt")
    ap.add_argument("--new-tokens", type=int, default=64, help="tokens per completion (exact)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--micro-batch", type=int, default=16, help="rows per forward/backward")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    ap.add_argument("--vllm-util", type=float, default=0.3, help="vLLM gpu_memory_utilization")
    ap.add_argument("--max-model-len", type=int, default=1024, help="vLLM max_model_len")
    ap.add_argument("--make-model", type=Path, metavar="DIR", help="build a random model, exit")
    ap.add_argument("--size", default="0.6B", help="with --make-model: 0.6B | 1.7B | 4B | 8B")
    ap.add_argument("--layers", type=int, help="with --make-model: keep this many layers")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    if args.make_model:
        from grpo_core.models.qwen3 import build_qwen3

        build_qwen3(args.make_model, args.size, layers=args.layers, seed=args.seed)
        print(f"built {args.size}-shaped random model in {args.make_model}")
        return None
    with tempfile.TemporaryDirectory(prefix="gpu-step-") as tmp:
        if args.model is None:
            from benchmarks.step_time import build_tiny

            model_dir = build_tiny(Path(tmp), args.seed)
        else:
            model_dir = args.model
        report = run(args, model_dir)
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
