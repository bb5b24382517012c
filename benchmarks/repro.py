"""Time the default pipeline from scratch and check what RL gained.

    python -m benchmarks.repro [--keep DIR]

Copies the committed repository into a scratch git repo, runs each stage of `dvc repro`
in order with its wall time, then a second `dvc repro` (which must do nothing), and reads
metrics/eval.json and data/eval_samples.parquet to report base vs policy accuracy by level,
the learnable band (levels whose base accuracy lies in [0.1, 0.9]) and, per level, the paired
standard error of the difference (over questions), so a gain can be told from noise.
The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["prepare", "base", "profile", "guide", "train", "evaluate"]


def sh(cwd: Path, *cmd: str) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout + done.stderr


def scratch_copy(keep: Path | None = None) -> Path:
    """A fresh git repository holding the committed files of this one (in `keep`, or a
    temporary directory)."""
    work = keep or Path(tempfile.mkdtemp(prefix="grpo-lab-bench-"))
    if work.exists():
        shutil.rmtree(work)
    for name in sh(ROOT, "git", "ls-files").split():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, work / name)
    sh(work, "git", "init", "-q")
    sh(work, "git", "add", "-A")
    sh(work, "git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "bench")
    return work


def paired_levels(samples_path: Path) -> dict[int, dict[str, float]]:
    t = pq.read_table(samples_path).to_pandas()
    if "decoding" in t:  # greedy rows are reported apart, as `greedy` in metrics/eval.json
        t = t[t["decoding"] == "sampled"]
    per_q = t.groupby(["model", "level", "id"])["reward"].mean().unstack("model")
    out = {}
    for level, frame in per_q.groupby(level="level"):
        d = frame["policy"] - frame["base"]
        out[int(level)] = {
            "base": float(frame["base"].mean()),
            "policy": float(frame["policy"].mean()),
            "delta": float(d.mean()),
            "se_delta": float(d.std(ddof=1) / np.sqrt(len(d))),
            "questions": len(d),
        }
    return out


def report(work: Path, timing: dict) -> None:
    levels = paired_levels(work / "data/eval_samples.parquet")
    print("\nlevel   base  policy   delta  (se)   questions")
    for lv, r in levels.items():
        print(
            f"L{lv}   {100 * r['base']:6.1f} {100 * r['policy']:6.1f} {100 * r['delta']:+7.1f}"
            f"  ({100 * r['se_delta']:.1f})  {r['questions']}"
        )
    band = [lv for lv, r in levels.items() if 0.1 <= r["base"] <= 0.9]
    band_delta = float(np.mean([levels[lv]["delta"] for lv in band])) if band else float("nan")
    overall = float(np.mean([r["delta"] for r in levels.values()]))
    worst = min(r["delta"] for r in levels.values())
    print(
        f"\nlearnable band {band}: {100 * band_delta:+.1f} points; all levels: "
        f"{100 * overall:+.1f}; worst level: {100 * worst:+.1f}"
    )
    result = {
        **timing,
        "levels": levels,
        "band": band,
        "band_delta": band_delta,
        "overall_delta": overall,
        "worst_level_delta": worst,
    }
    print(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--keep", type=Path, help="run in this directory and keep it")
    ap.add_argument(
        "--report", action="store_true", help="only report on the outputs in this workspace"
    )
    args = ap.parse_args()
    if args.report:
        report(Path.cwd(), {})
        return
    work = scratch_copy(args.keep)

    times = {}
    start = time.perf_counter()
    for stage in STAGES:
        t0 = time.perf_counter()
        sh(work, "dvc", "repro", "--single-item", "--force", stage)
        times[stage] = round(time.perf_counter() - t0, 1)
        print(f"{stage:9s} {times[stage]:7.1f} s", flush=True)
    total = round(time.perf_counter() - start, 1)
    t0 = time.perf_counter()
    again = sh(work, "dvc", "repro")
    noop = round(time.perf_counter() - t0, 1)
    up_to_date = "up to date" in again
    print(f"total     {total:7.1f} s; second `dvc repro`: {noop} s (up to date: {up_to_date})")
    report(work, {"seconds": times, "total_s": total, "noop_s": noop, "up_to_date": up_to_date})
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
