"""Off-Context GRPO against GRPO and the uncorrected baselines, over training seeds.

    python -m benchmarks.offcontext [--keep DIR] [--seeds 0 1 2] [--variants ...] [-S KEY=VALUE]
                                    [--out benchmarks/results/offcontext-levels-3-5.json]
    python -m benchmarks.offcontext --report   # the tables of --out, in seconds

In a scratch copy of the committed repository (`--keep DIR` to keep it, and to resume): the
stages up to `guide` once (`-S` overrides, default `train.levels=[3,4,5]`), then one
`dvc exp run ... evaluate` per variant and training seed (`train.seed`; data, base model,
profile and guides are shared; `dynamics` is not run). After
each cell the per-question held-out accuracies (avg@eval.samples) of base and policy, the
rollouts and the OC-GRPO weight metrics go into `--out`, so a stopped run resumes at the next
cell. Prints per variant and level: accuracy (mean over seeds), the difference to the base and
to `grpo`, each paired by seed and question with its standard error over seeds, and the
rollouts each spent.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from benchmarks.algos import total_rollouts
from benchmarks.repro import scratch_copy, sh

VARIANTS: dict[str, list[str]] = {
    "grpo": ["algo=grpo"],
    "oc_fixed": ["algo=oc_grpo"],
    "oc_adaptive": ["algo=oc_grpo", "train.oc_grpo.mode=adaptive"],
    "none": ["algo=oc_grpo", "train.oc_grpo.correction=none"],
    "hinted": ["algo=oc_grpo", "train.oc_grpo.correction=hinted"],
    "prefix_rl": ["algo=oc_grpo", "train.oc_grpo.correction=prefix_rl"],
}
OC_METRICS = ("oc/guided_groups", "oc/guided_solved", "oc/weight_mean", "oc/weight_at_floor")


def per_question(samples: Path) -> dict[str, dict[str, dict[str, float]]]:
    """model -> level -> question id -> mean reward over its sampled completions."""
    t = pq.read_table(samples).to_pandas()
    if "decoding" in t:
        t = t[t["decoding"] == "sampled"]
    means = t.groupby(["model", "level", "id"])["reward"].mean()
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (model, level, qid), value in means.items():
        out.setdefault(model, {}).setdefault(str(level), {})[qid] = round(float(value), 4)
    return out


def step_means(work: Path, names: tuple[str, ...]) -> dict[str, float]:
    """The mean over steps of each logged training metric in `names` that the run has."""
    out = {}
    for name in names:
        path = work / "metrics/train/plots/metrics" / f"{name}.tsv"
        if path.exists():
            with path.open() as f:
                values = [
                    float(r[name.rsplit("/", 1)[-1]]) for r in csv.DictReader(f, delimiter="\t")
                ]
            out[name] = float(np.mean(values))
    return out


def paired(cells: dict, variant: str, other: str | None, level: str) -> dict[str, float] | None:
    """Mean accuracy of `variant` at `level` over seeds, and its difference to `other` (None:
    the base model), paired by seed and question: per seed the mean over questions of the
    difference, then the mean and standard error over seeds."""
    seeds = sorted(set(cells.get(variant, {})) & set(cells.get(other or variant, {})))
    if not seeds:
        return None
    acc, diffs = [], []
    for s in seeds:
        mine = cells[variant][s]["policy"][level]
        ref = cells[other][s]["policy"][level] if other else cells[variant][s]["base"][level]
        ids = sorted(mine)
        acc.append(np.mean([mine[i] for i in ids]))
        diffs.append(np.mean([mine[i] - ref[i] for i in ids]))
    n = len(seeds)
    se = float(np.std(diffs, ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    return {"acc": float(np.mean(acc)), "delta": float(np.mean(diffs)), "se": se, "seeds": n}


def table(cells: dict, levels: list[str]) -> str:
    lines = [
        "variant       "
        + "".join(f"L{lv} acc  vs base     vs grpo      " for lv in levels)
        + "rollouts  weight  at floor"
    ]
    for variant in cells:
        row = f"{variant:13s} "
        for lv in levels:
            b, g = paired(cells, variant, None, lv), paired(cells, variant, "grpo", lv)
            row += f"{100 * b['acc']:5.1f}  {100 * b['delta']:+5.1f}±{100 * b['se']:3.1f}  "
            row += (
                f"{100 * g['delta']:+5.1f}±{100 * g['se']:3.1f}   "
                if g and variant != "grpo"
                else " " * 14
            )
        runs = list(cells[variant].values())
        rollouts = np.mean([r["rollouts"] for r in runs])
        w = [r["oc"].get("oc/weight_mean") for r in runs if "oc/weight_mean" in r["oc"]]
        floor = [r["oc"].get("oc/weight_at_floor") for r in runs if "oc/weight_at_floor" in r["oc"]]
        row += f"{rollouts:8.0f}  " + (f"{np.mean(w):6.3f}  {np.mean(floor):8.3f}" if w else "")
        lines.append(row)
    return "\n".join(lines)


def markdown(cells: dict, levels: list[str]) -> str:
    """The table of `table` as markdown, accuracies in percent."""
    head = "| variant | " + " | ".join(f"L{lv}: acc, vs base, vs grpo" for lv in levels)
    lines = [head + " | rollouts | mean w | w at floor |", "|---" * (len(levels) + 4) + "|"]
    for variant in cells:
        row = f"| `{variant}` |"
        for lv in levels:
            b, g = paired(cells, variant, None, lv), paired(cells, variant, "grpo", lv)
            vs = f"{100 * g['delta']:+.1f} ({100 * g['se']:.1f})" if variant != "grpo" else ""
            row += f" {100 * b['acc']:.1f}, {100 * b['delta']:+.1f} ({100 * b['se']:.1f}), {vs} |"
        runs = list(cells[variant].values())
        w = [r["oc"]["oc/weight_mean"] for r in runs if "oc/weight_mean" in r["oc"]]
        floor = [r["oc"]["oc/weight_at_floor"] for r in runs if "oc/weight_at_floor" in r["oc"]]
        row += f" {np.mean([r['rollouts'] for r in runs]):,.0f} |"
        row += f" {np.mean(w):.3f} | {100 * np.mean(floor):.1f}% |" if w else " | |"
        lines.append(row)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--keep", type=Path, help="run in this directory and keep it (resumable)")
    ap.add_argument("-S", dest="overrides", action="append", default=None, help="shared override")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="train.seed values")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument(
        "--out", type=Path, default=Path("benchmarks/results/offcontext-levels-3-5.json")
    )
    ap.add_argument(
        "--report", action="store_true", help="print the tables of --out as it is, run nothing"
    )
    args = ap.parse_args()
    if args.report:
        cells = json.loads(args.out.read_text())["cells"]
        levels = sorted(next(iter(next(iter(cells.values())).values()))["policy"])
        print(table(cells, levels) + "\n\n" + markdown(cells, levels))
        return
    overrides = args.overrides if args.overrides is not None else ["train.levels=[3,4,5]"]
    result = {"overrides": overrides, "cells": {}}
    if args.out.exists():
        saved = json.loads(args.out.read_text())
        if saved.get("overrides") == overrides:
            result = saved
    cells = result["cells"]
    resume = args.keep is not None and (args.keep / ".dvc").exists()
    work = args.keep if resume else scratch_copy(args.keep)
    sets = [x for o in overrides for x in ("-S", o)]
    t0 = time.perf_counter()
    sh(work, "dvc", "exp", "run", *sets, "--name", "shared", "guide")
    print(f"shared stages: {time.perf_counter() - t0:.0f} s", flush=True)
    todo = [(v, s) for s in args.seeds for v in args.variants if str(s) not in cells.get(v, {})]
    for k, (variant, seed) in enumerate(todo, start=1):
        t0 = time.perf_counter()
        sh(work, "git", "checkout", "--", "params.yaml")
        extra = [x for o in VARIANTS[variant] for x in ("-S", o)]
        name = f"{variant.replace('_', '-')}-s{seed}"
        seed_set = ["-S", f"train.seed={seed}"]
        sh(work, "dvc", "exp", "run", *sets, *extra, *seed_set, "--name", name, "evaluate")
        seconds = time.perf_counter() - t0
        accs = per_question(work / "data/eval_samples.parquet")
        cells.setdefault(variant, {})[str(seed)] = {
            "policy": accs["policy"],
            "base": accs["base"],
            "rollouts": total_rollouts(work),
            "seconds": round(seconds, 1),
            "oc": step_means(work, OC_METRICS),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(args.out)
        print(f"[{k}/{len(todo)}] {name}: {seconds:.0f} s", flush=True)
    levels = sorted(next(iter(next(iter(cells.values())).values()))["policy"])
    print(table(cells, levels))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
