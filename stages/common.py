"""What every stage does first: validate params.yaml, seed, and turn known errors into a
one-line message and exit status 2 instead of a traceback."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable

import torch

from grpo_core.config.core import P, parse_params, read_yaml
from grpo_core.errors import InputError

log = logging.getLogger("grpo_lab")

# The whole file's model. Every stage checks every section, so a bad key anywhere fails the
# first stage that runs, before any work. It is imported by name, and dvc.yaml does not list
# it among a stage's deps (tests/test_dvc_yaml.py says so too): a section a stage does not read
# decides whether the stage starts, never what it writes, so editing the declaration of `eval`
# reruns `evaluate` alone.
WHOLE_FILE = "grpo_core.config.params"


def load_stage_params(view: type[P], path: str = "params.yaml") -> P:
    """`view` of params.yaml (the sections the stage reads), after checking the whole file."""
    raw = read_yaml(path)
    importlib.import_module(WHOLE_FILE).parse_params(raw, path)
    return parse_params(raw, view, path)


def main(stage: Callable[[P], None], view: type[P]) -> None:
    """Run `stage` on `view` of params.yaml (the sections it reads, as dvc.yaml declares them),
    seeded with `seed` (0 for a stage that reads none)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        params = load_stage_params(view)
        torch.manual_seed(getattr(params, "seed", 0))
        stage(params)
    except (InputError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
