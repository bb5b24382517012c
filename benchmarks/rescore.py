"""Re-score stored evaluation completions with today's verifiers: how much of a result was
reward hacking (or a verifier's mistake) rather than solved problems.

    python -m benchmarks.rescore NAME=SAMPLES.parquet [...] [--problems data/prepared/eval.parquet]
                                 [--json OUT.json]

Each SAMPLES file is an `evaluate` stage's `data/eval_samples.parquet` (the default run's, or
one per preset from `python -m benchmarks.algos --samples-dir DIR`), or a study cell's or base
seed's `completions.parquet` (its model is then "model"); its stored `reward` is
what the verifiers said when it was written. Every sampled completion is verified again
against its problem's gold answer (from `--problems`, the prepared eval split it was sampled
on), and avg@k accuracy per model and level is printed before and after, with how many
completions changed reward and a few of them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyarrow.parquet as pq

from grpo_core.rewards.code import CodeRewardConfig
from grpo_core.rewards.verify import verify_batch


def rescore(samples: Path, problems: dict[str, dict]) -> dict:
    """Per model and level: accuracy before (stored) and after (re-verified), the number of
    completions whose reward changed, and up to three of them."""
    rows = [
        r for r in pq.read_table(samples).to_pylist() if r.get("decoding", "sampled") == "sampled"
    ]
    missing = sorted({r["id"] for r in rows} - set(problems))
    if missing:
        raise SystemExit(f"{samples}: {len(missing)} ids not in --problems, e.g. {missing[:3]}")
    after = verify_batch(  # code all or nothing, as every sampled evaluation scores it
        [problems[r["id"]]["domain"] for r in rows],
        [r["completion"] for r in rows],
        [problems[r["id"]]["answer"] for r in rows],
        CodeRewardConfig(binary=True),
    )
    out: dict[str, dict] = {}
    for r, new in zip(rows, after, strict=True):
        cell = out.setdefault(r.get("model", "model"), {}).setdefault(
            str(r["level"]), {"n": 0, "before": 0.0, "after": 0.0, "changed": 0, "examples": []}
        )
        cell["n"] += 1
        cell["before"] += r["reward"]
        cell["after"] += new
        if new != r["reward"]:
            cell["changed"] += 1
            if len(cell["examples"]) < 3:
                cell["examples"].append(
                    {
                        "completion": r["completion"],
                        "gold": problems[r["id"]]["answer"],
                        "before": r["reward"],
                        "after": new,
                    }
                )
    for levels in out.values():
        for cell in levels.values():
            cell["before"] /= cell["n"]
            cell["after"] /= cell["n"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="NAME=SAMPLES", help="a name and its samples file")
    ap.add_argument("--problems", type=Path, default=Path("data/prepared/eval.parquet"))
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    problems = {p["id"]: p for p in pq.read_table(args.problems).to_pylist()}
    results = {}
    for spec in args.runs:
        name, sep, path = spec.partition("=")
        if not sep:
            raise SystemExit(f"{spec!r}: expected NAME=SAMPLES.parquet")
        results[name] = rescore(Path(path), problems)
    print("| run | model | level | before | after | change | completions changed |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name, models in results.items():
        for model, levels in models.items():
            for level, c in sorted(levels.items()):
                print(
                    f"| {name} | {model} | {level} | {100 * c['before']:.1f} | "
                    f"{100 * c['after']:.1f} | {100 * (c['after'] - c['before']):+.1f} | "
                    f"{c['changed']} of {c['n']} |"
                )
    for name, models in results.items():
        for model, levels in models.items():
            for level, c in sorted(levels.items()):
                for ex in c["examples"]:
                    print(f"{name} {model} L{level}: {ex}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
