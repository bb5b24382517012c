"""Tensor-level statistics of what training changed in the weights.

`tensor_dynamics(base_dir, checkpoints)` compares every tensor of the base model W_0 with the
same tensor in each checkpoint W_t and returns one row per (tensor, checkpoint) with the columns
of `TENSORS_SCHEMA`. With ΔW = W_t - W_0, all computed in float32 whatever the storage dtype:

- `rel_update` = ||ΔW||_F / ||W_0||_F; 0 when ΔW = 0; null when ||W_0||_F = 0 and ΔW != 0
  (a relative change of a zero tensor has no value: read `update_norm`).
- `update_norm` = ||ΔW||_F, `base_norm` = ||W_0||_F, `numel`, `shape` ("128x512"; "" for a scalar).
- `changed_frac`: the fraction of entries with |ΔW| > tolerance * |W_0| (an entry whose W_0 is 0
  counts as changed iff its ΔW != 0; a NaN entry counts as changed). The default tolerance 2^-8
  is bf16's unit roundoff: a smaller relative change would not survive storing the weights in
  bf16, so a bf16 checkpoint of an f32 base shows no spurious changes. `update_sparsity` is
  1 - changed_frac, the sparsity of RL updates reported by Mukherjee et al. (2025), "Reinforcement
  Learning Finetunes Small Subnetworks in Large Language Models".
- `stable_rank` = ||ΔW||_F^2 / σ_max^2 (Rudelson & Vershynin 2007) and `effective_rank` =
  exp(H(p)) with p_i = σ_i / Σ_j σ_j (Roy & Vetterli 2007, "The effective rank: a measure of
  effective dimensionality", eq. 1-3). Both are 0 for ΔW = 0 and null for 1-D tensors; a tensor
  of 3+ dims is read as a (shape[0], rest) matrix.
- `spectrum_energy` = Σ σ_i^2 / ||ΔW||_F^2 over the singular values computed: 1.0 for an exact
  SVD; below 1 it says how much of the update a randomized SVD did not see. `svd` says which SVD
  ran ("exact" | "randomized"); both are null when no SVD ran (1-D tensor or ΔW = 0).
- `increment_norm` = ||W_{t_k} - W_{t_{k-1}}||_F, the movement since the previous checkpoint
  (W_{t_0} = W_0), and `cos_prev`, the cosine between that increment and the previous one
  (null for the first checkpoint or when either increment is 0). Consistent directions give
  cos_prev near 1; oscillation around a point gives negative values.

Which SVD (`svd=`): "exact" runs `torch.linalg.svdvals`; "randomized" runs `torch.svd_lowrank`
(Halko, Martinsson & Tropp 2011) with q = svd_rank and svd_niter power iterations, seeded so
that a run is reproducible; "auto" is exact when min(rows, cols) <= svd_exact_max.

What a randomized SVD's ranks mean. It estimates the top k = svd_rank singular values only, so
`effective_rank` is then the effective rank of the top-k spectrum: the effective rank of the best
rank-k approximation of ΔW (Eckart-Young). It is at most k, and it is a lower bound of the exact
effective rank: writing the full distribution as head (top k, mass P) and tail, H(full) - H(head)
>= -log P >= 0 because no tail value exceeds the smallest head value. `stable_rank` needs only
σ_max, which power iterations get to ~1e-6. Measured on 2048x2048 updates U diag(σ) V^T with
random orthogonal U, V, q = 64, niter = 4 (the defaults):

    spectrum σ_i (i = 1..2048)          exact erank  randomized  error   spectrum_energy
    exp(-i/8)   (fast decay)                  21.8        21.7    -0.3%   1.0000
    exp(-i/16)                                43.5        39.6    -9%     0.9997
    i^-2                                       5.1         4.7    -9%     1.0000
    i^-1.5                                    19.9        10.8   -46%     0.9999
    i^-1        (heavy tail)                 281.4        29.0   -90%     0.9908
    rank 16 + flat floor with 10% energy    1236.6        22.9   -98%     0.9024

In every case the randomized effective rank is within 0.3% of the effective rank of the exact
top 64 values, and the stable rank within 2e-6 of exact (σ_64 itself is ~6% low, as expected
without oversampling). So the randomized effective rank is accurate for updates whose spectrum
decays fast (most of Σσ in the top k) and a strong underestimate otherwise: the effective rank
weighs singular values by σ, not σ^2, so a tail holding 1% of the energy can hold most of Σσ,
and spectrum_energy near 1 does not guarantee the effective rank. Compare randomized effective
ranks with each other, not with exact ones; for absolute values use svd="exact" or a larger
svd_rank. A related caution for both SVDs: a checkpoint stored in bf16 (or f16) carries a
rounding noise of up to 2^-9 |W_0| in every entry, which is full-rank and raises the exact
effective rank of small updates (the last row of the table); compare checkpoints stored at the
same precision.

Memory. Tensors are processed one name at a time across all checkpoints: W_0 of that name is
read, then each checkpoint's tensor (or that module's lora_A / lora_B); only W_0, the previous
cumulative update and the previous increment (for `cos_prev`) are kept between checkpoints.
The peak is four float32 copies of the largest tensor (W_0, the update, the previous update
turned into this increment, the previous increment), or three plus the SVD's copy of the
update and its workspace (the previous increment is freed before the SVD): never a whole
checkpoint. Files are read with plain reads at the offsets of the safetensors header, never
memory-mapped (see `_read`). `python -m benchmarks.dynamics_memory` measures it.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from tqdm import tqdm

from grpo_core.errors import InputError
from grpo_core.io import atomic_path

MODULE_TYPES = ("q", "k", "v", "o", "gate", "up", "down", "embed", "lm_head", "norm", "other")
SVD_METHODS = ("auto", "exact", "randomized")

TENSORS_SCHEMA = pa.schema(
    [
        ("step", pa.int32()),
        ("name", pa.string()),
        ("layer", pa.int32()),  # null: not inside a numbered block (embeddings, final norm, head)
        ("module", pa.string()),  # one of MODULE_TYPES
        ("numel", pa.int64()),
        ("shape", pa.string()),
        ("rel_update", pa.float64()),
        ("update_norm", pa.float64()),
        ("base_norm", pa.float64()),
        ("changed_frac", pa.float64()),
        ("update_sparsity", pa.float64()),
        ("stable_rank", pa.float64()),
        ("effective_rank", pa.float64()),
        ("spectrum_energy", pa.float64()),
        ("svd", pa.string()),
        ("increment_norm", pa.float64()),
        ("cos_prev", pa.float64()),
    ]
)

# Columns `aggregate` adds to its group keys.
AGGREGATE_COLUMNS = (
    ("n_tensors", pa.int64()),
    ("numel", pa.int64()),
    ("update_norm", pa.float64()),
    ("base_norm", pa.float64()),
    ("rel_update", pa.float64()),
    ("changed_frac", pa.float64()),
    ("update_sparsity", pa.float64()),
    ("stable_rank", pa.float64()),
    ("effective_rank", pa.float64()),
    ("increment_norm", pa.float64()),
    ("cos_prev", pa.float64()),
)

MODEL_WEIGHTS = "model.safetensors"
MODEL_INDEX = "model.safetensors.index.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
PEFT_PREFIX = "base_model.model."  # peft's prefix of the wrapped model's parameter names

# Elementwise passes over a tensor run in chunks of this many entries, so that their temporaries
# (|ΔW|, tolerance * |W_0|, the comparison) stay at a few MB for any tensor size.
_CHUNK = 1 << 20
_RANDOMIZED_SEED = 0

# ---------------------------------------------------------------------------------------------
# Names


_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)(?:\.|$)")
_ALIASES = {
    "q_proj": "q",
    "query": "q",
    "wq": "q",
    "k_proj": "k",
    "key": "k",
    "wk": "k",
    "v_proj": "v",
    "value": "v",
    "wv": "v",
    "o_proj": "o",
    "out_proj": "o",
    "wo": "o",
    "gate_proj": "gate",
    "w1": "gate",  # Mixtral-style experts: w1 gate, w3 up, w2 down
    "up_proj": "up",
    "w3": "up",
    "down_proj": "down",
    "w2": "down",
    "lm_head": "lm_head",
    "embed_out": "lm_head",
    "wte": "embed",
    "wpe": "embed",
}


def classify(name: str) -> tuple[int | None, str]:
    """(layer index or None, module type) of a tensor name, the type one of `MODULE_TYPES`.

    The layer comes from `.layers.<i>.`, `.h.<i>.` or `.blocks.<i>.`. A name with a component
    containing "norm" or starting with "ln_" is a norm (q_norm included); otherwise the innermost
    component naming a projection decides (q_proj -> q, ..., down_proj -> down, lm_head); then
    any component containing "embed" -> embed; else other. A bias has its module's type.
    """
    match = _LAYER.search(name)
    layer = int(match.group(1)) if match else None
    parts = name.split(".")
    if any("norm" in p or p.startswith("ln_") or p == "ln" for p in parts):
        return layer, "norm"
    for part in reversed(parts):
        if part in _ALIASES:
            return layer, _ALIASES[part]
    if any("embed" in p for p in parts):
        return layer, "embed"
    return layer, "other"


def _natural_key(name: str) -> list:
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name)]


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


def _read(entry: _Entry) -> torch.Tensor:
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


def _base_weights(base_dir: Path) -> dict[str, _Entry]:
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
                    f"{entry.file}: tensor {name!r} has shape {_shape(entry.shape)}, "
                    f"the base model {_shape(b.shape)}"
                )
        for name, entry in entries.items():
            if name not in base:
                raise InputError(f"{entry.file}: tensor {name!r} is not in the base model")
        self.entries = entries

    def update(self, name: str, w0: torch.Tensor) -> torch.Tensor | None:
        return _read(self.entries[name]).sub_(w0)


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
                    f"{weights_path}: tensor {b.name!r}: lora A {_shape(a.shape)} and B "
                    f"{_shape(b.shape)} are not of rank r={r_m} as {config_path.name} says"
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
                f"{_shape(part.shape)}, the base model {_shape(base[name].shape)}"
            )
        parts = self.parts.setdefault(name, [])
        if any((p.kind == "saved") == (part.kind == "saved") for p in parts):
            raise InputError(f"{self.file}: tensor {name!r} is updated twice (again by {key!r})")
        parts.append(part)

    def update(self, name: str, w0: torch.Tensor) -> torch.Tensor | None:
        delta = None
        for part in sorted(self.parts.get(name, ()), key=lambda p: p.kind != "saved"):
            if part.kind == "saved":
                delta = _read(part.b).sub_(w0)
                continue
            if part.kind == "bias":
                lora = _read(part.b)
            else:
                lora = _read(part.b) @ _read(part.a)  # peft's get_delta_weight, in float32
                lora = lora.T.contiguous() if part.transpose else lora
            lora.mul_(part.scale)
            delta = lora if delta is None else delta.add_(lora)
        return delta


def _open_checkpoint(directory: Path, base: dict[str, _Entry]):
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
    base = _base_weights(Path(base_dir))
    if name not in base:
        raise InputError(f"{base_dir}: the base model has no tensor {name!r}")
    w0 = _read(base[name])
    delta = _open_checkpoint(Path(checkpoint_dir), base).update(name, w0)
    return torch.zeros_like(w0) if delta is None else delta


# ---------------------------------------------------------------------------------------------
# Statistics


def _shape(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape)


def _norm(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t))


def _chunks(*tensors: torch.Tensor) -> Iterable[tuple[torch.Tensor, ...]]:
    flat = [t.reshape(-1) for t in tensors]
    for i in range(0, flat[0].numel(), _CHUNK):
        yield tuple(f[i : i + _CHUNK] for f in flat)


def _changed(delta: torch.Tensor, w0: torch.Tensor, tolerance: float) -> int:
    unchanged = 0
    for d, w in _chunks(delta, w0):
        # `<=` then count the rest: a NaN entry compares False, so it counts as changed.
        unchanged += int((d.abs() <= w.abs().mul_(tolerance)).sum())
    return delta.numel() - unchanged


def _dot(a: torch.Tensor, b: torch.Tensor) -> float:
    return math.fsum(float(torch.dot(x, y)) for x, y in _chunks(a, b))


def singular_values(
    matrix: torch.Tensor,
    svd: str = "auto",
    *,
    rank: int = 64,
    exact_max: int = 1024,
    niter: int = 4,
) -> tuple[torch.Tensor, str]:
    """Singular values of a 2-D float tensor, descending, in float64, and the method used:
    "exact" (all of them) or "randomized" (the top min(rank, rows, cols), seeded)."""
    if svd not in SVD_METHODS:
        raise ValueError(f"svd={svd!r}: expected one of {SVD_METHODS}")
    if svd == "exact" or (svd == "auto" and min(matrix.shape) <= exact_max):
        try:
            values = torch.linalg.svdvals(matrix)
        except torch.linalg.LinAlgError:  # float32 did not converge: retry in float64
            values = torch.linalg.svdvals(matrix.double())
        return values.double(), "exact"
    q = min(rank, *matrix.shape)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_RANDOMIZED_SEED)
        _, values, _ = torch.svd_lowrank(matrix, q=q, niter=niter)
    return values.double().sort(descending=True).values, "randomized"


def spectrum_stats(values: torch.Tensor, frobenius_sq: float) -> tuple[float, float, float]:
    """(stable rank, effective rank, spectrum energy) from singular values and ||ΔW||_F^2.

    stable rank = ||ΔW||_F^2 / σ_max^2; effective rank = exp(-Σ p_i log p_i), p_i = σ_i / Σσ_j
    over the values given (Roy & Vetterli 2007, eq. 1-3); energy = Σσ_i^2 / ||ΔW||_F^2, at most 1.
    """
    values = values.double()
    top = float(values.max())
    if top <= 0 or frobenius_sq <= 0:
        return 0.0, 0.0, 1.0
    p = values[values > 0] / values.sum()
    entropy = float(-(p * p.log()).sum())
    energy = min(1.0, float((values**2).sum()) / frobenius_sq)
    return frobenius_sq / top**2, math.exp(entropy), energy


def _spectrum(
    delta: torch.Tensor | None,
    ndim: int,
    update_norm: float,
    svd: str,
    svd_rank: int,
    svd_exact_max: int,
    svd_niter: int,
) -> dict:
    """stable_rank, effective_rank, spectrum_energy and svd of one update (see the module doc)."""
    if ndim < 2:
        return dict(stable_rank=None, effective_rank=None, spectrum_energy=None, svd=None)
    if delta is None or update_norm == 0 or delta.numel() == 0:
        return dict(stable_rank=0.0, effective_rank=0.0, spectrum_energy=None, svd=None)
    if not math.isfinite(update_norm):  # a diverged checkpoint: no spectrum to speak of
        return dict(stable_rank=None, effective_rank=None, spectrum_energy=None, svd=None)
    values, method = singular_values(
        delta.reshape(delta.shape[0], -1),
        svd,
        rank=svd_rank,
        exact_max=svd_exact_max,
        niter=svd_niter,
    )
    stable, effective, energy = spectrum_stats(values, update_norm**2)
    return dict(
        stable_rank=stable,
        effective_rank=effective,
        spectrum_energy=1.0 if method == "exact" else energy,
        svd=method,
    )


def _relative(update_norm: float, base_norm: float) -> float | None:
    """||ΔW|| / ||W_0||; 0 for no update; null for an update of a zero tensor."""
    if base_norm > 0:
        return update_norm / base_norm
    return 0.0 if update_norm == 0 else None


def _cosine(a: torch.Tensor | None, b: torch.Tensor | None, na: float, nb: float) -> float | None:
    if a is None or b is None or na == 0 or nb == 0:
        return None
    cos = _dot(a, b) / (na * nb)
    return max(-1.0, min(1.0, cos)) if math.isfinite(cos) else None


def tensor_dynamics(
    base_dir: str | Path,
    checkpoints: Sequence[tuple[int, str | Path]],
    *,
    tolerance: float = 2**-8,
    svd: str = "auto",
    svd_rank: int = 64,
    svd_exact_max: int = 1024,
    svd_niter: int = 4,
    progress: bool = True,
) -> pa.Table:
    """One row per (base tensor, checkpoint): `TENSORS_SCHEMA`, described in the module doc.

    `checkpoints` are (step, directory) pairs with strictly increasing steps. Rows are ordered
    by tensor name (numbers in names compared as numbers), then step. Every checkpoint is
    checked (names, shapes, adapter keys) before any tensor is read.
    """
    if svd not in SVD_METHODS:
        raise InputError(f"svd={svd!r}: expected one of {SVD_METHODS}")
    if tolerance < 0 or svd_rank < 1 or svd_exact_max < 1 or svd_niter < 0:
        raise InputError(
            "tolerance >= 0, svd_rank >= 1, svd_exact_max >= 1 and svd_niter >= 0 are required"
        )
    steps = [int(step) for step, _ in checkpoints]
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        raise InputError(f"checkpoint steps must be strictly increasing, got {steps}")
    base = _base_weights(Path(base_dir))
    sources = [_open_checkpoint(Path(path), base) for _, path in checkpoints]
    svd_args = (svd, svd_rank, svd_exact_max, svd_niter)

    rows: dict[str, list] = {name: [] for name in TENSORS_SCHEMA.names}
    names = sorted(base, key=_natural_key)
    for name in tqdm(names, desc="tensor dynamics", unit="tensor", disable=not progress):
        layer, module = classify(name)
        w0 = _read(base[name])
        base_norm = _norm(w0)
        # Between checkpoints only these survive: the cumulative update and the increment of
        # the previous checkpoint (None: zero). Each is a tensor no one else holds, so the
        # next increment can be computed in the previous update's buffer.
        prev_delta: torch.Tensor | None = None
        prev_inc: torch.Tensor | None = None
        prev_inc_norm = 0.0
        for k, (step, source) in enumerate(zip(steps, sources, strict=True)):
            delta = source.update(name, w0)
            if delta is None or not w0.numel():
                update_norm, changed_frac = 0.0, 0.0
            else:
                update_norm = _norm(delta)
                changed_frac = _changed(delta, w0, tolerance) / w0.numel()
            last = k + 1 == len(steps)
            if delta is not None and prev_delta is not None:
                inc = prev_delta.sub_(delta).neg_()  # delta - prev_delta, in prev's buffer
            elif prev_delta is not None:
                inc = prev_delta.neg_()
            elif delta is not None:
                inc = delta if last else delta.clone()
            else:
                inc = None
            prev_delta = None
            inc_norm = 0.0 if inc is None else _norm(inc)
            cos_prev = _cosine(inc, prev_inc, inc_norm, prev_inc_norm) if k else None
            # Free the previous increment before the SVD, which copies `delta`: the peak is
            # W_0, delta, this increment and the SVD's copy and workspace.
            prev_inc = None
            row = dict(
                step=step,
                name=name,
                layer=layer,
                module=module,
                numel=w0.numel(),
                shape=_shape(w0.shape),
                rel_update=_relative(update_norm, base_norm),
                update_norm=update_norm,
                base_norm=base_norm,
                changed_frac=changed_frac,
                update_sparsity=1.0 - changed_frac,
                increment_norm=inc_norm,
                cos_prev=cos_prev,
                **_spectrum(delta, w0.dim(), update_norm, *svd_args),
            )
            for key, value in row.items():
                rows[key].append(value)
            if not last:
                prev_delta, prev_inc, prev_inc_norm = delta, inc, inc_norm
            del delta, inc
        del w0
    return pa.table(rows, schema=TENSORS_SCHEMA)


# ---------------------------------------------------------------------------------------------
# Aggregates and the heatmap


def _sort_key(value) -> tuple:
    return (1, 0) if value is None else (0, value)


def aggregate(table: pa.Table, by: Sequence[str] = ("step", "layer", "module")) -> pa.Table:
    """Combine the tensors of each group of `by` (a null layer is a group of its own):

    - rel_update = sqrt(Σ update_norm²) / sqrt(Σ base_norm²): the relative update of the group's
      tensors concatenated into one vector (0 / null as for one tensor); update_norm and
      base_norm are those sqrt(Σ ·²);
    - changed_frac: numel-weighted mean (the fraction of the group's entries that changed);
    - stable_rank, effective_rank: numel-weighted means over the group's 2-D tensors (null if none);
    - increment_norm = sqrt(Σ increment_norm²), and cos_prev the cosine of the concatenated
      increments (from each row's cos_prev and the increment norms of that tensor's previous
      step; null where no tensor has a previous step or an increment is 0);
    - n_tensors, numel.
    Groups are sorted by their keys, nulls last.
    """
    missing = [c for c in (*by, *TENSORS_SCHEMA.names) if c not in table.column_names]
    if missing:
        raise InputError(f"aggregate: the table lacks columns {missing}")
    cols = {name: table.column(name).to_pylist() for name in TENSORS_SCHEMA.names}
    keys = list(zip(*(table.column(c).to_pylist() for c in by), strict=True))

    # The increment norm of each tensor at its previous step, for the combined cosine.
    prev_inc: list[float | None] = [None] * table.num_rows
    last: dict[str, tuple[int, float]] = {}
    for i in sorted(range(table.num_rows), key=lambda i: (cols["name"][i], cols["step"][i])):
        name = cols["name"][i]
        if name in last:
            prev_inc[i] = last[name][1]
        last[name] = (cols["step"][i], cols["increment_norm"][i])

    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    out: dict[str, list] = {c: [] for c in (*by, *(name for name, _ in AGGREGATE_COLUMNS))}
    for key in sorted(groups, key=lambda k: tuple(_sort_key(v) for v in k)):
        idx = groups[key]
        numel = sum(cols["numel"][i] for i in idx)
        update_norm = math.sqrt(math.fsum(cols["update_norm"][i] ** 2 for i in idx))
        base_norm = math.sqrt(math.fsum(cols["base_norm"][i] ** 2 for i in idx))
        rel_update = _relative(update_norm, base_norm)
        changed = math.fsum(cols["changed_frac"][i] * cols["numel"][i] for i in idx)
        changed_frac = changed / numel if numel else 0.0
        ranks = {}
        for metric in ("stable_rank", "effective_rank"):
            pairs = [
                (cols[metric][i], cols["numel"][i]) for i in idx if cols[metric][i] is not None
            ]
            weight = sum(n for _, n in pairs)
            ranks[metric] = math.fsum(v * n for v, n in pairs) / weight if weight else None
        inc_sq = math.fsum(cols["increment_norm"][i] ** 2 for i in idx)
        with_prev = [i for i in idx if prev_inc[i] is not None]
        cos = None
        if with_prev:
            dot = math.fsum(
                cols["cos_prev"][i] * cols["increment_norm"][i] * prev_inc[i]
                for i in with_prev
                if cols["cos_prev"][i] is not None
            )
            now = math.fsum(cols["increment_norm"][i] ** 2 for i in with_prev)
            before = math.fsum(prev_inc[i] ** 2 for i in with_prev)
            if now > 0 and before > 0:
                cos = max(-1.0, min(1.0, dot / math.sqrt(now * before)))
        values = dict(
            n_tensors=len(idx),
            numel=numel,
            update_norm=update_norm,
            base_norm=base_norm,
            rel_update=rel_update,
            changed_frac=changed_frac,
            update_sparsity=1.0 - changed_frac,
            increment_norm=math.sqrt(inc_sq),
            cos_prev=cos,
            **ranks,
        )
        for c, v in zip(by, key, strict=True):
            out[c].append(v)
        for c, v in values.items():
            out[c].append(v)
    schema = pa.schema(
        [table.schema.field(c) for c in by] + [pa.field(n, t) for n, t in AGGREGATE_COLUMNS]
    )
    return pa.table(out, schema=schema)


GLOBAL_ROW = "global"


def heatmap_figure(
    table: pa.Table, path: str | Path, *, metric: str = "rel_update", step: int | None = None
) -> None:
    """PNG heatmap of `metric` per layer (rows) x module type (columns) at `step` (default: the
    last), values written in the cells. `table` is `tensor_dynamics` output (aggregated here by
    step, layer, module) or such an aggregate. Tensors outside numbered layers (embeddings,
    final norm, lm_head) form the last row, "global". cos_prev uses a diverging scale on [-1, 1]."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if "name" in table.column_names:
        table = aggregate(table, by=("step", "layer", "module"))
    needed = ("step", "layer", "module")
    if any(c not in table.column_names for c in needed):
        raise InputError(f"heatmap: the table needs columns {needed}")
    numeric = [
        f.name
        for f in table.schema
        if f.name not in needed and (pa.types.is_floating(f.type) or pa.types.is_integer(f.type))
    ]
    if metric not in numeric:
        raise InputError(f"heatmap: metric={metric!r}: expected one of {numeric}")
    steps = sorted(set(table.column("step").to_pylist()))
    if not steps:
        raise InputError("heatmap: the table is empty")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise InputError(f"heatmap: step={step} is not in the table (steps: {steps})")

    rows = [r for r in table.to_pylist() if r["step"] == step]
    layers = sorted({r["layer"] for r in rows if r["layer"] is not None})
    row_keys: list[int | None] = [*layers]
    if any(r["layer"] is None for r in rows):
        row_keys.append(None)
    modules = [m for m in MODULE_TYPES if any(r["module"] == m for r in rows)]
    modules += sorted({r["module"] for r in rows} - set(modules))
    values = np.full((len(row_keys), len(modules)), np.nan)
    for r in rows:
        if r[metric] is not None:
            values[row_keys.index(r["layer"]), modules.index(r["module"])] = r[metric]

    fig = Figure(
        figsize=(1.6 + 0.9 * len(modules), 1.4 + 0.38 * len(row_keys)), layout="constrained"
    )
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    diverging = metric == "cos_prev"
    cmap = matplotlib.colormaps["coolwarm" if diverging else "viridis"].with_extremes(bad="0.92")
    limits = dict(vmin=-1.0, vmax=1.0) if diverging else {}
    image = ax.imshow(values, aspect="auto", cmap=cmap, interpolation="nearest", **limits)
    fig.colorbar(image, ax=ax, label=metric)
    ax.set_xticks(range(len(modules)), modules)
    ax.set_yticks(range(len(row_keys)), [GLOBAL_ROW if k is None else str(k) for k in row_keys])
    ax.set(xlabel="module", ylabel="layer", title=f"{metric} at step {step}")
    fontsize = 7 if len(modules) > 8 or len(row_keys) > 24 else 8
    for (i, j), value in np.ndenumerate(values):
        if math.isnan(value):
            continue  # no tensor of that type there: a grey cell
        red, green, blue, _ = cmap(image.norm(value))
        light = 0.299 * red + 0.587 * green + 0.114 * blue > 0.5
        ax.text(
            j,
            i,
            f"{value:.3g}",
            ha="center",
            va="center",
            size=fontsize,
            color="black" if light else "white",
        )
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
