"""validate: params.yaml (the whole file) -> data/params.ok

The pipeline's first stage. It depends on the whole params file, so any edit to it, a key no
stage reads included (`dvc exp run -S +trian.lr=1`), runs it, and a key that is unknown,
misspelt or out of range fails `dvc repro` and `dvc exp run` here, naming the key, before any
stage runs. Every other stage depends on its output, whose bytes never change while the params
are valid: a valid edit reruns only the stages that read what changed.

It imports no torch, so it costs a fraction of a second."""

from __future__ import annotations

import sys

from grpo_core.config.core import read_yaml
from grpo_core.config.params import parse_params
from grpo_core.errors import InputError
from grpo_core.io import atomic_path

PARAMS = "params.yaml"
OK = "data/params.ok"
# The same bytes for every valid params file: what makes the stages downstream rerun is the
# params they read, never this file.
STAMP = (
    "params.yaml is valid: every key known and every value in range "
    "(grpo_core/config/params.py, checked by the `validate` stage).\n"
)


def validate(path: str = PARAMS, out: str = OK) -> None:
    """Check the whole params file at `path`, then write `out` (atomically)."""
    parse_params(read_yaml(path), path)
    with atomic_path(out) as tmp:
        tmp.write_text(STAMP)


def cli() -> None:
    try:
        validate()
    except (InputError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli()
