"""The policy's weights along a run: saved every `train.checkpoint_every` steps into the run
directory, loaded back to resume, and published to checkpoints/ when the run ends."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from safetensors.torch import load_file

from grpo_core.errors import InputError
from grpo_core.io import atomic_path

# A run in progress: its checkpoints and, at each, what resuming needs (resume.py). A killed run
# leaves it here (DVC removes a stage's outputs before rerunning it, but not this), and the next
# run with the same params and inputs continues from it. On success its checkpoints move to
# CHECKPOINTS.
RUN_DIR = Path(".grpo_lab/train")
CHECKPOINTS = Path("checkpoints")


def checkpoint_dir(root: Path, step: int) -> Path:
    """root/step-000010: the policy after `step` RL steps."""
    return root / f"step-{step:06d}"


def save_checkpoint(policy, step: int, run_dir: Path = RUN_DIR) -> None:
    """The policy's weights after `step` steps: the whole model, or with LoRA the adapters
    only (peft's format; `dynamics` merges B @ A itself), written atomically."""
    with atomic_path(checkpoint_dir(run_dir, step)) as tmp:
        policy.save_pretrained(tmp)


def load_checkpoint(policy, directory: Path) -> None:
    """Weights saved by `save_checkpoint` back into `policy` (built as the run built it)."""
    if (directory / "adapter_model.safetensors").exists():
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(policy, load_file(directory / "adapter_model.safetensors"))
        return
    index = directory / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values()))
        if index.exists()
        else ["model.safetensors"]
    )
    missing = {k for k in policy.state_dict()}
    for name in files:  # one shard at a time
        shard = load_file(directory / name)
        _, unexpected = policy.load_state_dict(shard, strict=False)
        if unexpected:
            raise InputError(f"{directory / name}: tensors the model lacks: {unexpected}")
        missing -= set(shard)
    tied = {"lm_head.weight"} if policy.config.tie_word_embeddings else set()
    if missing - tied:
        raise InputError(f"{directory}: no weights for {sorted(missing - tied)}")


def publish_checkpoints(run_dir: Path = RUN_DIR, out: Path = CHECKPOINTS) -> None:
    """Move the finished run's checkpoints to `out` (the DVC output) in one rename."""
    shutil.rmtree(run_dir / "resume", ignore_errors=True)  # a rerun must not resume a finished run
    with atomic_path(out) as tmp:
        tmp.mkdir()
        for step_dir in sorted(run_dir.glob("step-*")):
            step_dir.rename(tmp / step_dir.name)
    shutil.rmtree(run_dir, ignore_errors=True)
