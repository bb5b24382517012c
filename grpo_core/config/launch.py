"""The top-level `launch` param: which accelerate config `train` runs under."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field

# accelerate launch configs, by the name `launch` gives: configs/accelerate in the repository
# that holds this code (stages run from its root; tests run stages from elsewhere).
REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCH_CONFIGS = Path("configs/accelerate")


def launch_config(name: str) -> Path:
    """The accelerate config file `launch: name` names (absolute)."""
    return REPO_ROOT / LAUNCH_CONFIGS / f"{name}.yaml"


def _launch_config_exists(name: str) -> str:
    if not launch_config(name).is_file():
        known = sorted(p.stem for p in (REPO_ROOT / LAUNCH_CONFIGS).glob("*.yaml"))
        path = LAUNCH_CONFIGS / f"{name}.yaml"
        raise ValueError(f"{path}: no such accelerate config (known: {known})")
    return name


Launch = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="How `train` runs: the accelerate config configs/accelerate/<launch>.yaml. "
        "cpu: one process, in-process; ddp_cpu2: 2 CPU processes, DDP over gloo; zero2_cpu2: 2 "
        "CPU processes, DeepSpeed ZeRO-2 over gloo, fp32; zero3_cpu2: the same with ZeRO-3 "
        "(weights sharded too); zero2_8gpu / "
        "zero3_8gpu: DeepSpeed ZeRO-2/3 on 8 GPUs, bf16 (multi-node: see the file). With more "
        "than one process the stage relaunches itself through `accelerate launch`, and N "
        "processes train as one process with the same global batch (train.prompts_per_step) "
        "and seed would, up to float rounding.",
    ),
    AfterValidator(_launch_config_exists),
]
