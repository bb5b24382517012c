"""What every stage does first: validate params.yaml, seed, and turn known errors into a
one-line message instead of a traceback: `error: ...` and exit status 2 for bad input (params,
files, model names), `interrupted: ...` and exit status 130 for Ctrl-C or SIGTERM (what `dvc`
sends a stage it stops)."""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable

import torch

from grpo_core.config.core import P, parse_params, read_yaml
from grpo_core.config.runtime import settings
from grpo_core.errors import InputError, Interrupted

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


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def keep_deepspeed_out() -> None:
    """Make DeepSpeed look absent in a process that was not launched to use it.

    accelerate imports DeepSpeed whenever it is installed (transformers' save_pretrained
    unwraps every model through it), and importing DeepSpeed logs how it probed the hardware
    ("Setting accelerator to CPU..."), in stages that never use it. A None entry in
    sys.modules is how Python marks a module as not importable: find_spec answers None, so
    both libraries see no DeepSpeed. `accelerate launch` with a DeepSpeed config sets
    ACCELERATE_USE_DEEPSPEED in the processes it starts (grpo_core.training.parallel
    .uses_deepspeed), which import it as before."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() != "true":
        sys.modules.setdefault("deepspeed", None)


def main(stage: Callable[[P], None], view: type[P]) -> None:
    """Run `stage` on `view` of params.yaml (the sections it reads, as dvc.yaml declares them),
    seeded with `seed` (0 for a stage that reads none).

    Bad input (InputError, a missing input file) prints `error: <message>` and exits 2. Ctrl-C
    and SIGTERM print one line, `interrupted: <message>`, and exit 130 (128 + SIGINT, what
    shells report): the message of an `Interrupted` the stage raised (where it stopped, how to
    go on), or the stage's name. Outputs are published atomically (grpo_core.io), so a stage
    stopped anywhere leaves no output half-written."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    keep_deepspeed_out()
    signal.signal(signal.SIGTERM, _terminate)
    name = stage.__name__
    try:
        params = load_stage_params(view)
        torch.set_num_threads(settings()[1])  # as stages/__init__.py set OMP_NUM_THREADS
        torch.manual_seed(getattr(params, "seed", 0))
        stage(params)
    except (InputError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Interrupted as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        print(
            f"interrupted: {name}; no output is half-written (each is published whole, by a "
            "rename): rerun `dvc repro`",
            file=sys.stderr,
        )
        sys.exit(130)
