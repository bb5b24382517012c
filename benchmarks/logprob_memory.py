"""Peak memory of one micro-batch's completion log-probs, forward and backward, at V = 151,936.

    python -m benchmarks.logprob_memory [--rows 16] [--lengths 128,256,512,1024]
        [--prompt-len 16] [--hidden 64] [--max-gb 16] [--chunk-bytes N] [--vocab 151936]
        [--device cpu|cuda] [--dtype fp32|bf16]

Measures what the trainer does per micro-batch: `token_logprobs(..., with_entropy=True)` on B rows
of a prompt and T completion tokens, then `.backward()` of the policy-gradient loss
`(logp * adv).sum() / (B T)`. "before": `chunk_bytes=2**62`, the model's own (B, T, V) float32
logits (the unchunked path); "after": the default `LOGIT_CHUNK_BYTES` (or `--chunk-bytes`), the
LM head applied c = chunk_bytes // 4V tokens at a time under activation checkpointing.

Model: `Qwen3ForCausalLM` built in memory with random weights (Qwen3's module names, untied
head, vocabulary 151,936), hidden H = 64, 1 layer (head_dim 16, H / 16 heads, GQA 2:1, MLP 3H),
float32 on CPU. The LM head's memory depends on B, T and V, not on depth: more layers add
activations that are the same before and after, so one small layer keeps them (and the run)
small. In bfloat16, "before" would hold one more float32 (B, T, V) copy (`.float()`). Every
row has a prompt of its own (random tokens), so no rows share a prompt pass.

On a GPU (`--device cuda`, scripts/gpu_check.sh runs it in bf16) the peak is the allocator's,
`torch.cuda.max_memory_allocated` less what was allocated before the step. On the CPU each
(mode, T) runs in a fresh subprocess with one thread, `MALLOC_ARENA_MAX=1` and
`MALLOC_MMAP_THRESHOLD_=131072` (every block over 128 KiB is an mmap of its own, unmapped on
free, where glibc would otherwise raise the threshold to 32 MiB: RSS follows the live tensors).
The child builds the model and inputs, runs once on a tiny batch (lazy init), drops the
gradients, resets its RSS high-water mark (writes "5" to /proc/self/clear_refs), runs forward +
backward and reports peak = VmHWM - VmRSS just before: the computation's own memory, the
parameters' new gradients included.

Theoretical minimum: what an exact method that makes the float32 logits c tokens at a time
must hold at once, at the backward of a piece of the head (bytes):
    4 V H         the head's weight gradient (the other parameters' gradients, 4 V H of them
                  the embedding's, come later, in the trunk's backward, after the pieces)
  + 2 * 4 B T H   the final hidden states (the head's backward reads them) and their gradient
  + 2 * 4 B T     the log-probs and entropies
  + 2 * 4 c V     one piece's logits and their log-softmax, c = min(B T, chunk_bytes // 4V),
                  as `_logprobs` does it in autograd ops (a fused kernel working in place could
                  hold one; one that also tiles V, with an online logsumexp, none)
The trunk's activations (one small layer) are not counted. For the unchunked path c = B T and
the last term is two float32 (B, T, V) tensors; the table shows one for reference. At H = 64
the last term is nearly all of it: 2 * 4 * 441 * V = 536 MB at the default chunk_bytes.

"before" is skipped where its estimate (the peak per token at the longest T it ran, times B T)
exceeds --max-gb or the RAM available less 2 GiB: the table then shows "est." and the estimate.
Also checked, in a child of its own at the smallest T: after == before (max abs diff of logp,
entropy and every parameter's gradient). MB and GB: 10^6 and 10^9 bytes. The last line printed
is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 151_936
UNCHUNKED = 2**62
ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_ARENA_MAX": "1", "OMP_NUM_THREADS": "1"}


def build_model(vocab: int, hidden: int, dtype: str = "fp32"):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    heads = max(2, hidden // 16)
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        head_dim=16,
        tie_word_embeddings=False,
    )
    model = Qwen3ForCausalLM(config)
    return model.bfloat16() if dtype == "bf16" else model.float()


def _proc_kb(field: str, path: str = "/proc/self/status") -> int:
    """A `field: N kB` line of a /proc file, in bytes."""
    line = next(x for x in Path(path).read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def run_child(spec: dict) -> dict:
    """In the subprocess: build, warm up, measure one forward + backward (or the check)."""
    import ctypes
    import gc

    import torch

    from grpo_core.rollout.scoring import token_logprobs

    torch.set_num_threads(1)
    torch.manual_seed(0)
    vocab, b, p, t = spec["vocab"], spec["rows"], spec["prompt_len"], spec["length"]
    cuda = spec.get("device") == "cuda"
    device = torch.device("cuda" if cuda else "cpu")
    model = build_model(vocab, spec["hidden"], spec.get("dtype", "fp32")).to(device)
    ids = torch.randint(0, vocab, (b, p + t), device=device)
    attn, adv = torch.ones_like(ids), torch.randn(b, 1, device=device)

    def step(ids, attn, adv, chunk):
        logp, entropy = token_logprobs(
            model, ids, attn, p, 1.0, with_entropy=True, chunk_bytes=chunk
        )
        (logp * adv).sum().div(logp.numel()).backward()
        return logp.detach(), entropy

    def reset():
        model.zero_grad(set_to_none=True)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        else:
            ctypes.CDLL("libc.so.6").malloc_trim(0)

    chunk = UNCHUNKED if spec["mode"] == "before" else spec["chunk_bytes"]
    if spec["mode"] == "check":
        out = {}
        for name, c in (("before", UNCHUNKED), ("after", chunk)):
            reset()
            logp, entropy = step(ids, attn, adv, c)
            grads = [q.grad.clone() for q in model.parameters()]
            out[name] = (logp, entropy, grads)
        (la, ea, ga), (lb, eb, gb) = out["before"], out["after"]
        return {
            "logp_max_abs_diff": (la - lb).abs().max().item(),
            "entropy_max_abs_diff": (ea - eb).abs().max().item(),
            "grad_max_abs_diff": max(
                (x - y).abs().max().item() for x, y in zip(ga, gb, strict=True)
            ),
            "grad_max_abs": max(x.abs().max().item() for x in ga),
        }
    # Warm-up through the same path (chunked for "after": pieces of 2 tokens).
    step(ids[:2, : p + 4], attn[:2, : p + 4], adv[:2], min(chunk, 8 * vocab))
    reset()
    if cuda:  # the allocator's own peak: torch.cuda.max_memory_allocated
        rss = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    else:
        rss = _proc_kb("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    start = time.perf_counter()
    step(ids, attn, adv, chunk)
    if cuda:
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    hwm = torch.cuda.max_memory_allocated(device) if cuda else _proc_kb("VmHWM")
    params = sum(q.numel() for q in model.parameters())
    return {"peak": hwm - rss, "rss_before": rss, "seconds": seconds, "params": params}


def measure(spec: dict) -> dict:
    """Run one measurement (`spec`: mode, vocab, rows, prompt_len, length, hidden,
    chunk_bytes) in a fresh Python; its JSON report."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.logprob_memory", "--child", json.dumps(spec)],
        cwd=ROOT,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
    )
    if done.returncode:
        sys.exit(f"child {spec} failed:\n{done.stdout}\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _free_bytes(device: str) -> int:
    if device == "cuda":
        import torch

        return torch.cuda.mem_get_info()[0]
    return _proc_kb("MemAvailable", "/proc/meminfo")


def minimum(b: int, t: int, h: int, vocab: int, chunk_bytes: int) -> int:
    """The theoretical minimum (bytes) of the docstring."""
    c = min(b * t, max(1, chunk_bytes // (4 * vocab)))
    return 4 * vocab * h + 2 * 4 * b * t * h + 2 * 4 * b * t + 2 * 4 * c * vocab


def main(argv: list[str] | None = None) -> dict:
    from grpo_core.rollout.scoring import LOGIT_CHUNK_BYTES

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--lengths", default="128,256,512,1024")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--chunk-bytes", type=int, default=LOGIT_CHUNK_BYTES)
    ap.add_argument("--max-gb", type=float, default=16.0)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="the model's")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(json.loads(args.child))))
        return {}
    started = time.perf_counter()
    b, v, h, cb = args.rows, args.vocab, args.hidden, args.chunk_bytes
    lengths = sorted(int(x) for x in args.lengths.split(","))
    base = dict(vocab=v, rows=b, prompt_len=args.prompt_len, hidden=h, chunk_bytes=cb)
    base.update(device=args.device, dtype=args.dtype)
    print(
        f"B={b} prompt={args.prompt_len} V={v} H={h} chunk_bytes={cb} "
        f"({max(1, cb // (4 * v))} tokens a piece), 1 layer, {args.dtype}, {args.device}",
        flush=True,
    )
    rows, per_token = [], None
    for t in lengths:
        tokens, free = b * t, _free_bytes(args.device) - 2 * 2**30
        budget = min(args.max_gb * 1e9, free)
        est = per_token * tokens if per_token else None
        if est is not None and est > budget:
            before = {"peak": est, "estimated": True}
            print(f"T={t:5} before: skipped, est. {est / 1e6:,.0f} MB > {budget / 1e6:,.0f} MB")
        else:
            before = measure({**base, "mode": "before", "length": t})
            per_token = before["peak"] / tokens
            print(f"T={t:5} before: {before['peak'] / 1e6:9,.0f} MB in {before['seconds']:.1f} s")
        after = measure({**base, "mode": "after", "length": t})
        print(
            f"T={t:5} after:  {after['peak'] / 1e6:9,.0f} MB in {after['seconds']:.1f} s",
            flush=True,
        )
        rows.append(
            {
                "T": t,
                "tokens": tokens,
                "before_mb": round(before["peak"] / 1e6),
                "before_estimated": before.get("estimated", False),
                "after_mb": round(after["peak"] / 1e6),
                "min_mb": round(minimum(b, t, h, v, cb) / 1e6),
                "btv_fp32_mb": round(4 * tokens * v / 1e6),
                "before_s": None if "seconds" not in before else round(before["seconds"], 1),
                "after_s": round(after["seconds"], 1),
            }
        )
    check = None  # holds "before" and "after" at once: only where "before" ran alone
    if not rows[0]["before_estimated"]:
        check = measure({**base, "mode": "check", "length": lengths[0]})
        print(f"check at T={lengths[0]}: " + ", ".join(f"{k}={x:.2e}" for k, x in check.items()))
    print(
        "\nmin = 4 V H (head's weight grad) + 2*4 B T H (hidden, its grad) + 2*4 B T (logp, "
        f"entropy) + 2*4 c V (one piece's logits, log-softmax), c = min(B T, {cb // (4 * v)})\n"
    )
    print(
        "| T | tokens | before MB | after MB | min MB | one fp32 (B,T,V) MB | before/after"
        " | after/min |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        est = "est. " if r["before_estimated"] else ""
        print(
            f"| {r['T']} | {r['tokens']:,} | {est}{r['before_mb']:,} | {r['after_mb']:,} "
            f"| {r['min_mb']:,} | {r['btv_fp32_mb']:,} | {r['before_mb'] / r['after_mb']:.1f} "
            f"| {r['after_mb'] / r['min_mb']:.2f} |"
        )
    report = {
        **base,
        "layers": 1,
        "chunk_tokens": max(1, cb // (4 * v)),
        "lengths": rows,
        "check": check,
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
