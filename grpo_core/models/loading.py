"""Where a model comes from: the tiny world, a local directory, or the Hugging Face hub."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_core.errors import InputError


class ModelResolutionError(InputError):
    """A model name that is neither a local model directory nor a resolvable hub id."""


def resolve_model(name: str, revision: str | None = None) -> tuple[Path, dict]:
    """Return a local directory holding `name` and a record of what was resolved.

    A local path must contain `config.json`. Anything else is taken as a hub id and resolved
    through `huggingface_hub.snapshot_download`, which honours HF_HUB_OFFLINE and the local
    cache; the record keeps the commit that was resolved, so a run can be reproduced.
    """
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelResolutionError(f"model.name={name!r}: directory has no config.json")
        return path.resolve(), {"kind": "local", "name": name, "path": str(path.resolve())}
    if name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise ModelResolutionError(
            f"model.name={name!r}: no such directory, and not a hub id of the form 'org/name'"
        )
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        local = snapshot_download(
            name, revision=revision, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"]
        )
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        raise ModelResolutionError(
            f"model.name={name!r}: cannot resolve on the hub: {exc}"
        ) from exc
    commit = Path(local).name
    return Path(local), {"kind": "hub", "name": name, "revision": revision, "commit": commit}


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_model(path: str | Path, dtype: torch.dtype = torch.float32, device=None):
    """Model and tokenizer from an HF directory, on `device` (the GPU when there is one)."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    model.to(device or default_device())
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def uses_chat(path: str | Path) -> bool:
    """Whether prompts for the model in `path` go through its chat template: decided by
    `model.chat` in the `base` stage and recorded in the directory's grpo_lab.json."""
    record = Path(path) / "grpo_lab.json"
    return bool(json.loads(record.read_text()).get("chat", False)) if record.exists() else False
