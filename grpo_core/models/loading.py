"""Where a model comes from: the tiny world, a local directory, or the Hugging Face hub."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
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
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import httpx

    try:
        local = snapshot_download(
            name, revision=revision, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"]
        )
    except (HfHubHTTPError, OSError, httpx.TransportError) as exc:
        reason = _hub_reason(exc, revision)
        raise ModelResolutionError(
            f"model.name={name!r}: no local directory of that name, and cannot resolve on the "
            f"hub: {reason}"
            "; give model.name a local model directory (one with config.json), or fill the HF "
            f"cache where the hub is reachable (`hf download {name}`), which HF_HUB_OFFLINE=1 "
            "then reads without asking the hub"
        ) from None
    commit = Path(local).name
    return Path(local), {"kind": "hub", "name": name, "revision": revision, "commit": commit}


def _hub_reason(exc: Exception, revision: str | None) -> str:
    """Why the hub could not give a model, in a few words (its own messages run to several
    lines)."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, GatedRepoError):
        return "it is gated on the hub: accept its terms there and log in (`hf auth login`)"
    if isinstance(exc, RevisionNotFoundError):
        return f"the hub has no revision {revision!r} of it (model.revision)"
    if isinstance(exc, RepositoryNotFoundError):
        return "the hub has no such model (or it is private: log in with `hf auth login`)"
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return f"the hub answered HTTP {exc.response.status_code}"
    if constants.HF_HUB_OFFLINE:
        return "it is not in the HF cache (HF_HUB_OFFLINE is set: the hub was not asked)"
    return "it is not in the HF cache and the hub is unreachable"


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_model(path: str | Path, dtype: torch.dtype = torch.float32, device=None):
    """Model and tokenizer from an HF directory (a stage's output, models/base or
    models/policy), on `device` (the GPU when there is one). A missing directory is a
    FileNotFoundError and an unreadable one an InputError, both naming it: never a hub look-up
    of its name."""
    require_model(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, SafetensorError) as exc:
        reason = " ".join(str(exc).split())
        raise InputError(
            f"{path}: cannot load the model ({reason}); restore it (`dvc checkout {path}`) or "
            "rerun the stage that writes it (`dvc repro`)"
        ) from None
    model.to(device or default_device())
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def require_model(path: str | Path) -> None:
    """Fail before any work when `path` holds no model: FileNotFoundError naming it."""
    if not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(
            f"{path}: not found (no config.json); run the stage that writes it (dvc repro)"
        )


def uses_chat(path: str | Path) -> bool:
    """Whether prompts for the model in `path` go through its chat template: decided by
    `model.chat` in the `base` stage and recorded in the directory's grpo_lab.json."""
    record = Path(path) / "grpo_lab.json"
    return bool(json.loads(record.read_text()).get("chat", False)) if record.exists() else False
