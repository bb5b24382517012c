"""The five presets on the committed params, side by side: what docs/sharing-and-experiments.md
shows and scripts/doc_numbers.py reads.

    python -m benchmarks.presets            # run the four other presets, write the results
    python -m benchmarks.presets --report   # only rewrite the results from the experiments

Runs `dvc exp run --temp -n <preset> -S algo=<preset>` for dr_grpo, dapo, codapo and oc_grpo
against the committed run (HEAD: grpo), one at a time, then writes
benchmarks/results/compare-presets.txt (`python -m stages.compare` of the four, the committed
run the baseline) and compare-presets.json (each run's last-5-steps reward, rollouts and
held-out accuracy, from `dvc exp show --json`). Run it after committing the default run: the
baseline row is that commit (`--rev`, HEAD by default, read once at the start).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OTHERS = ["dr_grpo", "dapo", "codapo", "oc_grpo"]
OUT = ROOT / "benchmarks/results/compare-presets"


def run(*cmd: str) -> str:
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def summary(state: dict) -> dict:
    """One run's row of compare-presets.json from its `dvc exp show --json` state."""
    metrics = state["data"]["metrics"]
    train = metrics["metrics/train.json"]["data"]
    evaluation = metrics["metrics/eval.json"]["data"]
    return {
        "last_5_steps_reward": train["last_5_steps"]["reward"],
        "rollouts": train["rollouts"],
        "policy_accuracy": evaluation["policy"]["arith"]["accuracy"],
    }


def report(rev: str) -> None:
    head = run("git", "rev-parse", "--short", rev).strip()
    shown = json.loads(run(sys.executable, "-m", "dvc", "exp", "show", "--json", "--rev", head))
    commit = next(e for e in shown if e["rev"] != "workspace")  # the workspace comes first
    runs = {"grpo": summary(commit)}
    for exp in commit.get("experiments") or []:
        if exp.get("name") in OTHERS:
            runs[exp["name"]] = summary(exp["revs"][0])
    missing = [p for p in OTHERS if p not in runs]
    if missing:
        sys.exit(f"no experiment {missing} on {rev}: run `python -m benchmarks.presets` first")
    table = run(sys.executable, "-m", "stages.compare", "--rev", head, *OTHERS)
    OUT.with_suffix(".txt").write_text(table)
    command = (
        f"dvc exp show --json --rev {head} (the presets run as dvc exp run --temp -n <preset> "
        f"-S algo=<preset>, {date.today()}, python -m benchmarks.presets)"
    )
    text = json.dumps({"command": command, "runs": runs}, indent=1)
    OUT.with_suffix(".json").write_text(text + "\n")
    print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--report", action="store_true", help="only rewrite the results")
    ap.add_argument("--rev", default="HEAD", help="the commit the experiments run from")
    args = ap.parse_args()
    rev = run("git", "rev-parse", args.rev).strip()  # fixed now: HEAD may move meanwhile
    if not args.report:
        for preset in OTHERS:
            print(f"dvc exp run --temp -n {preset} -S algo={preset}", flush=True)
            run(sys.executable, "-m", "dvc", "exp", "run", "--temp", "-n", preset,
                "-S", f"algo={preset}")  # fmt: skip
    report(rev)


if __name__ == "__main__":
    main()
