"""Reading the weights `tensor_dynamics` compares: safetensors files read by header offset,
base models, full checkpoints and LoRA adapters, one tensor at a time.

Memory. Files are read with plain reads at the offsets of the safetensors header, never
memory-mapped (see `read_tensor`), one tensor at a time: never a whole checkpoint.

Checkpoints. A directory holding a peft LoRA adapter (`adapter_model.safetensors` +
`adapter_config.json`) is read as ΔW = scale * B @ A for each targeted weight (transposed for
`fan_in_fan_out` and for embeddings, as peft merges), scale = lora_alpha / r, or
lora_alpha / sqrt(r) with `use_rslora`, with r and lora_alpha per module from `rank_pattern` /
`alpha_pattern` matched as peft matches them; `lora_B.bias` updates the bias by scale * bias;
tensors saved whole (`modules_to_save`, `bias="all"`, saved embeddings) give ΔW = saved - W_0;
every other tensor has ΔW = 0. DoRA, trainable tokens and other peft types raise InputError.
Any other directory must hold model weights (`model.safetensors`, or shards with
`model.safetensors.index.json`) with exactly the base model's tensor names and shapes; a
directory with both is read as an adapter.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from grpo_core.errors import InputError

MODEL_WEIGHTS = "model.safetensors"
MODEL_INDEX = "model.safetensors.index.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
PEFT_PREFIX = "base_model.model."  # peft's prefix of the wrapped model's parameter names


def shape_text(shape: Sequence[int]) -> str:
    """A shape as text: "128x512"; "" for a scalar."""
    return "x".join(str(d) for d in shape)


# ---------------------------------------------------------------------------------------------
# Reading safetensors files


_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


@dataclass(frozen=True)
class _Entry:
    """Where one tensor lies in a safetensors file."""

    name: str
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    nbytes: int


def _read_header(path: Path) -> dict[str, _Entry]:
    """The tensors of a safetensors file: 8-byte little-endian header length, a JSON header
    mapping names to dtype, shape and [begin, end) offsets after the header, then the data."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if length < 2 or 8 + length > size:
                raise InputError(f"{path}: not a safetensors file (bad header length)")
            header = json.loads(f.read(length))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read the safetensors header: {exc}") from exc
    if not isinstance(header, dict):
        raise InputError(f"{path}: not a safetensors file (header is not a JSON object)")
    data_start = 8 + length
    entries = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _DTYPES[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{path}: tensor {name!r}: unsupported or bad header entry") from exc
        nbytes = math.prod(shape) * dtype.itemsize
        if end - begin != nbytes or data_start + end > size:
            raise InputError(f"{path}: tensor {name!r}: data offsets disagree with its shape")
        entries[name] = _Entry(name, path, dtype, shape, data_start + begin, nbytes)
    return entries


def read_tensor(entry: _Entry) -> torch.Tensor:
    """One tensor as a new float32 tensor that no one else holds.

    Plain reads at the header's offsets rather than `safetensors.safe_open`: safe_open (0.8,
    framework "pt") maps the whole file through `torch.UntypedStorage.from_file`, and measured
    here, reading one 100 MB tensor of an 800 MB file with a fresh safe_open per read still
    raised the peak RSS by the whole 800 MB. With reads, RSS holds only the tensors we hold;
    the file's pages stay in the page cache, which RSS does not count.
    """
    raw = torch.empty(entry.nbytes, dtype=torch.uint8)
    if entry.nbytes:
        view = memoryview(raw.numpy())
        with entry.file.open("rb", buffering=0) as f:
            f.seek(entry.start)
            done = 0
            while done < entry.nbytes:  # one read() returns at most ~2 GiB on Linux
                n = f.readinto(view[done:])
                if not n:
                    raise InputError(f"{entry.file}: tensor {entry.name!r} is truncated")
                done += n
    # The bytes are little-endian, as safetensors stores them, like every platform torch runs on.
    tensor = raw.view(entry.dtype).reshape(entry.shape)
    return tensor.to(torch.float32)  # float32 storage: `raw` itself, which only we hold


def _model_weights(directory: Path) -> tuple[dict[str, _Entry], Path] | None:
    """Tensors of an HF model directory (single file or shards) and the file that lists them,
    or None when the directory holds no safetensors model weights."""
    index = directory / MODEL_INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted(set(weight_map.values()))
        except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"{index}: not a safetensors index: {exc}") from exc
        entries: dict[str, _Entry] = {}
        for file in files:
            if not (directory / file).is_file():
                raise InputError(f"{index}: lists {file}, which does not exist")
            _merge(entries, _read_header(directory / file))
        for name, file in weight_map.items():
            if name not in entries:
                raise InputError(f"{index}: tensor {name!r} is not in {directory / file}")
        return entries, index
    single = directory / MODEL_WEIGHTS
    if single.is_file():
        return _read_header(single), single
    shards = sorted(directory.glob("model-*-of-*.safetensors"))
    if shards:
        entries = {}
        for shard in shards:
            _merge(entries, _read_header(shard))
        return entries, shards[0]
    return None


def _merge(entries: dict[str, _Entry], more: dict[str, _Entry]) -> None:
    for name, entry in more.items():
        if name in entries:
            raise InputError(f"{entry.file}: tensor {name!r} is also in {entries[name].file}")
        entries[name] = entry


def base_weights(base_dir: Path) -> dict[str, _Entry]:
    """Where each tensor of the base model directory lies; no model weights is an error."""
    found = _model_weights(base_dir)
    if found is None:
        raise InputError(
            f"{base_dir}: no model weights ({MODEL_WEIGHTS}, or shards with {MODEL_INDEX})"
        )
    return found[0]


# ---------------------------------------------------------------------------------------------
# Checkpoints: ΔW of one tensor at a time


class _FullCheckpoint:
    """A fine-tuned model directory: ΔW = W_t - W_0 for every tensor."""

    def __init__(self, entries: dict[str, _Entry], listed_in: Path, base: dict[str, _Entry]):
        for name, b in base.items():
            entry = entries.get(name)
            if entry is None:
                raise InputError(f"{listed_in}: tensor {name!r} of the base model is missing")
            if entry.shape != b.shape:
                raise InputError(
                    f"{entry.file}: tensor {name!r} has shape {shape_text(entry.shape)}, "
                    f"the base model {shape_text(b.shape)}"
                )
        for name, entry in entries.items():
            if name not in base:
                raise InputError(f"{entry.file}: tensor {name!r} is not in the base model")
        self.entries = entries

    def update(self, name: str, w0: torch.Tensor) -> torch.Tensor | None:
        return read_tensor(self.entries[name]).sub_(w0)


@dataclass(frozen=True)
class _LoraPart:
    """One contribution to a tensor's update in an adapter."""

    kind: str  # "saved" (a whole tensor) | "linear" | "embedding" | "bias"
    b: _Entry  # lora_B, lora_B's bias, or the saved tensor
    a: _Entry | None = None
    scale: float = 1.0
    transpose: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        if self.kind not in ("linear", "embedding"):
            return self.b.shape
        shape = (self.b.shape[0], self.a.shape[1])
        return shape[::-1] if self.transpose else shape


_LORA_KEY = re.compile(
    r"(?P<module>.+)\.(?P<part>lora_A\.weight|lora_B\.weight|lora_B\.bias"
    r"|lora_embedding_A|lora_embedding_B)"
)


def _pattern_value(patterns: dict, module: str, default):
    """peft's `get_pattern_key` rule: the first pattern p (a regex) for which the module name
    matches `(.*\\.)?(p)$` gives the value; no match, the default."""
    for pattern, value in patterns.items():
        if re.match(rf"(.*\.)?({pattern})$", module):
            return value
    return default


class _LoraCheckpoint:
    """A peft LoRA adapter directory: ΔW = scale * B @ A for targeted weights, else 0.

    Whole tensors in the adapter replace the base tensor before the LoRA update is added, as
    peft loads them: `modules_to_save` copies and bias="all" biases under the base name, and the
    embedding layers saved with `save_embedding_layers` under `<module>.base_layer.weight`.
    """

    def __init__(self, directory: Path, base: dict[str, _Entry]):
        config_path, weights_path = directory / ADAPTER_CONFIG, directory / ADAPTER_WEIGHTS
        for path in (config_path, weights_path):
            if not path.is_file():
                raise InputError(
                    f"{directory}: a LoRA checkpoint needs {ADAPTER_CONFIG} and "
                    f"{ADAPTER_WEIGHTS}; {path.name} is missing"
                )
        try:
            config = json.loads(config_path.read_text())
            r, alpha = config["r"], config["lora_alpha"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise InputError(f"{config_path}: not a LoRA adapter config: {exc}") from exc
        peft_type = config.get("peft_type", "LORA")
        if peft_type != "LORA":
            raise InputError(f"{config_path}: peft_type {peft_type!r}: only LORA is supported")
        for key, why in (
            ("use_dora", "DoRA's update is not scale * B @ A"),
            ("trainable_token_indices", "trainable tokens are not supported"),
            ("layer_replication", "layer replication is not supported"),
            ("target_parameters", "LoRA on nn.Parameter targets is not supported"),
        ):
            if config.get(key):
                raise InputError(f"{config_path}: {key}={config[key]!r}: {why}")
        rank_pattern = config.get("rank_pattern") or {}
        alpha_pattern = config.get("alpha_pattern") or {}
        rslora = bool(config.get("use_rslora"))
        fan_in_fan_out = bool(config.get("fan_in_fan_out"))
        self.file = weights_path
        self.parts: dict[str, list[_LoraPart]] = {}

        lora_entries: dict[str, dict[str, _Entry]] = {}
        for key, entry in _read_header(weights_path).items():
            stripped = key.removeprefix(PEFT_PREFIX)
            match = _LORA_KEY.fullmatch(stripped)
            if match:
                lora_entries.setdefault(match["module"], {})[match["part"]] = entry
            elif any(p.startswith("lora_") or p == "token_adapter" for p in stripped.split(".")):
                raise InputError(f"{weights_path}: tensor {key!r}: unsupported adapter tensor")
            else:
                self._add(stripped.replace(".base_layer.", "."), _LoraPart("saved", entry), base)

        for module, found in lora_entries.items():
            r_m = _pattern_value(rank_pattern, module, r)
            alpha_m = _pattern_value(alpha_pattern, module, alpha)
            scale = alpha_m / math.sqrt(r_m) if rslora else alpha_m / r_m
            kind = "embedding" if "lora_embedding_A" in found else "linear"
            a_key, b_key = {
                "embedding": ("lora_embedding_A", "lora_embedding_B"),
                "linear": ("lora_A.weight", "lora_B.weight"),
            }[kind]
            for part in (a_key, b_key):
                if part not in found:
                    raise InputError(f"{weights_path}: module {module!r} has no {part}")
            a, b = found[a_key], found[b_key]
            if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[0] != r_m or b.shape[1] != r_m:
                raise InputError(
                    f"{weights_path}: tensor {b.name!r}: lora A {shape_text(a.shape)} and B "
                    f"{shape_text(b.shape)} are not of rank r={r_m} as {config_path.name} says"
                )
            # peft merges transpose(B @ A, fan_in_fan_out) for linear layers and always
            # transposes for embeddings (A is r x num_embeddings).
            transpose = kind == "embedding" or fan_in_fan_out
            self._add(f"{module}.weight", _LoraPart(kind, b, a, scale, transpose), base)
            if "lora_B.bias" in found:
                self._add(
                    f"{module}.bias", _LoraPart("bias", found["lora_B.bias"], None, scale), base
                )

    def _add(self, name: str, part: _LoraPart, base: dict[str, _Entry]) -> None:
        key = part.b.name
        if name not in base:
            raise InputError(
                f"{self.file}: adapter tensor {key!r} matches no base tensor (looked for {name!r})"
            )
        if part.shape != base[name].shape:
            raise InputError(
                f"{self.file}: adapter tensor {key!r} gives {name!r} shape "
                f"{shape_text(part.shape)}, the base model {shape_text(base[name].shape)}"
            )
        parts = self.parts.setdefault(name, [])
        if any((p.kind == "saved") == (part.kind == "saved") for p in parts):
            raise InputError(f"{self.file}: tensor {name!r} is updated twice (again by {key!r})")
        parts.append(part)

    def update(self, name: str, w0: torch.Tensor) -> torch.Tensor | None:
        delta = None
        for part in sorted(self.parts.get(name, ()), key=lambda p: p.kind != "saved"):
            if part.kind == "saved":
                delta = read_tensor(part.b).sub_(w0)
                continue
            if part.kind == "bias":
                lora = read_tensor(part.b)
            else:
                # peft's get_delta_weight, in float32
                lora = read_tensor(part.b) @ read_tensor(part.a)
                lora = lora.T.contiguous() if part.transpose else lora
            lora.mul_(part.scale)
            delta = lora if delta is None else delta.add_(lora)
        return delta


def open_checkpoint(directory: Path, base: dict[str, _Entry]):
    """A checkpoint directory (full weights or a LoRA adapter), checked against the base
    model's tensors: its `update(name, w0)` is ΔW of one tensor, None where not updated."""
    if not directory.is_dir():
        raise InputError(f"{directory}: checkpoint directory does not exist")
    if (directory / ADAPTER_WEIGHTS).is_file() or (directory / ADAPTER_CONFIG).is_file():
        return _LoraCheckpoint(directory, base)
    found = _model_weights(directory)
    if found is None:
        raise InputError(
            f"{directory}: neither model weights ({MODEL_WEIGHTS}, or shards with "
            f"{MODEL_INDEX}) nor a LoRA adapter ({ADAPTER_WEIGHTS} + {ADAPTER_CONFIG})"
        )
    return _FullCheckpoint(*found, base)


def load_update(base_dir: str | Path, checkpoint_dir: str | Path, name: str) -> torch.Tensor:
    """ΔW of one tensor in float32, as `tensor_dynamics` sees it (zeros when not updated)."""
    base = base_weights(Path(base_dir))
    if name not in base:
        raise InputError(f"{base_dir}: the base model has no tensor {name!r}")
    w0 = read_tensor(base[name])
    delta = open_checkpoint(Path(checkpoint_dir), base).update(name, w0)
    return torch.zeros_like(w0) if delta is None else delta
