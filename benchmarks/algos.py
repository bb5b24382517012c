"""Compare the five algorithm presets on the tiny world at the same params.

    python -m benchmarks.algos [--keep DIR] [--samples-dir DIR] [-S KEY=VALUE ...]

In a scratch copy of the committed repository: `dvc repro` once (with the `-S` overrides, so
data, base model, profile and guides are built once and shared), then `dvc exp run -S algo=X`
for each preset. Prints, per level, base accuracy and each preset's policy accuracy with the
paired standard error of its difference to the base, plus the rollouts each preset generated
(`num_rollouts`, summed over steps) and its train time. The last line printed is JSON.
`--samples-dir DIR` keeps each run's evaluation completions (`DIR/<run>/eval_samples.parquet`),
for re-scoring them later (`python -m benchmarks.rescore`).
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import time
from pathlib import Path

from benchmarks.repro import paired_levels, scratch_copy, sh
from grpo_core.algorithms.presets import ALGOS


def total_rollouts(work: Path) -> int:
    path = work / "metrics/train/plots/metrics/num_rollouts.tsv"
    with path.open() as f:
        return int(sum(float(r["num_rollouts"]) for r in csv.DictReader(f, delimiter="\t")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--keep", type=Path, help="run in this directory and keep it")
    ap.add_argument("--samples-dir", type=Path, help="keep each run's eval completions here")
    ap.add_argument("-S", dest="overrides", action="append", default=[], help="param override")
    ap.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="NAME:ALGO:KEY=VALUE,...",
        help="a further run, e.g. oc-uncorrected:oc_grpo:train.oc_grpo.correction=none",
    )
    args = ap.parse_args()
    work = scratch_copy(args.keep)
    sets = [x for o in args.overrides for x in ("-S", o)]
    t0 = time.perf_counter()
    sh(work, "dvc", "exp", "run", *sets, "--name", "shared")
    print(f"shared stages: {time.perf_counter() - t0:.0f} s", flush=True)
    runs = [(algo, algo, []) for algo in args.algos]
    for spec in args.also:
        name, algo, extra = (spec.split(":", 2) + [""])[:3]
        runs.append((name, algo, [x for kv in extra.split(",") if kv for x in ("-S", kv)]))
    results = {}
    for name, algo, extra in runs:
        t0 = time.perf_counter()
        # `dvc exp run -S` leaves its params in the workspace: start each run from the
        # committed params.yaml, so no run inherits the previous run's overrides.
        sh(work, "git", "checkout", "--", "params.yaml")
        sh(work, "dvc", "exp", "run", *sets, "-S", f"algo={algo}", *extra, "--name", name)
        seconds = time.perf_counter() - t0
        if args.samples_dir:
            (args.samples_dir / name).mkdir(parents=True, exist_ok=True)
            kept = args.samples_dir / name / "eval_samples.parquet"
            shutil.copy2(work / "data/eval_samples.parquet", kept)
        results[name] = {
            "levels": paired_levels(work / "data/eval_samples.parquet"),
            "rollouts": total_rollouts(work),
            "seconds": round(seconds, 1),
        }
        print(f"{name}: {seconds:.0f} s, {results[name]['rollouts']} rollouts", flush=True)

    levels = sorted(next(iter(results.values()))["levels"])
    base = {lv: next(iter(results.values()))["levels"][lv]["base"] for lv in levels}
    print("\nlevel   base  " + "  ".join(f"{a:>14s}" for a in results))
    for lv in levels:
        cells = []
        for r in results.values():
            x = r["levels"][lv]
            cells.append(
                f"{100 * x['policy']:5.1f} ({100 * x['delta']:+.1f}±{100 * x['se_delta']:.1f})"
            )
        print(f"L{lv}    {100 * base[lv]:5.1f}  " + "  ".join(f"{c:>14s}" for c in cells))
    print("rollouts      " + "  ".join(f"{r['rollouts']:>14d}" for r in results.values()))
    print(json.dumps({"overrides": args.overrides, "results": results}))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
