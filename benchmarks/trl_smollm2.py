"""Time per RL step of grpo-lab's GRPO trainer against TRL's `GRPOTrainer` on SmolLM2-135M-Instruct
with LoRA in bf16: the same model, adapters, prompts, group size and new tokens.

    python -m benchmarks.trl_smollm2 [--prompts 8] [--group 8] [--new-tokens 96] [--steps 3]
        [--warmup 1] [--out benchmarks/results/trl-smollm2.md]

`benchmarks.step_time` runs the two trainers the same way on the tiny world (each in a process
of its own, alternated step by step: ours, TRL, TRL, ours, ...). Here both get:

- the packaged SmolLM2-135M-Instruct (`benchmarks.cpu_dtype.scratch_copy`) loaded in bf16, with
  LoRA r 16, alpha 32, dropout 0 on every linear layer but the head (peft keeps the adapters in
  float32) and bf16 autocast for the forward passes;
- `--prompts` level-2 arith questions in the chat template (the same rendered text for both:
  TRL gets plain-text prompts and applies no template of its own), `--group` completions each of
  exactly `--new-tokens` tokens (EOS held back: `min_new_tokens`) at T = 0.2, the temperature
  of the SmolLM2 studies;
- the coin reward of `benchmarks.smollm2_step` (1 for about half of the completions, fixed by
  the text), so every group has signal and every row is in both updates;
- the `grpo` preset's update: 2 optimizer steps per rollout batch over every row, micro-batches
  of 16 (TRL: per-device batch 16, 4 accumulation steps, `steps_per_generation` 4,
  `num_iterations` 2), lr 1e-4 with no warmup, clip 0.2, token-mean loss (TRL's "dapo"), no KL.

Ours runs as the SmolLM2 studies do: `train.dtype: bfloat16`, inverse-CDF draws, the merged
bf16 copy for rollouts (`rollout_backend: hf_merged`, with its truncated importance weights).
TRL runs as its documentation sets LoRA up (`peft_config=LoraConfig(...)`, `bf16=True`),
generating with the adapters unmerged through transformers' `generate`, without gradient
checkpointing (TRL's default turns it on to save memory; a 135M model needs none, and ours
has none). The TRL config is printed in the report beside the times.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import step_time
from benchmarks.cpu_dtype import SMOLLM2, scratch_copy
from benchmarks.smollm2_step import coin

LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": "all-linear"}
MICRO = 16  # rows per micro-batch, both trainers (benchmarks/results/smollm2-step-41.md)
TEMPERATURE = 0.2
LR = 1e-4  # the SmolLM2 studies' rate (benchmarks/results/smollm2-lr.md)


def trl_coin(prompts, completions, **_) -> list[float]:
    """benchmarks.smollm2_step's coin as a TRL reward function."""
    return [coin(c, "") for c in completions]


def prompts(tokenizer, n: int) -> list[str]:
    """`n` level-2 arith questions rendered in the model's chat template."""
    from grpo_core.data.prompts import render_prompt
    from grpo_core.data.tiny import arith

    rows = arith.generate_level(2, n, 0, seed=0)["train"]
    return [render_prompt(tokenizer, r["prompt"], True, "math") for r in rows[:n]]


def train_params(cfg: dict):
    from grpo_core.config.params import parse_params

    train = {
        "prompts_per_step": cfg["prompts"],
        "group_size": cfg["group"],
        "max_new_tokens": cfg["new_tokens"],
        "temperature": TEMPERATURE,
        "dtype": "bfloat16",
        "draw": "inverse_cdf",
        "micro_batch_size": MICRO,
        "rollout_backend": "hf_merged",
        "lr": LR,
        "warmup_steps": 0,
        "lora": {"enabled": True, **LORA},
    }
    return parse_params({"algo": "grpo", "train": train})


def _ours(cfg: dict, conn, baseline: float) -> None:
    import torch

    import grpo_core.rollout.sampler as sampler
    import grpo_core.training.sampling as sampling
    from grpo_core.models.loading import load_model
    from grpo_core.models.precision import set_dtype
    from grpo_core.rewards import verify
    from grpo_core.training.batch import Question
    from grpo_core.training.run import policy_and_reference, rollout_backend
    from grpo_core.training.trainer import GRPOTrainer

    verify.VERIFIERS["coin"] = coin
    params = train_params(cfg)
    model, tokenizer = load_model(cfg["model"], device=torch.device("cpu"))
    model = set_dtype(model, "bfloat16")
    texts = prompts(tokenizer, cfg["prompts"] * cfg["total"])
    questions = [Question(f"q{i}", "coin", 2, t, "0") for i, t in enumerate(texts)]
    generate, seen = sampler.generate, {}

    def timed(*a, **kw):
        start = time.perf_counter()
        ro = generate(*a, **kw, min_new_tokens=cfg["new_tokens"])
        seen["gen_s"] = seen.get("gen_s", 0.0) + time.perf_counter() - start
        seen["lengths"] = ro.lengths.tolist()
        return ro

    # the policy samples through the name GroupSampler imported, the merged copy through the
    # sampler module's (benchmarks.smollm2_step)
    sampling.generate = sampler.generate = timed
    torch.manual_seed(cfg["seed"])
    model, reference = policy_and_reference(model, params.train)
    trainer = GRPOTrainer(
        model,
        tokenizer,
        params.train,
        reference=reference,
        reward=params.reward,
        backend=rollout_backend(params, tokenizer, model),
    )
    conn.send(("ready", None))
    p = cfg["prompts"]
    for step in range(cfg["total"]):
        if conn.recv() != "step":
            return
        seen.clear()
        start = time.perf_counter()
        metrics, _ = trainer.step(questions[step * p : (step + 1) * p])
        payload = {"s": time.perf_counter() - start, **seen}
        payload["frac_trained"] = metrics["frac_sequences_trained"]
        conn.send(("step", payload))
    conn.recv()
    conn.send(("done", {"peak_rss_mb": step_time._peak_rss_mb(), "baseline_rss_mb": baseline}))


def trl_args(cfg: dict, output_dir: str) -> dict[str, Any]:
    """The GRPOConfig TRL runs with (printed in the report)."""
    params = train_params(cfg).train
    rows = cfg["prompts"] * cfg["group"]
    return {
        "output_dir": output_dir,
        "report_to": "none",
        "use_cpu": True,
        "bf16": True,
        "gradient_checkpointing": False,
        "seed": cfg["seed"],
        "disable_tqdm": True,
        "logging_strategy": "no",
        "save_strategy": "no",
        "per_device_train_batch_size": MICRO,
        "gradient_accumulation_steps": rows // MICRO,
        "steps_per_generation": rows // MICRO,
        "num_generations": params.group_size,
        "num_iterations": params.updates_per_batch,
        "max_steps": cfg["total"] * params.updates_per_batch,
        "max_completion_length": params.max_new_tokens,
        "generation_kwargs": {"min_new_tokens": cfg["new_tokens"]},
        "temperature": TEMPERATURE,
        "top_k": 0,
        "top_p": 1.0,
        "learning_rate": params.lr,
        "lr_scheduler_type": "constant",
        "weight_decay": params.weight_decay,
        "max_grad_norm": params.max_grad_norm,
        "optim": "adamw_torch",
        "loss_type": "dapo",
        "scale_rewards": "group",
        "beta": 0.0,
        "epsilon": params.clip_low,
        "epsilon_high": params.clip_high,
        "use_vllm": False,
    }


def _trl(cfg: dict, conn, baseline: float) -> None:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(cfg["model"])
    model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.bfloat16)
    updates = train_params(cfg).train.updates_per_batch
    dataset = Dataset.from_dict({"prompt": prompts(tokenizer, cfg["prompts"] * cfg["total"])})
    lora = LoraConfig(
        r=LORA["r"],
        lora_alpha=LORA["alpha"],
        lora_dropout=LORA["dropout"],
        target_modules=LORA["target_modules"],
        task_type="CAUSAL_LM",
    )
    args = GRPOConfig(**trl_args(cfg, tempfile.mkdtemp(prefix="trl-smollm2-")))
    seen: dict[str, Any] = {}
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=trl_coin,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[step_time.trl_turns(conn, updates, seen)],
        peft_config=lora,
    )
    step_time.serve_trl(trainer, conn, baseline, seen)


def table(report: dict, trl_config: dict) -> str:
    c = report["config"]
    lines = [
        "# grpo-lab against TRL's GRPOTrainer on SmolLM2-135M-Instruct (LoRA, bf16, 2 CPU threads)",
        "",
        f"`python -m benchmarks.trl_smollm2`: {c['prompts']} prompts x {c['group']} completions "
        f"x exactly {c['new_tokens']} new tokens at T = {TEMPERATURE}, a coin-flip reward, 2 "
        f"updates per batch in micro-batches of {MICRO}; the two trainers alternated step by "
        f"step, median of {c['steps']} steps after {c['warmup']} untimed.",
        "",
        "| trainer | step (s) | generation (s) | the rest (s) | peak RSS (MB) |",
        "|---|---|---|---|---|",
    ]
    for kind in ("ours", "trl"):
        r = report[kind]
        step, gen = r["ms_per_step"] / 1000, r["generation_ms"] / 1000
        lines.append(
            f"| {kind} | {step:.1f} | {gen:.1f} | {step - gen:.1f} | {r['peak_rss_mb']:.0f} |"
        )
    lines += [
        "",
        f"TRL's seconds per step over ours: **{report['ratio']:.2f}x**.",
        "",
        "TRL's `GRPOConfig` (with `peft_config=LoraConfig(r=16, lora_alpha=32, lora_dropout=0, "
        "target_modules='all-linear', task_type='CAUSAL_LM')`, the model loaded in bf16):",
        "",
        "```json",
        json.dumps({k: v for k, v in trl_config.items() if k != "output_dir"}, indent=1),
        "```",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", help="HF model directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--steps", type=int, default=3, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write the table (Markdown) and the JSON beside it")
    args = ap.parse_args(argv)
    if (args.prompts * args.group) % MICRO:
        ap.error(f"--prompts x --group must be a multiple of the micro-batch, {MICRO}")
    scratch = scratch_copy(SMOLLM2) if args.model is None else None
    cfg = vars(args) | {"model": args.model or scratch.name, "threads": 0}
    cfg |= {"trl": True, "exact_length": True, "module": __name__}
    report = step_time.run({k: v for k, v in cfg.items() if k != "out"})
    trl_config = trl_args(cfg | {"total": args.warmup + args.steps}, "(temporary)")
    report["trl_config"] = trl_config
    print(table(report, trl_config))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table(report, trl_config))
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
