"""Short runs of one study cell at several learning rates: which rate learns fastest without
coming apart, measured on one seed before a study spends its hours on it.

    python -m benchmarks.lr_probe studies/smollm2 --variant grpo --seed 2 --steps 10 \\
        --lrs 2e-5 5e-5 1e-4 [--set train.lora.r=8 ...] [--out benchmarks/results/smollm2-lr.md]
        [--extend]

Each rate trains the cell's own params (`grpo_core.studies.spec.cell_params`: the study's
params, the variant's and the seed's) with `train.lr` and `train.steps` replaced, in a scratch
workspace beside the study's cells (studies/<name>/.work/lr-<rate>-<seed>/, removed after).
A rate the cell itself was trained at (its run.json says which) is read from the cell's step
metrics instead (studies/<name>/cells/<variant>-<seed>/train.csv, its first `--steps` steps:
the warm-up and constant rate after it make a short run the start of the long one), unless
`--retrain`.
`--set KEY=VALUE` (a dotted params key, the value read as YAML) changes the cell's params for
every rate, e.g. the LoRA rank (`--set train.lora.r=8 --set train.lora.alpha=16`): a probe of
another setting at the chosen rate; the cell's own step metrics are then never read in its
place.
With `--extend`, the rates the `--out` file already holds (an earlier run on the same cell
and steps) are kept, and only the new ones train.

Reported per rate, from the step metrics: the training reward (mean over the first and the
second half of the steps), the held-out accuracy at every `train.heldout` evaluation (the
cell's params must turn it on), the mean gradient norm, the last step's completion length
and truncated share, and the run's time. One seed and a few steps: a rate that is far worse
or comes apart shows; a difference under the held-out sample's noise (about
sqrt(p(1-p)/questions)) does not, and the table says so.

Run it from the repository's root, alone on the machine. The last line printed is JSON;
`--out` writes the table (Markdown) and the JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from pathlib import Path

import yaml

from grpo_core.config.core import read_yaml
from grpo_core.studies import cells
from grpo_core.studies.spec import cell_key, cell_params, check_params, load_study, set_dotted

ROOT = Path.cwd()  # the repository, as for the study stages (stages/study_cell.py)


def summarize(steps_csv: str, steps: int) -> dict:
    """The probe's numbers from a cell's step-metrics CSV (`cells.step_table`), its first
    `steps` steps."""
    if steps < 2:
        raise ValueError(f"--steps {steps}: the probe compares two halves, it needs 2 or more")
    lines = steps_csv.splitlines()
    head = [lines[0], *[r for r in lines[1:] if int(r.split(",")[0]) < steps]]
    table = "\n".join(head) + "\n"
    names = lines[0].split(",")

    def col(name: str) -> list[float]:
        return cells.column(table, name) if name in names else []

    reward = col("rewards/correct/mean") or col("reward")
    if len(reward) < steps:
        raise ValueError(f"{len(reward)} steps of metrics, the probe needs {steps}")
    half = steps // 2
    heldout = []
    if "heldout/accuracy" in names:
        i_step, i_acc = names.index("step"), names.index("heldout/accuracy")
        for r in head[1:]:
            values = r.split(",")
            if values[i_acc] != "":
                heldout.append([int(values[i_step]) + 1, round(float(values[i_acc]), 3)])
    grad = col("grad_norm")
    return {
        "reward_first_half": round(sum(reward[:half]) / half, 3),
        "reward_second_half": round(sum(reward[half:]) / (steps - half), 3),
        "heldout": heldout,
        "grad_norm_mean": round(sum(grad) / len(grad), 3) if grad else None,
        "length_last": col("completions/mean_length")[-1],
        "clipped_last": round(col("completions/clipped_ratio")[-1], 3),
    }


def probe(
    study_dir: Path,
    variant: str,
    seed: int,
    steps: int,
    lr: float,
    retrain: bool,
    settings: dict | None = None,
):
    study = load_study(study_dir)
    params = cell_params(read_yaml(ROOT / "params.yaml"), study, variant, seed, str(study_dir))
    for key, value in (settings or {}).items():
        set_dotted(params, key, value)
    check_params(params, "--set")
    cell = study_dir / "cells" / cell_key(variant, seed)
    if not retrain and not settings and (cell / "run.json").exists():
        # the rate the cell was trained at, as it recorded it (not what the params say now)
        trained = json.loads((cell / "run.json").read_text())["resolved"]["train"]["lr"]
        if math.isclose(trained, lr):
            kept = cell / "train.csv"
            return summarize(kept.read_text(), steps) | {"source": str(kept), "wall_s": None}
    params["train"] |= {"lr": lr, "steps": steps, "checkpoint_every": steps}
    ws = cells.workspace(
        study_dir, f"lr-{lr:g}-{seed}", params, cells.inputs(ROOT, study_dir, study, "cell", seed)
    )
    start = time.perf_counter()
    cells.run_stage("stages.train", ws, ROOT)
    wall = round(time.perf_counter() - start, 1)
    out = summarize(cells.step_table(ws / cells.STEP_METRICS), steps)
    shutil.rmtree(ws)
    return out | {"source": "trained", "wall_s": wall}


def parse_setting(text: str) -> tuple[str, object]:
    """`KEY=VALUE` as (key, the value read as YAML): `train.lora.r=8` is ("train.lora.r", 8)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"error: --set {text!r}: expected KEY=VALUE, e.g. train.lora.r=8")
    return key, yaml.safe_load(value)


def earlier_results(path: Path | None, out: dict) -> dict:
    """The rates an earlier run wrote to `path`'s JSON, if it probed the same cell for as many
    steps; an earlier run of another cell is an error, not a silent mix."""
    if path is None:
        raise SystemExit("error: --extend needs --out, the file whose rates it keeps")
    json_path = path.with_suffix(".json")
    if not json_path.exists():
        return {}
    before = json.loads(json_path.read_text())
    keys = ("study", "variant", "seed", "steps", "set")
    if any(before.get(k) != out[k] for k in keys):
        theirs = {k: before.get(k) for k in keys}
        raise SystemExit(f"error: {json_path} probed {theirs}, not this cell: --extend refused")
    return before["results"]


def table(out: dict) -> str:
    lines = [
        f"# Learning rate: {out['steps']} steps of {out['study']}'s `{out['variant']}` cell, "
        f"seed {out['seed']}",
        "",
        f"`python -m benchmarks.lr_probe {out['study']} --variant {out['variant']} --seed "
        f"{out['seed']} --steps {out['steps']} --lrs {' '.join(out['rates'])}"
        + "".join(f" --set {k}={v}" for k, v in out["set"].items())
        + "`. Reward: the "
        "verifier's mean over the step's rollouts, averaged over the first and second half of "
        "the steps; held-out: accuracy on the fixed held-out sample after the step shown.",
        "",
        "| lr | reward, first half | reward, second half | held-out (step: accuracy) "
        "| grad norm | last length | last truncated | time (s) | from |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rate in out["rates"]:
        r = out["results"][rate]
        held = ", ".join(f"{s}: {a:.3f}" for s, a in r["heldout"]) or "–"
        source = "the study's cell" if r["source"] != "trained" else "this probe"
        lines.append(
            f"| {rate} | {r['reward_first_half']:.3f} | {r['reward_second_half']:.3f} | {held} "
            f"| {r['grad_norm_mean']} | {r['length_last']:.1f} | {r['clipped_last']:.3f} "
            f"| {r['wall_s'] if r['wall_s'] is not None else '–'} | {source} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("study", type=Path, help="the study's folder (studies/<name>)")
    ap.add_argument("--variant", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lrs", nargs="+", required=True, help="learning rates, e.g. 2e-5 1e-4")
    ap.add_argument("--retrain", action="store_true", help="train the cell's own rate too")
    ap.add_argument(
        "--extend",
        action="store_true",
        help="keep the rates --out's JSON already holds (same study, variant, seed, steps)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a params key changed for every rate (dotted, the value read as YAML)",
    )
    ap.add_argument("--out", type=Path, help="write the Markdown table here (and .json)")
    args = ap.parse_args()
    settings = dict(parse_setting(s) for s in args.set)
    out: dict = {"study": str(args.study), "variant": args.variant, "seed": args.seed}
    out |= {"steps": args.steps, "set": settings, "rates": args.lrs, "results": {}}
    earlier = earlier_results(args.out, out) if args.extend else {}
    for rate in args.lrs:
        if rate in earlier:
            out["results"][rate] = earlier[rate]
            continue
        out["results"][rate] = probe(
            args.study, args.variant, args.seed, args.steps, float(rate), args.retrain, settings
        )
        print(rate, json.dumps(out["results"][rate]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
        args.out.write_text(table(out))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
