"""Several processes for one run: `launch` names an accelerate config; a stage started by dvc
or a user relaunches itself through `accelerate launch` when it names more than one."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import yaml

from grpo_core.config.launch import launch_config
from grpo_core.config.train import TrainStage
from grpo_core.errors import InputError

log = logging.getLogger(__name__)


def launch_processes(params: TrainStage) -> int:
    """How many processes `launch` names (its accelerate config's num_processes)."""
    path = launch_config(params.launch)
    config = yaml.safe_load(path.read_text()) or {}
    n = config.get("num_processes", 1)
    if not isinstance(n, int) or n < 1:
        raise InputError(f"launch={params.launch!r}: {path}: num_processes must be >= 1, got {n!r}")
    return n


def in_launched_process() -> bool:
    """Started by `accelerate launch` / torchrun (which set these), not by dvc or a user."""
    return "RANK" in os.environ or "LOCAL_RANK" in os.environ


def relaunch(params: TrainStage, module: str) -> int:
    """Run `python -m module` (this process's command line) again under `accelerate launch`
    with the `launch` config; its exit status."""
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(launch_config(params.launch)),
        "-m",
        module,
        *sys.argv[1:],
    ]
    log.info("launching %d processes: %s", launch_processes(params), " ".join(cmd))
    return subprocess.run(cmd, check=False).returncode
