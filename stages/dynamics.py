"""dynamics: params `dynamics`, models/base, checkpoints/step-N/, data/rollouts.parquet,
data/profile.parquet -> what training changed.

- data/dynamics/tensors.parquet: one row per parameter tensor and checkpoint (relative update,
  changed fraction, stable and effective rank, cosine between successive updates;
  grpo_core.analysis.tensor_dynamics), and data/dynamics/modules.parquet, the same by layer and
  module type;
- data/dynamics/tokens.parquet: per step, overall, by level and by profile bin (confidence of
  correct and incorrect rollouts, |advantage| distribution, accuracy, the update weights the
  loss applied; grpo_core.analysis.token_dynamics);
- metrics/dynamics.json (a summary for `dvc metrics diff`), metrics/dynamics/*.csv (DVC plots,
  declared in dvc.yaml; the two whose series vary, convergence_long.csv and
  update_by_module.csv, are long: step, series, value) and metrics/dynamics/{heatmap,tokens}.png
  (the figures in the README; grpo_core.analysis.figures).
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from grpo_core.analysis.figures import heatmap_figure, token_figure
from grpo_core.analysis.tensor_dynamics import aggregate, tensor_dynamics, update_by_module
from grpo_core.analysis.token_dynamics import plot_tables, token_dynamics
from grpo_core.config.dynamics import DynamicsStage
from grpo_core.errors import InputError
from grpo_core.io import atomic_path, write_json, write_parquet
from stages.common import log, main

OUT = Path("data/dynamics")
PLOTS = Path("metrics/dynamics")


def find_checkpoints(root: str | Path = "checkpoints") -> list[tuple[int, Path]]:
    """The `train` stage's checkpoints, (step, directory), in step order."""
    root = Path(root)
    found = []
    for path in root.glob("step-*"):
        match = re.fullmatch(r"step-(\d+)", path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    if not found:
        raise InputError(f"{root}/: no step-N checkpoints; run the train stage first")
    return sorted(found)


def write_csv(table: pa.Table, target: Path) -> None:
    with atomic_path(target) as tmp:
        pcsv.write_csv(table, tmp)


def summary(tensors: pa.Table, tokens: pa.Table) -> dict:
    """A few numbers to compare runs with `dvc metrics diff` / `dvc exp show`: the whole
    model's update at the last checkpoint, and how the token statistics moved between the
    first and the last quarter of training."""
    whole = aggregate(tensors, by=("step",)).sort_by("step").to_pylist()[-1]
    overall = tokens.filter(pc.equal(tokens["by"], "all")).sort_by("step").to_pylist()
    quarter = max(1, len(overall) // 4)

    def mean(rows: list[dict], key: str) -> float | None:
        values = [r[key] for r in rows if r[key] is not None]
        return sum(values) / len(values) if values else None

    return {
        "weights": {k: whole[k] for k in ("step", "rel_update", "changed_frac")},
        "tokens": {
            key: {"first": mean(overall[:quarter], key), "last": mean(overall[-quarter:], key)}
            for key in ("logp_correct", "logp_incorrect", "zero_adv_frac", "accuracy")
        },
    }


def dynamics(params: DynamicsStage) -> None:
    cfg = params.dynamics
    checkpoints = find_checkpoints()
    log.info("tensor statistics at steps %s", [step for step, _ in checkpoints])
    tensors = tensor_dynamics(
        "models/base",
        checkpoints,
        tolerance=cfg.tolerance,
        svd=cfg.svd,
        svd_rank=cfg.svd_rank,
        svd_exact_max=cfg.svd_exact_max,
        svd_niter=cfg.svd_niter,
    )
    modules = aggregate(tensors)
    log_table = pq.read_table("data/rollouts.parquet")
    tokens = token_dynamics(log_table, pq.read_table("data/profile.parquet"))

    write_parquet(tensors, OUT / "tensors.parquet")
    write_parquet(modules, OUT / "modules.parquet")
    write_parquet(tokens, OUT / "tokens.parquet")
    for name, table in plot_tables(tokens).items():
        write_csv(table, PLOTS / f"{name}.csv")
    write_csv(update_by_module(tensors), PLOTS / "update_by_module.csv")
    heatmap_figure(tensors, PLOTS / "heatmap.png")
    token_figure(tokens, PLOTS / "tokens.png")
    write_json(summary(tensors, tokens), "metrics/dynamics.json")


if __name__ == "__main__":
    main(dynamics, DynamicsStage)
