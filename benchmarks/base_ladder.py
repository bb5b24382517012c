"""How the tiny base's ladder (accuracy per level) moves with the seed, the threads and the
CPU's kernels: SFT alone, measured on the eval split.

    python -m benchmarks.base_ladder --model-seed 1 [-S model.sft.steps=1200 ...]
        [--threads 1] [--curve 100] --out FILE.json
    python -m benchmarks.base_ladder --table FILE.json ...      # the markdown table

Runs the `base` stage's warm start in this process on the workspace's train split
(data/prepared, built by `prepare`), with params.yaml's `model` section and the `-S` overrides,
then samples the base as `evaluate` does (eval.samples per question at eval.temperature, avg@k,
per level). With `--curve N` it also measures every level every N SFT steps (100 questions x 2
samples per level, from a random stream of its own: the training is the same as without). The
kernels are chosen by the environment: `ATEN_CPU_CAPABILITY=avx2` stands in for another CPU.
Run each setting alone when its time matters; the ladder itself does not depend on what else
runs on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import yaml

from benchmarks.repro import set_params

ROOT = Path(__file__).resolve().parents[1]


def level_accuracy(model, tokenizer, problems: list[dict], cfg, seed: int) -> dict[int, float]:
    """avg@cfg.samples per level of `model` on `problems`, sampled from `seed` in a forked
    random stream."""
    import torch

    from grpo_core.analysis.sampling import sample_problems

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        rows = sample_problems(model, tokenizer, problems, cfg, "ladder")
    by_level: dict[int, list[float]] = {}
    for r in rows:
        by_level.setdefault(int(problems[r["index"]]["level"]), []).append(r["reward"] >= 1.0)
    model.train()
    return {lv: float(np.mean(v)) for lv, v in sorted(by_level.items())}


class CurveProbe:
    """Stands in for the calibration probe: measures every level at each check, never stops."""

    def __init__(self, problems, every: int, cfg, seed: int):
        self.problems, self.cfg, self.seed = problems, cfg, seed
        self.stop = SimpleNamespace(first=every, every=every, accuracy=2.0)
        self.curve: list[dict] = []
        self.step = 0

    def accuracy(self, model, tokenizer) -> float:
        self.step += self.stop.every
        levels = level_accuracy(model, tokenizer, self.problems, self.cfg, self.seed)
        self.curve.append({"step": self.step, **{str(k): v for k, v in levels.items()}})
        print(json.dumps(self.curve[-1]), flush=True)
        return 0.0


def measure(args: argparse.Namespace) -> dict:
    import hashlib

    import torch

    from grpo_core.config.params import parse_params
    from grpo_core.data.prompts import guide_wording
    from grpo_core.data.schema import read_problems
    from grpo_core.models.sft import Probe, hold_out_probe, warm_start
    from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model

    torch.set_num_threads(args.threads)
    scratch = Path(args.out).with_suffix(".params.yaml")
    scratch.write_text((ROOT / "params.yaml").read_text())
    set_params(scratch, [*args.overrides, f"model.seed={args.model_seed}"])
    params = parse_params(yaml.safe_load(scratch.read_text()), str(scratch))
    scratch.unlink()
    cfg, seed = params.model, args.model_seed
    train = read_problems(ROOT / "data/prepared/train.parquet").to_pydict()
    evals = read_problems(ROOT / "data/prepared/eval.parquet").to_pylist()
    prompts, targets = train["prompt"], train["solution"]
    levels = np.asarray(train["level"])
    tokenizer = build_char_tokenizer(prompts + targets + guide_wording(prompts))
    model = build_tiny_model(tokenizer, cfg.tiny, seed)
    rows = np.arange(len(prompts))
    probe = None
    if args.curve:
        rng = np.random.default_rng(12345)
        small = [
            p
            for lv in sorted({p["level"] for p in evals})
            for p in rng.permutation([q for q in evals if q["level"] == lv])[:100].tolist()
        ]
        small_cfg = params.eval.model_copy(update={"samples": 2})
        probe = CurveProbe(small, args.curve, small_cfg, 777)
    elif cfg.sft.stop is not None:
        held = hold_out_probe(levels, cfg.sft.stop, seed)
        probe = Probe(
            [prompts[i] for i in held],
            [train["answer"][i] for i in held],
            [train["domain"][i] for i in held],
            cfg.sft.stop,
            seed,
            params.reward.code,
        )
        rows = np.setdiff1d(rows, held)
    t0 = time.perf_counter()
    result = warm_start(
        model,
        tokenizer,
        [prompts[i] for i in rows],
        [targets[i] for i in rows],
        levels[rows],
        cfg.sft,
        seed,
        probe,
    )
    sft_s = time.perf_counter() - t0
    eval_seed = params.seed if params.eval.seed is None else params.eval.seed
    ladder = level_accuracy(model, tokenizer, evals, params.eval, eval_seed)
    out = {
        "model_seed": seed,
        "threads": args.threads,
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR", "AUTO"),
        "overrides": args.overrides,
        "sft_steps": result.steps,
        "sft_s": round(sft_s, 1),
        "ms_per_step": round(1000 * sft_s / max(result.steps, 1), 1),
        "final_loss": result.losses[-1] if result.losses else None,
        "numerics": args.numerics,
        "weights_sha256": hashlib.sha256(
            b"".join(p.detach().numpy().tobytes() for p in model.parameters())
        ).hexdigest()[:16],
        "levels": {str(k): v for k, v in ladder.items()},
    }
    if args.curve:
        out["curve"] = probe.curve
    return out


def table(paths: list[str]) -> str:
    """Markdown: one row per result file, the base's accuracy per level (%)."""
    results = [json.loads(Path(p).read_text()) for p in paths]
    levels = sorted(results[0]["levels"], key=int)
    head = "| numerics | kernels | threads | overrides | model seed | SFT steps | "
    head += " | ".join(f"L{lv}" for lv in levels) + " | weights |"
    lines = [head, "|" + "---|" * (len(levels) + 7)]
    for r in results:
        cells = " | ".join(f"{100 * r['levels'][lv]:.1f}" for lv in levels)
        lines.append(
            f"| {r['numerics']} | {r['aten_cpu_capability']}, MKL {r['mkl_cbwr']} | "
            f"{r['threads']} | "
            f"{' '.join(r['overrides']) or '(defaults)'} | {r['model_seed']} | "
            f"{r['sft_steps']} | {cells} | `{r['weights_sha256']}` |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model-seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--numerics",
        choices=["portable", "native"],
        default="portable",
        help="the kernels, as params.yaml's `numerics` (native: the environment's own)",
    )
    ap.add_argument("--curve", type=int, default=0, help="measure every level every N steps")
    ap.add_argument("-S", dest="overrides", action="append", default=[], help="param override")
    ap.add_argument("--out", help="result JSON")
    ap.add_argument("--table", nargs="+", help="print the table of these result files")
    args = ap.parse_args()
    if args.table:
        print(table(args.table))
        return
    if not args.out:
        sys.exit("--out FILE.json is needed")
    from grpo_core.config.runtime import environment

    os.environ.update(environment(args.numerics, args.threads))  # before torch loads
    result = measure(args)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "curve"}))


if __name__ == "__main__":
    main()
