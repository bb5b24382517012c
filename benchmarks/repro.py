"""Time the default pipeline from scratch and check what RL gained.

    python -m benchmarks.repro [--keep DIR] [-S KEY=VALUE ...] [--seeds 0 1 2]

Copies the committed repository into a scratch git repo (with the `-S` overrides written into
its params.yaml), runs each stage of `dvc repro` in order with its wall time, then a second
`dvc repro` (which must do nothing), and reads
metrics/eval.json and data/eval_samples.parquet to report base vs policy accuracy by level,
the learnable band (levels whose base accuracy lies in [0.1, 0.9]) and, per level, the paired
standard error of the difference (over questions), so a gain can be told from noise.
With `--seeds`, the whole pipeline runs once per top-level `seed` (base model included) and a
table of every seed's levels follows. The last line printed is JSON.
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
import yaml

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["prepare", "base", "profile", "guide", "train", "dynamics", "evaluate"]


def sh(cwd: Path, *cmd: str) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout + done.stderr


def set_params(path: Path, overrides: list[str]) -> None:
    """Apply `KEY=VALUE` overrides (dotted keys, YAML values, as `dvc exp run -S`) to a
    params file; an unknown key is an error, not a new one."""
    if not overrides:
        return
    params = yaml.safe_load(path.read_text())
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            sys.exit(f"-S {item!r}: expected KEY=VALUE")
        *parents, leaf = key.split(".")
        node = params
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            sys.exit(f"-S {item!r}: params.yaml has no key {key!r}")
        node[leaf] = yaml.safe_load(value)
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def scratch_copy(keep: Path | None = None, overrides: list[str] = ()) -> Path:
    """A fresh git repository holding the committed files of this one (in `keep`, or a
    temporary directory), params.yaml with `overrides`."""
    work = keep or Path(tempfile.mkdtemp(prefix="grpo-lab-bench-"))
    if work.exists():
        shutil.rmtree(work)
    for name in sh(ROOT, "git", "ls-files").split():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, work / name)
    set_params(work / "params.yaml", list(overrides))
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


def report(work: Path, timing: dict) -> dict:
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
    return result


def seeds_table(results: dict[int, dict]) -> str:
    """Markdown: base and policy per level, each level's difference (paired se), band, all."""
    levels = sorted(next(iter(results.values()))["levels"])
    head = "| seed | base " + " / ".join(f"L{lv}" for lv in levels) + " | policy | "
    head += " | ".join(f"L{lv} diff (se)" for lv in levels) + " | band | all | time |"
    lines = [head, "|" + "---|" * (len(levels) + 6)]
    for seed, r in results.items():
        lv = r["levels"]
        base = " / ".join(f"{100 * lv[k]['base']:.1f}" for k in levels)
        policy = " / ".join(f"{100 * lv[k]['policy']:.1f}" for k in levels)
        diffs = " | ".join(
            f"{100 * lv[k]['delta']:+.1f} ({100 * lv[k]['se_delta']:.1f})" for k in levels
        )
        lines.append(
            f"| {seed} | {base} | {policy} | {diffs} | {100 * r['band_delta']:+.1f} "
            f"{r['band']} | {100 * r['overall_delta']:+.1f} | {r.get('total_s', 0):.0f} s |"
        )
    return "\n".join(lines)


def run(keep: Path | None, overrides: list[str]) -> dict:
    work = scratch_copy(keep, overrides)
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
    result = report(
        work, {"seconds": times, "total_s": total, "noop_s": noop, "up_to_date": up_to_date}
    )
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--keep", type=Path, help="run in this directory and keep it")
    ap.add_argument(
        "--report", action="store_true", help="only report on the outputs in this workspace"
    )
    ap.add_argument("-S", dest="overrides", action="append", default=[], help="param override")
    ap.add_argument(
        "--seeds", type=int, nargs="+", help="run the whole pipeline once per top-level seed"
    )
    args = ap.parse_args()
    if args.report:
        report(Path.cwd(), {})
        return
    if args.seeds is None:
        run(args.keep, args.overrides)
        return
    results = {}
    for seed in args.seeds:
        print(f"\n== seed {seed}", flush=True)
        keep = args.keep / f"seed-{seed}" if args.keep else None
        results[seed] = run(keep, [*args.overrides, f"seed={seed}"])
    print("\n" + seeds_table(results))
    print(json.dumps({"overrides": args.overrides, "seeds": results}))


if __name__ == "__main__":
    main()
