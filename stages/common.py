"""What every stage does first: validate params.yaml, seed, and turn known errors into a
one-line message and exit status 2 instead of a traceback."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import torch

from grpo_core.config import Params, load_params
from grpo_core.errors import InputError

log = logging.getLogger("grpo_lab")


def main(stage: Callable[[Params], None]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        params = load_params("params.yaml")
        torch.manual_seed(params.seed)
        stage(params)
    except (InputError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
