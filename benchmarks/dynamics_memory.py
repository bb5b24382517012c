"""Peak memory of `grpo_core.analysis.tensor_dynamics.tensor_dynamics` on a 100M+ parameter model.

    python -m benchmarks.dynamics_memory [--keep DIR] [--checkpoints 3]

Builds locally (no hub) a Llama-architecture model: hidden 768, 12 layers, 12 heads (no GQA),
MLP 2048, vocab 32000, untied embeddings (so lm_head.weight is a tensor of its own): 134M
parameters, saved as the base by `save_pretrained` in float32. Then writes N checkpoints
W_k = W_0 + k * (a fixed update) + (a fresh update of step k), tensor by tensor into a
streamed safetensors file, so no checkpoint is ever whole in memory:
attention projections get rank-8 updates, MLP weights and lm_head sparse dense ones (a random
quarter of the entries), embeddings move on 2,000 token rows only, norms get small noise;
relative update about 1e-3 per step.

Then, each in a fresh subprocess: a baseline child that only imports torch, pyarrow and
grpo_core.analysis.tensor_dynamics, and a child that runs `tensor_dynamics` over the checkpoints
with the
default settings (svd="auto": exact up to 1024 rows or columns, which here is every tensor).
Each child runs under a bare launcher process that reports
`resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`, its only child's peak RSS (see `child` for
why not from this process); the run child cross-checks with its own VmHWM.
The target: peak RSS < 3x one checkpoint's size on disk. The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CONFIG = dict(
    vocab_size=32000,
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=12,
    num_attention_heads=12,
    num_key_value_heads=12,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
)
REL_STEP = 1e-3  # relative size of each step's update
LOW_RANK = 8

LAUNCHER = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-4000:],
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""
BASELINE = "import torch, pyarrow, grpo_core.analysis.tensor_dynamics"
RUN = """
import json, sys, time
from grpo_core.analysis.tensor_dynamics import tensor_dynamics, aggregate
base, ckpts = sys.argv[1], json.loads(sys.argv[2])
start = time.perf_counter()
table = tensor_dynamics(base, [(s, p) for s, p in ckpts], progress=False)
seconds = time.perf_counter() - start
by_module = aggregate(table, by=("step", "module")).to_pylist()
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"seconds": seconds, "rows": table.num_rows, "by_module": by_module,
                  "vmhwm_kb": int(hwm)}))
"""


def write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]], tensor_of) -> None:
    """A float32 safetensors file written one tensor at a time: the header first (offsets
    from the shapes), then each tensor's bytes as `tensor_of(name)` makes it."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        nbytes = 4 * torch.Size(shape).numel()
        header[name] = {
            "dtype": "F32",
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    with path.open("wb") as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        for name, shape in shapes.items():
            tensor = tensor_of(name).to(torch.float32).contiguous()
            assert tuple(tensor.shape) == tuple(shape), name
            f.write(memoryview(tensor.numpy()).cast("B"))


def update(name: str, w0: torch.Tensor, seed: int) -> torch.Tensor:
    """A random update of `w0` with relative Frobenius size REL_STEP, shaped by module type."""
    from grpo_core.analysis.tensor_dynamics import classify

    g = torch.Generator().manual_seed(seed)
    _, module = classify(name)
    if module in ("q", "k", "v", "o"):
        b = torch.randn(w0.shape[0], LOW_RANK, generator=g)
        a = torch.randn(LOW_RANK, w0.shape[1], generator=g)
        delta = b @ a
    elif module == "embed":
        delta = torch.zeros_like(w0)
        rows = torch.randperm(w0.shape[0], generator=g)[:2000]
        delta[rows] = torch.randn(len(rows), w0.shape[1], generator=g)
    elif module == "norm":
        delta = torch.randn(w0.shape, generator=g)
    else:  # MLP and lm_head: a random quarter of the entries
        delta = torch.randn(w0.shape, generator=g)
        delta *= torch.rand(w0.shape, generator=g) < 0.25
    return delta * (REL_STEP * w0.norm() / delta.norm())


def build(work: Path, n_checkpoints: int) -> tuple[Path, list[tuple[int, str]], int]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG))
    params = sum(p.numel() for p in model.parameters())
    base = work / "base"
    model.save_pretrained(base)
    state = model.state_dict()
    del model
    shapes = {name: tuple(t.shape) for name, t in sorted(state.items())}
    checkpoints = []
    for k in range(1, n_checkpoints + 1):
        directory = work / f"step-{10 * k}"
        directory.mkdir()
        shutil.copy(base / "config.json", directory / "config.json")

        def tensor_of(name: str, k: int = k) -> torch.Tensor:
            w0 = state[name]
            seed = zlib.crc32(name.encode())  # the fixed direction of this tensor
            drift = update(name, w0, seed) * k + update(name, w0, seed + k) * 0.5
            return w0 + drift

        write_safetensors(directory / "model.safetensors", shapes, tensor_of)
        checkpoints.append((10 * k, str(directory)))
    return base, checkpoints, params


def child(code: str, *args: str) -> tuple[str, int]:
    """Run `python -c code args` from the repository root through a small launcher; the
    child's stdout and its peak RSS (bytes) as the launcher's RUSAGE_CHILDREN reports it.

    Why a launcher: Linux keeps a process's RSS high-water mark across exec, and a child
    forked from this process (over 1 GiB after building the model) starts with this
    process's RSS as its own peak. The launcher is a bare Python (~10 MB), so the peak it
    reports is the child's own.
    """
    done = subprocess.run(
        [sys.executable, "-S", "-c", LAUNCHER, sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    result = json.loads(done.stdout) if done.returncode == 0 else {"rc": done.returncode}
    if result["rc"]:
        sys.exit(f"child failed:\n{done.stdout}\n{done.stderr}")
    return result["stdout"], result["maxrss_kb"] * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--keep", type=Path, help="build in this directory and keep it")
    ap.add_argument("--checkpoints", type=int, default=3)
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="dynamics-memory-"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    try:
        start = time.perf_counter()
        base, checkpoints, params = build(work, args.checkpoints)
        checkpoint_bytes = sum(p.stat().st_size for p in Path(checkpoints[0][1]).iterdir())
        print(
            f"built {params / 1e6:.1f}M params, {len(checkpoints)} checkpoints of "
            f"{checkpoint_bytes / 2**20:.0f} MiB in {time.perf_counter() - start:.0f} s ({work})",
            flush=True,
        )
        _, baseline = child(BASELINE)
        print(f"baseline child (imports only): peak RSS {baseline / 2**20:.0f} MiB", flush=True)
        start = time.perf_counter()
        out, peak = child(RUN, str(base), json.dumps(checkpoints))
        wall = time.perf_counter() - start
        report = json.loads(out.strip().splitlines()[-1])
        print(
            f"tensor_dynamics child: peak RSS {peak / 2**20:.0f} MiB (its own VmHWM: "
            f"{report['vmhwm_kb'] / 2**10:.0f} MiB), {report['rows']} rows, "
            f"{report['seconds']:.1f} s in tensor_dynamics, {wall:.1f} s wall",
            flush=True,
        )
        head = ("step", "module", "rel_update", "changed", "stable", "erank")
        print("{:>5} {:>8} {:>11} {:>8} {:>7} {:>7}".format(*head))
        for r in report["by_module"]:
            if r["step"] == checkpoints[-1][0]:
                ranks = [
                    "-" if r[c] is None else f"{r[c]:.1f}"
                    for c in ("stable_rank", "effective_rank")
                ]
                print(
                    f"{r['step']:>5} {r['module']:>8} {r['rel_update']:>11.2e} "
                    f"{r['changed_frac']:>8.3f} {ranks[0]:>7} {ranks[1]:>7}"
                )
        print(
            json.dumps(
                {
                    "params": params,
                    "checkpoint_bytes": checkpoint_bytes,
                    "peak_rss_bytes": peak,
                    "baseline_rss_bytes": baseline,
                    "ratio_peak_to_checkpoint": round(peak / checkpoint_bytes, 3),
                    "seconds": round(report["seconds"], 1),
                }
            )
        )
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
