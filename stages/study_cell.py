"""The stages of a study (studies/<name>/dvc.yaml; docs/studies.md). Each runs pipeline stages
in a scratch workspace, studies/<name>/.work/<stage>/, that links the main pipeline's data and
base model and holds the merged params.yaml (grpo_core.studies.cells): small results.

    python -m stages.study_cell upstream STUDY_DIR [SEED]  # profile + guide, the study's params
    python -m stages.study_cell base STUDY_DIR SEED        # the base model, eval seed SEED
    python -m stages.study_cell cell STUDY_DIR VARIANT SEED
    python -m stages.study_cell seed_base SEED              # the base with model.seed SEED

- upstream -> STUDY_DIR/upstream/{profile,guides}.parquet; a study with its own data and base
  (params set `data` or `model` keys) runs prepare and base first and keeps data/prepared/ and
  models/base/ there too; with `bases: per_seed`, per seed into STUDY_DIR/upstream/SEED/;
- seed_base -> studies/seed_bases/SEED/models/base/: the bases of `bases: per_seed` studies on
  the main pipeline's data (one per seed, shared by every such study; in the DVC cache);
- base -> STUDY_DIR/base/SEED/ (questions, completions, eval.json) and STUDY_DIR/base/SEED.json;
- cell -> STUDY_DIR/cells/VARIANT-SEED/ (questions.parquet: per-question avg@k and greedy;
  completions.parquet: each eval completion, its reward, its answer's form; rollouts.parquet:
  the rollout log; train.csv: step metrics; dynamics/; run.json: every resolved param, git
  state, base and eval set hashes, last-step metrics) and STUDY_DIR/cells/VARIANT-SEED.json
  (its summary, a DVC metrics file: accuracy by level, rollouts, steps, wall time, dynamics).
Small results, in git (`cache: false`). A killed cell keeps its workspace (rerun: train resumes)."""

from __future__ import annotations

import logging
import shutil
import sys
import time
from pathlib import Path

from grpo_core.config.core import read_yaml
from grpo_core.errors import InputError
from grpo_core.io import atomic_path, write_json, write_parquet
from grpo_core.studies import cells
from grpo_core.studies.spec import cell_key, cell_params, check_params, load_study, upstream_params

ROOT = Path.cwd()  # the repository: DVC runs study stages there (wdir)


def upstream(study_dir: Path, seed: int | None = None) -> None:
    study = load_study(study_dir)
    params = upstream_params(read_yaml("params.yaml"), study, seed)
    check_params(params, f"{study_dir}/study.yaml params")
    out = study.upstream_dir(study_dir, seed)
    name = out.relative_to(study_dir).as_posix().replace("/", "-")
    links = cells.inputs(ROOT, study_dir, study, "upstream", seed)
    ws = cells.workspace(study_dir, name, params, links)
    own = ("stages.prepare", "stages.base") if study.own_upstream else ()
    for module in (*own, "stages.profile", "stages.guide"):
        cells.run_stage(module, ws, ROOT)
    cells.keep_upstream(ws, out, study)
    shutil.rmtree(ws)


def base(study_dir: Path, seed: int) -> None:
    study = load_study(study_dir)
    params = upstream_params(read_yaml("params.yaml"), study, seed)
    params.setdefault("eval", {})["seed"] = seed
    check_params(params, f"{study_dir}/study.yaml params")
    home = cells.inputs(ROOT, study_dir, study, "base", seed)
    start = time.perf_counter()
    table, metrics, samples = cells.score(
        home["models/base"], home["data/prepared"] / "eval.parquet", params, "base"
    )
    with atomic_path(study_dir / "base" / str(seed)) as tmp:
        tmp.mkdir()
        write_parquet(table, tmp / "questions.parquet")
        write_parquet(samples, tmp / "completions.parquet")
        write_json(metrics, tmp / "eval.json")
    wall = {"wall_s": round(time.perf_counter() - start, 1)}
    write_json(cells.accuracy_summary(table) | wall, study_dir / f"base/{seed}.json")


def cell(study_dir: Path, variant: str, seed: int) -> None:
    study, key = load_study(study_dir), cell_key(variant, seed)
    params = cell_params(read_yaml("params.yaml"), study, variant, seed, f"{study_dir}/study.yaml")
    print(cells.progress_line(study_dir, study, key), file=sys.stderr, flush=True)
    links = cells.inputs(ROOT, study_dir, study, "cell", seed)
    ws = cells.workspace(study_dir, key, params, links)
    wall = {
        "train": cells.run_stage("stages.train", ws, ROOT),
        "dynamics": cells.run_stage("stages.dynamics", ws, ROOT),
    }
    start = time.perf_counter()
    table, metrics, samples = cells.score(
        ws / "models/policy", ws / "data/prepared/eval.parquet", params, "policy"
    )
    wall["evaluate"] = time.perf_counter() - start
    wall["total"] = sum(wall.values())
    summary = cells.keep_cell(ws, study_dir / "cells" / key, table, metrics, wall, samples)
    write_json(summary, study_dir / "cells" / f"{key}.json")
    shutil.rmtree(ws)
    print(
        f"study {study_dir.name}: cell {key} done in {cells.clock(wall['total'])}", file=sys.stderr
    )


def cli(argv: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    arity = {"upstream": (2, 3), "base": (3,), "cell": (4,), "seed_base": (2,)}
    if not argv or len(argv) not in arity.get(argv[0], ()):
        raise SystemExit(__doc__)
    try:
        if argv[0] == "seed_base":
            return cells.seed_base(ROOT, int(argv[1]))
        study_dir = Path(argv[1])
        cells.restart_under(load_study(study_dir).params.get("numerics"), "stages.study_cell", argv)
        if argv[0] == "cell":
            cell(study_dir, argv[2], int(argv[3]))
        elif argv[0] == "base":
            base(study_dir, int(argv[2]))
        else:
            upstream(study_dir, int(argv[2]) if len(argv) == 3 else None)
    except (InputError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli(sys.argv[1:])
