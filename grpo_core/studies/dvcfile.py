"""studies/<name>/dvc.yaml: a study as DVC matrix stages, written from a template.

Why matrix stages and not queued experiments: a cell is a stage of its own, with its own
lock entry, so DVC caches each cell, runs only the cells whose params or inputs changed
(adding a seed or a variant adds stages and runs only those), records each cell as soon as
it ends (a killed study resumes at the first unfinished cell), and `dvc metrics show` lists
every cell; the main pipeline's stages are the cells' upstream, taken from the cache or the
DVC remote. Queued experiments would rerun the whole pipeline per cell in a temporary copy
and keep results in git refs that a report would have to collect.

The matrix reads the study file (`vars`), so editing `seeds` or `variants` in study.yaml is
all it takes; the dvc.yaml itself depends only on the study's name and on which of our
modules each stage runs, and on whether the study builds its own data and base model
(`python -m stages.study_report init NAME` rewrites it;
tests/test_studies.py checks every committed one is current).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from grpo_core.codedeps import closure
from grpo_core.config.user_reward import USER_REWARDS
from grpo_core.studies.spec import SEED_BASES, Study, cell_key, load_study

# The modules each stage runs: its own command and the pipeline stages it starts.
RUNS = {
    "upstream": ("stages.study_cell", "stages.profile", "stages.guide"),
    "own_upstream": (
        "stages.study_cell",
        "stages.prepare",
        "stages.base",
        "stages.profile",
        "stages.guide",
    ),
    "seed_base": ("stages.study_cell", "stages.base"),
    "base": ("stages.study_cell",),
    "cell": ("stages.study_cell", "stages.train", "stages.dynamics"),
    "report": ("stages.study_report",),
}


def code(stage: str) -> list[str]:
    files: set[str] = set()
    for module in RUNS[stage]:
        files |= closure(module)
    return sorted(files)


# The cells' code is one dep, the manifest the `code` stage writes (grpo_core.codedeps): one
# lock entry per cell instead of one per file keeps a no-op `dvc repro` fast.
MANIFEST = "grpo_core.codedeps"


def render(name: str, study: Study, root: Path = Path(".")) -> str:
    """studies/<name>/dvc.yaml for `study`: with its own upstream (`study.own_upstream`), the
    upstream stage prepares the data and trains the base from data/raw, and the other stages
    read those instead of the main pipeline's. Its plots draw the cells that have run (their
    train.csv under `root`)."""
    d = f"studies/{name}"
    read = [
        "numerics", "threads", "seed", "profile", "guide", "train.levels", "train.domains",
        "reward.code", "reward.function",
    ]  # fmt: skip
    per_seed = study.bases == "per_seed"
    up = f"{d}/upstream/${{item.seed}}" if per_seed else f"{d}/upstream"
    # in git, like the cells: a teammate's clone has it without the cache it ran in; but a
    # base model the study trains (3 MB for the tiny one, hundreds for a real model) is cached
    upstream_outs: list = [{up: {"cache": False}}]
    if study.own_upstream:
        kept = [f"{up}/{p}" for p in ("data", "profile.parquet", "guides.parquet")]
        upstream = {
            "deps": [*code("own_upstream"), "data/raw", USER_REWARDS],
            "read": ["data", "model", *read],
        }
        upstream_outs = [{p: {"cache": False}} for p in kept] + [f"{up}/models"]
        inputs = {k: [*kept, f"{up}/models"] for k in ("train", "eval")}
    elif study.shares_seed_bases:
        base = f"{SEED_BASES}/${{item.seed}}"
        train = "data/prepared/train.parquet"
        upstream = {"deps": [*code("upstream"), base, train, USER_REWARDS], "read": read}
        inputs = {
            "train": [base, train, "data/prepared/eval.parquet", up],
            "eval": [base, "data/prepared/eval.parquet"],
        }
    else:
        upstream = {
            "deps": [*code("upstream"), "models/base", "data/prepared/train.parquet", USER_REWARDS],
            "read": read,
        }
        inputs = {
            "train": [
                "models/base",
                "data/prepared/train.parquet",
                "data/prepared/eval.parquet",
                f"{d}/upstream",
            ],
            "eval": ["models/base", "data/prepared/eval.parquet"],
        }
    stages = {
        "code": {
            "cmd": f"python -m {MANIFEST} {d}/code.md5 {' '.join(RUNS['cell'])}",
            "wdir": "../..",
            "deps": sorted(set(code("cell")) | closure(MANIFEST)),
            "outs": [{f"{d}/code.md5": {"cache": False}}],
        },
        "upstream": {
            **({"matrix": {"seed": "${seeds}"}} if per_seed else {}),
            "cmd": f"python -m stages.study_cell upstream {d}" + " ${item.seed}" * per_seed,
            "wdir": "../..",
            "deps": upstream["deps"],
            "params": [{"params.yaml": upstream["read"]}, {f"{d}/study.yaml": ["params"]}],
            "outs": upstream_outs,
        },
        "base": {
            "matrix": {"seed": "${seeds}"},
            "cmd": f"python -m stages.study_cell base {d} ${{item.seed}}",
            "wdir": "../..",
            "deps": [*code("base"), *inputs["eval"], USER_REWARDS],
            "params": [
                {"params.yaml": ["numerics", "threads", "eval", "reward.code", "reward.function"]},
                {f"{d}/study.yaml": ["params"]},
            ],
            "outs": [{f"{d}/base/${{item.seed}}": {"cache": False}}],
            "metrics": [{f"{d}/base/${{item.seed}}.json": {"cache": False}}],
        },
        "cell": {
            "matrix": {"variant": "${variants}", "seed": "${seeds}"},
            "cmd": f"python -m stages.study_cell cell {d} ${{item.variant}} ${{item.seed}}",
            "wdir": "../..",
            "deps": [f"{d}/code.md5", "configs/accelerate", USER_REWARDS, *inputs["train"]],
            "params": [
                {
                    "params.yaml": [
                        "numerics", "threads", "algo", "launch", "train", "reward", "dynamics",
                        "eval",
                    ]  # fmt: skip
                },
                {f"{d}/study.yaml": ["params", "budget", "variants.${item.variant}"]},
            ],
            "outs": [{f"{d}/cells/${{key}}": {"cache": False}}],
            "metrics": [{f"{d}/cells/${{key}}.json": {"cache": False}}],
        },
        "report": {
            "cmd": f"python -m stages.study_report report {d}",
            "wdir": "../..",
            "deps": [*code("report"), f"{d}/study.yaml", f"{d}/cells", f"{d}/base"],
            "outs": [
                {f"reports/{name}.md": {"cache": False}},
                {f"reports/{name}": {"cache": False}},
            ],
        },
    }  # fmt: skip
    head = (
        f"# The study `{name}` (study.yaml) as DVC stages. Written by `python -m "
        f"stages.study_report init {name}`:\n# edit study.yaml, not this file. Run it with "
        f"`dvc repro {d}/dvc.yaml` (docs/studies.md).\n"
    )
    spec = {"vars": ["study.yaml"], "stages": stages}
    drawn = plots(name, study, root)
    if drawn:
        spec["plots"] = drawn
    body = yaml.safe_dump(spec, sort_keys=False, width=100)
    return head + body


def plots(name: str, study: Study, root: Path = Path(".")) -> list[dict]:
    """DVC plots of `study.plots`: one per step metric, id "<name>: <metric>", a line per cell
    that has run (its train.csv, a path relative to the study's dvc.yaml), against the step.

    DVC gathers the plots of every dvc.yaml in the repository, so `dvc plots show` in the root
    draws these too: a cell not yet run is left out rather than reported there as a missing
    file, and `python -m stages.study_report init NAME` after the cells have run adds them."""
    folder = root / "studies" / name
    files = [
        f"cells/{cell_key(v, s)}/train.csv"
        for v, s in study.cells()
        if (folder / "cells" / cell_key(v, s) / "train.csv").is_file()
    ]
    if not files:
        return []
    return [
        {
            f"{name}: {metric}": {
                "x": "step",
                "y": {f: metric for f in files},
                "title": f"{name}: {metric} (a line per cell)",
                "template": "series",
            }
        }
        for metric in study.plots
    ]


def write(name: str, root: Path = Path(".")) -> Path:
    folder = root / "studies" / name
    path = folder / "dvc.yaml"
    path.write_text(render(name, load_study(folder), root))
    write_seed_bases(root)
    return path


def seed_bases_seeds(root: Path = Path(".")) -> list[int]:
    """Every seed of every study that shares the bases by seed (`bases: per_seed` on the main
    pipeline's data)."""
    seeds: set[int] = set()
    for path in sorted((root / "studies").glob("*/study.yaml")):
        study = load_study(path)
        if study.shares_seed_bases:
            seeds |= set(study.seeds)
    return sorted(seeds)


def render_seed_bases(seeds: list[int]) -> str:
    """studies/seed_bases/dvc.yaml: the main pipeline's base trained with each model.seed in
    `seeds`, cached like the main pipeline's base (portable numerics rebuild it bit for bit)."""
    stage = {
        "matrix": {"seed": seeds},
        "cmd": "python -m stages.study_cell seed_base ${item.seed}",
        "wdir": "../..",
        "deps": [*code("seed_base"), "data/params.ok", "data/prepared/train.parquet"],
        "params": [{"params.yaml": ["numerics", "threads", "seed", "model", "reward.code"]}],
        "outs": [f"{SEED_BASES}/${{item.seed}}"],
    }
    head = (
        "# The tiny world's base by model.seed, shared by every study with `bases: per_seed` on "
        "the main\n# pipeline's data. Written by `python -m stages.study_report init NAME` from "
        "the studies' seeds.\n"
    )
    return head + yaml.safe_dump({"stages": {"base": stage}}, sort_keys=False, width=100)


def write_seed_bases(root: Path = Path(".")) -> Path | None:
    """Write studies/seed_bases/dvc.yaml for the seeds that need a base; remove it when none
    does."""
    path = root / SEED_BASES / "dvc.yaml"
    seeds = seed_bases_seeds(root)
    if not seeds:
        path.unlink(missing_ok=True)
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_seed_bases(seeds))
    return path
