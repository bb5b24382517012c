"""Rebuild a study's own base model on a machine that lacks it (docs/studies.md).

    python -m stages.study_models STUDY_DIR [SEED]

A study with its own data and base (its params set `data` or `model` keys; SmolLM2's) keeps
the base in STUDY_DIR/upstream/models/ (in the DVC cache, too big for git), beside its profile
and guides (in git). A new clone on a machine without that cache and without a DVC remote has
the profile but not the model, and `dvc repro` would rerun the whole upstream stage: on
another CPU, under `numerics: native`, that is another profile, and every cell's curriculum
moves with it. This rebuilds only the model (prepare and base in a scratch workspace, as the
upstream stage runs them) into STUDY_DIR/upstream[/SEED]/models/base/ and then asks DVC
whether it is the recorded one: `dvc status` of the upstream stage lists no changed output
when the rebuilt model hashes to dvc.lock's entry (a packaged model converts to the same bits
on any CPU). Exit status 0 when it does, 1 when it does not (the model is left in place for a
look; delete it and rerun the upstream stage to start over), 2 for bad input.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

from grpo_core.config.core import read_yaml
from grpo_core.errors import InputError
from grpo_core.io import atomic_path
from grpo_core.studies import cells
from grpo_core.studies.spec import check_params, load_study, upstream_params

ROOT = Path.cwd()  # the repository


def rebuild(study_dir: Path, seed: int | None = None) -> Path:
    """The study's own base rebuilt into its upstream folder; returns where it lies."""
    study = load_study(study_dir)
    if not study.own_upstream:
        raise InputError(
            f"{study_dir}: its cells train from the main pipeline's base (models/base or "
            "studies/seed_bases): `dvc pull` or `dvc repro` rebuilds that one"
        )
    params = upstream_params(read_yaml("params.yaml"), study, seed)
    check_params(params, f"{study_dir}/study.yaml params")
    links = cells.inputs(ROOT, study_dir, study, "upstream", seed)
    ws = cells.workspace(study_dir, "models", params, links)
    for module in ("stages.prepare", "stages.base"):
        cells.run_stage(module, ws, ROOT)
    target = study.upstream_dir(study_dir, seed) / "models" / "base"
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        shutil.copytree(ws / "models/base", tmp)
    shutil.rmtree(ws)
    return target


def changed_outputs(study_dir: Path, seed: int | None) -> list[str]:
    """The upstream stage's outputs that `dvc status` finds changed against dvc.lock."""
    stage = f"{study_dir}/dvc.yaml:upstream" + (f"@{seed}" if seed is not None else "")
    done = subprocess.run(
        ["dvc", "status", "--json", stage], capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode != 0:
        raise InputError(f"dvc status {stage}: {done.stderr.strip()}")
    status = json.loads(done.stdout or "{}")
    out = []
    for entries in status.values():  # the one stage asked for, keyed as DVC names it
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict):
                out += [path for path, what in entry.get("changed outs", {}).items() if what]
    return out


def cli(argv: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if len(argv) not in (1, 2):
        raise SystemExit(__doc__)
    study_dir, seed = Path(argv[0]), int(argv[1]) if len(argv) == 2 else None
    try:
        cells.restart_under(load_study(study_dir).params.get("numerics"), __spec__.name, argv)
        target = rebuild(study_dir, seed)
        changed = changed_outputs(study_dir, seed)
    except (InputError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    model = [p for p in changed if p.endswith("models")]
    if model:
        print(f"{target}: rebuilt, but not the recorded model (dvc status: {model})")
        sys.exit(1)
    print(f"{target}: rebuilt, the recorded model (dvc status lists no changed output)")


if __name__ == "__main__":
    cli(sys.argv[1:])
