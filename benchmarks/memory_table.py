"""GPU memory per GPU for GRPO training of Qwen2.5 0.5B-7B on 8 x A100-80GB: COMPUTED, not
measured (no GPU run is behind these numbers).

    python -m benchmarks.memory_table [--gpus 8] [--micro-batch 4] [--prompt-len 256]
        [--completion-len 768] [--vllm-util 0.3] [--lora-rank 16] [--json]

Per GPU, in GB (10^9 bytes; an "80GB" A100 holds 80 GiB = 85.9 GB), with N GPUs, P parameters
and A LoRA adapter parameters:

- full fine-tuning, bf16 weights (2 bytes/param), bf16 gradients (2), fp32 Adam master copy +
  first + second moment (4 + 4 + 4 = 12):
  ZeRO-2 shards gradients and optimizer states: 2 P + (2 + 12) P / N;
  ZeRO-3 also shards the weights:              (2 + 2 + 12) P / N.
- LoRA (rank r on every linear layer of the blocks, `all-linear`; not the LM head): the frozen
  base in bf16 (2 P, or 2 P / N under ZeRO-3), and the adapters as trainable parameters above
  (2 A, or 2 A / N under ZeRO-3, + (2 + 12) A / N).
- reference model (only when kl_coef > 0): one more bf16 copy of the weights, whole on every
  GPU (2 P) even under ZeRO-3 (the trainer does not shard it). Not with LoRA: the reference
  is the policy with its adapters disabled.
- ZeRO-3 rollouts: the weights gathered whole while sampling (+ 2 P, the "gathered" column; the
  update's activations are not held then), and the LM head whole in the update (no pieces).
- vLLM colocated (TRL's colocate mode): the engine takes `gpu_memory_utilization` x the GPU's
  memory for its own weights, activations and KV cache, whatever the model: util x 85.9 GB.
- activations, micro-batch b, sequence s = prompt + completion, completion T, hidden h, L layers,
  vocabulary V, with gradient checkpointing (every block's input kept, one block recomputed at a
  time) and flash attention (no s x s score matrix):
      2 L b s h            (block inputs, bf16)
    + 34 b s h             (one block's recomputed activations, bf16: Korthikanti et al., 2022,
                            "Reducing Activation Recomputation in Large Transformer Models",
                            eq. 1 without its 5 a s / h attention-score term)
    + 10 min(b T, c) V     (LM head over the completion tokens only, in pieces of c tokens:
                            bf16 logits (2), their fp32 copy (4) and the fp32 log-softmax (4)
                            per entry. grpo_core.rollout.scoring computes the head on
                            completion positions only, and c = LOGIT_CHUNK_BYTES / 4 V at a
                            time when b T V fp32 logits would be larger: 441 tokens at
                            Qwen's V = 151,936, benchmarks/logprob_memory.py)
  an estimate: a SwiGLU block with intermediate size 5.4 h keeps more than the 34 b s h of a
  GPT block with a 4 h MLP, and the allocator's fragmentation, the CUDA context (about 0.5-1 GB)
  and NCCL buffers are not counted.

The architectures are the `config.json` values of the Qwen2.5 model cards (Qwen/Qwen2.5-0.5B,
-1.5B, -3B, -7B on the Hugging Face hub): hidden size, intermediate size, layers, attention
heads, key/value heads, vocabulary, tied embeddings; q/k/v projections have biases. The
parameter counts below are computed from those shapes.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

from grpo_core.rollout.scoring import LOGIT_CHUNK_BYTES

GB = 1e9
A100_80GB = 80 * 2**30 / GB  # 85.9 GB


@dataclass(frozen=True)
class Arch:
    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def linears(self) -> list[tuple[int, int, bool]]:
        """(in, out, bias) of every linear layer of one block."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        i = self.intermediate
        return [
            (h, h, True),  # q_proj
            (h, kv, True),  # k_proj
            (h, kv, True),  # v_proj
            (h, h, False),  # o_proj
            (h, i, False),  # gate_proj
            (h, i, False),  # up_proj
            (i, h, False),  # down_proj
        ]

    def params(self) -> int:
        block = sum(n_in * n_out + (n_out if bias else 0) for n_in, n_out, bias in self.linears())
        block += 2 * self.hidden  # input and post-attention RMSNorm
        embed = self.vocab * self.hidden
        head = 0 if self.tied else self.vocab * self.hidden
        return self.layers * block + embed + head + self.hidden  # + final norm

    def lora_params(self, rank: int) -> int:
        """Adapter parameters of rank-`rank` LoRA on every linear layer of every block:
        A (rank x in) and B (out x rank) per layer."""
        return self.layers * sum(rank * (n_in + n_out) for n_in, n_out, _ in self.linears())


# From the model cards' config.json (hidden_size, intermediate_size, num_hidden_layers,
# num_attention_heads, num_key_value_heads, vocab_size, tie_word_embeddings).
QWEN25 = {
    "0.5B": Arch("Qwen2.5-0.5B", 896, 4864, 24, 14, 2, 151936, True),
    "1.5B": Arch("Qwen2.5-1.5B", 1536, 8960, 28, 12, 2, 151936, True),
    "3B": Arch("Qwen2.5-3B", 2048, 11008, 36, 16, 2, 151936, True),
    "7B": Arch("Qwen2.5-7B", 3584, 18944, 28, 28, 4, 152064, False),
}


def state_bytes(
    params: float,
    gpus: int,
    zero: int,
    trainable: float | None = None,
    kl: bool = False,
) -> dict[str, float]:
    """Bytes per GPU of weights, gradients, optimizer states and reference model.

    `trainable` None: full fine-tuning (every parameter trained); else LoRA with that many
    adapter parameters over a frozen base of `params` (and no reference copy: adapters off)."""
    if zero not in (2, 3):
        raise ValueError(f"ZeRO stage 2 or 3, not {zero}")
    shard_weights = gpus if zero == 3 else 1
    if trainable is None:
        weights = 2 * params / shard_weights
        grads = 2 * params / gpus
        optim = 12 * params / gpus
        ref = 2 * params if kl else 0.0  # whole on every GPU: not sharded by the trainer
    else:
        weights = 2 * (params + trainable) / shard_weights
        grads = 2 * trainable / gpus
        optim = 12 * trainable / gpus
        ref = 0.0
    return {"weights": weights, "grads": grads, "optimizer": optim, "reference": ref}


def activation_bytes(
    arch: Arch,
    micro_batch: int,
    seq_len: int,
    completion_len: int,
    chunk_bytes: int = LOGIT_CHUNK_BYTES,
) -> float:
    """The estimate of the module docstring: checkpointed block inputs, one block recomputed,
    the LM head over the completion (in pieces of `chunk_bytes` of fp32 logits, as
    grpo_core.rollout.scoring.token_logprobs)."""
    b, s, h = micro_batch, seq_len, arch.hidden
    tokens = b * completion_len
    if 4 * tokens * arch.vocab > chunk_bytes:
        tokens = max(1, chunk_bytes // (4 * arch.vocab))
    return 2 * arch.layers * b * s * h + 34 * b * s * h + 10 * tokens * arch.vocab


def table(
    gpus: int = 8,
    micro_batch: int = 4,
    prompt_len: int = 256,
    completion_len: int = 768,
    vllm_util: float = 0.3,
    lora_rank: int = 16,
    gpu_gb: float = A100_80GB,
) -> list[dict]:
    rows = []
    seq = prompt_len + completion_len
    for size, arch in QWEN25.items():
        p = arch.params()
        a = arch.lora_params(lora_rank)
        vllm = vllm_util * gpu_gb * GB
        for mode, zero, trainable in (
            ("full, ZeRO-2", 2, None),
            ("full, ZeRO-3", 3, None),
            (f"LoRA r={lora_rank}, ZeRO-2", 2, a),
            (f"LoRA r={lora_rank}, ZeRO-3", 3, a),
        ):
            # ZeRO-3: the LM head whole (no pieces); the weights gathered while sampling
            chunk = 2**62 if zero == 3 else LOGIT_CHUNK_BYTES
            act = activation_bytes(arch, micro_batch, seq, completion_len, chunk)
            s = state_bytes(p, gpus, zero, trainable, kl=True)
            states = s["weights"] + s["grads"] + s["optimizer"]
            gathered = 2 * (p + (trainable or 0)) if zero == 3 else 0.0
            base = states + max(act, gathered)
            rows.append(
                {
                    "model": size,
                    "params": p,
                    "lora_params": a if trainable is not None else None,
                    "mode": mode,
                    "weights_gb": s["weights"] / GB,
                    "grads_gb": s["grads"] / GB,
                    "optimizer_gb": s["optimizer"] / GB,
                    "reference_gb": s["reference"] / GB,
                    "activations_gb": act / GB,
                    "gathered_gb": gathered / GB,
                    "vllm_gb": vllm / GB,
                    "total_kl0_gb": (base + vllm) / GB,
                    "total_kl_gb": (base + s["reference"] + vllm) / GB,
                }
            )
    return rows


def markdown(rows: list[dict], gpu_gb: float = A100_80GB) -> str:
    head = (
        "| model | params | mode | weights | grads | Adam | ref (kl>0) | activations | gathered "
        "| vLLM | total, kl=0 | total, kl>0 |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        params = f"{r['params'] / 1e9:.2f}B"
        if r["lora_params"] is not None:
            params += f" (+{r['lora_params'] / 1e6:.1f}M LoRA)"
        ref = "-" if r["reference_gb"] == 0 else f"{r['reference_gb']:.2f}"
        gathered = "-" if r["gathered_gb"] == 0 else f"{r['gathered_gb']:.2f}"
        over = lambda x: f"{x:.1f}" + (" (over)" if x > gpu_gb else "")  # noqa: E731
        lines.append(
            f"| {r['model']} | {params} | {r['mode']} | {r['weights_gb']:.2f} "
            f"| {r['grads_gb']:.2f} | {r['optimizer_gb']:.2f} | {ref} "
            f"| {r['activations_gb']:.2f} | {gathered} | {r['vllm_gb']:.1f} "
            f"| {over(r['total_kl0_gb'])} "
            f"| {over(r['total_kl_gb'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=4, help="sequences per micro-batch")
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--completion-len", type=int, default=768)
    ap.add_argument("--vllm-util", type=float, default=0.3, help="vLLM gpu_memory_utilization")
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--gpu-gb", type=float, default=A100_80GB, help="memory of one GPU, GB")
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of markdown")
    args = ap.parse_args(argv)
    rows = table(
        args.gpus,
        args.micro_batch,
        args.prompt_len,
        args.completion_len,
        args.vllm_util,
        args.lora_rank,
        args.gpu_gb,
    )
    if args.json:
        print(json.dumps({"archs": {k: asdict(v) for k, v in QWEN25.items()}, "rows": rows}))
        return rows
    print(
        f"COMPUTED, not measured: GB (1e9 bytes) per GPU on {args.gpus} GPUs of "
        f"{args.gpu_gb:.1f} GB; micro-batch {args.micro_batch} x ({args.prompt_len} prompt + "
        f"{args.completion_len} completion) tokens, gradient checkpointing; vLLM colocated at "
        f"gpu_memory_utilization={args.vllm_util}. Formulas: benchmarks/memory_table.py.\n"
    )
    print(markdown(rows, args.gpu_gb))
    return rows


if __name__ == "__main__":
    main()
