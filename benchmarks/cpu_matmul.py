"""What a matmul costs on this CPU in float32 and in bfloat16: whether `dtype: bfloat16` is a
speed-up here or a slow-down.

    python -m benchmarks.cpu_matmul [--threads 2] [--out FILE]

Times `torch.matmul` (the weight in either layout) and `torch.nn.functional.linear` at
SmolLM2-135M's MLP shapes (2,048 rows x 576 x 1,536: a micro-batch of an update; and 64 rows:
a decoding step) in float32 and in
bfloat16, at `--threads`, under this CPU's own kernels, and prints GFLOP/s with the CPU's name
and whether oneDNN reports bf16 support (`grpo_core.models.precision.bf16_is_native`). On a CPU
with AMX, bf16 runs several times faster than float32; on an AVX2-only CPU torch computes bf16
with fallback kernels, many times slower. Run it alone: another job on the same cores changes
every number. The last line printed is JSON; `--out` writes a Markdown table and the JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from grpo_core.models.precision import bf16_is_native, cpu_name

SHAPES = {
    "update (2048 x 576 x 1536)": (2048, 576, 1536),
    "decode (64 x 576 x 1536)": (64, 576, 1536),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def rate(fn, flop: float, budget_s: float = 3.0) -> float:
    """GFLOP/s of `fn` (called once to warm up, then until `budget_s` has passed, at least
    twice)."""
    fn()
    n, start = 0, time.perf_counter()
    while n < 2 or time.perf_counter() - start < budget_s:
        fn()
        n += 1
    return flop * n / (time.perf_counter() - start) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    for shape, (m, k, n) in SHAPES.items():
        for name, dtype in DTYPES.items():
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
            b_kn = b.T.contiguous()  # (k, n): the other layout of the weight
            flop = 2.0 * m * k * n
            rows.append(
                {
                    "shape": shape,
                    "dtype": name,
                    "matmul_gflops": round(rate(lambda a=a, b=b: a @ b.T, flop), 1),
                    "matmul_kn_gflops": round(rate(lambda a=a, b=b_kn: a @ b, flop), 1),
                    "linear_gflops": round(
                        rate(lambda a=a, b=b: torch.nn.functional.linear(a, b), flop), 1
                    ),
                }
            )
    result = {
        "cpu": cpu_name(),
        "bf16_native": bf16_is_native(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": args.threads,
        "torch": torch.__version__,
        "rows": rows,
    }
    if args.out:
        table = [
            f"# matmul in float32 and bfloat16 on {result['cpu']}",
            "",
            f"`python -m benchmarks.cpu_matmul --threads {args.threads}`, alone; torch "
            f"{torch.__version__}, ATen kernels {result['cpu_capability']}, oneDNN bf16 support: "
            f"{'yes' if result['bf16_native'] else 'no'}.",
            "",
            "| shape | dtype | a @ b.T GFLOP/s | a @ b, b (k, n) GFLOP/s | linear GFLOP/s |",
            "|---|---|---|---|---|",
            *(
                f"| {r['shape']} | {r['dtype']} | {r['matmul_gflops']} | {r['matmul_kn_gflops']} | "
                f"{r['linear_gflops']} |"
                for r in rows
            ),
        ]
        args.out.write_text("\n".join(table) + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
