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

Which SVD runs, and what a randomized SVD's ranks mean: `grpo_core.analysis.spectrum`.

Memory. Tensors are processed one name at a time across all checkpoints: W_0 of that name is
read, then each checkpoint's tensor (or that module's lora_A / lora_B); only W_0, the previous
cumulative update and the previous increment (for `cos_prev`) are kept between checkpoints.
The peak is four float32 copies of the largest tensor (W_0, the update, the previous update
turned into this increment, the previous increment), or three plus the SVD's copy of the
update and its workspace (the previous increment is freed before the SVD): never a whole
checkpoint. Files are read with plain reads at the offsets of the safetensors header, never
memory-mapped (`grpo_core.analysis.weights`, which also reads full and LoRA checkpoints).
`python -m benchmarks.dynamics_memory` measures it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow as pa
import torch
from tqdm import tqdm

from grpo_core.analysis.spectrum import SVD_METHODS, singular_values, spectrum_stats
from grpo_core.analysis.weights import base_weights, open_checkpoint, read_tensor, shape_text
from grpo_core.errors import InputError

MODULE_TYPES = ("q", "k", "v", "o", "gate", "up", "down", "embed", "lm_head", "norm", "other")

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

# Elementwise passes over a tensor run in chunks of this many entries, so that their temporaries
# (|ΔW|, tolerance * |W_0|, the comparison) stay at a few MB for any tensor size.
_CHUNK = 1 << 20

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


# Statistics


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
    _check_options(tolerance, svd, svd_rank, svd_exact_max, svd_niter)
    steps = [int(step) for step, _ in checkpoints]
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        raise InputError(f"checkpoint steps must be strictly increasing, got {steps}")
    base = base_weights(Path(base_dir))
    sources = [open_checkpoint(Path(path), base) for _, path in checkpoints]
    svd_args = (svd, svd_rank, svd_exact_max, svd_niter)

    rows: dict[str, list] = {name: [] for name in TENSORS_SCHEMA.names}
    names = sorted(base, key=_natural_key)
    for name in tqdm(names, desc="tensor dynamics", unit="tensor", disable=not progress):
        w0 = read_tensor(base[name])
        for row in _tensor_rows(name, w0, steps, sources, tolerance, svd_args):
            for key, value in row.items():
                rows[key].append(value)
        del w0
    return pa.table(rows, schema=TENSORS_SCHEMA)


def _check_options(
    tolerance: float, svd: str, svd_rank: int, svd_exact_max: int, svd_niter: int
) -> None:
    if svd not in SVD_METHODS:
        raise InputError(f"svd={svd!r}: expected one of {SVD_METHODS}")
    if tolerance < 0 or svd_rank < 1 or svd_exact_max < 1 or svd_niter < 0:
        raise InputError(
            "tolerance >= 0, svd_rank >= 1, svd_exact_max >= 1 and svd_niter >= 0 are required"
        )


def _tensor_rows(
    name: str,
    w0: torch.Tensor,
    steps: list[int],
    sources: list,
    tolerance: float,
    svd_args: tuple,
) -> list[dict]:
    """The rows of one base tensor W_0, one per checkpoint in step order."""
    layer, module = classify(name)
    base_norm = _norm(w0)
    rows = []
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
        inc = _increment(delta, prev_delta, last)
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
            shape=shape_text(w0.shape),
            rel_update=_relative(update_norm, base_norm),
            update_norm=update_norm,
            base_norm=base_norm,
            changed_frac=changed_frac,
            update_sparsity=1.0 - changed_frac,
            increment_norm=inc_norm,
            cos_prev=cos_prev,
            **_spectrum(delta, w0.dim(), update_norm, *svd_args),
        )
        rows.append(row)
        if not last:
            prev_delta, prev_inc, prev_inc_norm = delta, inc, inc_norm
        del delta, inc
    return rows


def _increment(
    delta: torch.Tensor | None, prev_delta: torch.Tensor | None, last: bool
) -> torch.Tensor | None:
    """W_{t_k} - W_{t_{k-1}} = delta - prev_delta (None: zero), computed in `prev_delta`'s
    buffer, which no one else holds; `delta` itself is copied unless it is the last."""
    if delta is not None and prev_delta is not None:
        return prev_delta.sub_(delta).neg_()  # delta - prev_delta, in prev's buffer
    if prev_delta is not None:
        return prev_delta.neg_()
    if delta is not None:
        return delta if last else delta.clone()
    return None


# ---------------------------------------------------------------------------------------------
# Aggregates


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

    prev_inc = _previous_increments(cols, table.num_rows)
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    out: dict[str, list] = {c: [] for c in (*by, *(name for name, _ in AGGREGATE_COLUMNS))}
    for key in sorted(groups, key=lambda k: tuple(_sort_key(v) for v in k)):
        values = _group_values(cols, groups[key], prev_inc)
        for c, v in zip(by, key, strict=True):
            out[c].append(v)
        for c, v in values.items():
            out[c].append(v)
    schema = pa.schema(
        [table.schema.field(c) for c in by] + [pa.field(n, t) for n, t in AGGREGATE_COLUMNS]
    )
    return pa.table(out, schema=schema)


def _previous_increments(cols: dict[str, list], n: int) -> list[float | None]:
    """The increment norm of each row's tensor at its previous step (None at its first), for
    the combined cosine."""
    prev_inc: list[float | None] = [None] * n
    last: dict[str, tuple[int, float]] = {}
    for i in sorted(range(n), key=lambda i: (cols["name"][i], cols["step"][i])):
        name = cols["name"][i]
        if name in last:
            prev_inc[i] = last[name][1]
        last[name] = (cols["step"][i], cols["increment_norm"][i])
    return prev_inc


def _group_values(cols: dict[str, list], idx: list[int], prev_inc: list[float | None]) -> dict:
    """The `AGGREGATE_COLUMNS` of one group, the rows `idx` (see `aggregate`)."""
    numel = sum(cols["numel"][i] for i in idx)
    update_norm = math.sqrt(math.fsum(cols["update_norm"][i] ** 2 for i in idx))
    base_norm = math.sqrt(math.fsum(cols["base_norm"][i] ** 2 for i in idx))
    rel_update = _relative(update_norm, base_norm)
    changed = math.fsum(cols["changed_frac"][i] * cols["numel"][i] for i in idx)
    changed_frac = changed / numel if numel else 0.0
    ranks = _weighted_ranks(cols, idx)
    inc_sq = math.fsum(cols["increment_norm"][i] ** 2 for i in idx)
    cos = _combined_cosine(cols, idx, prev_inc)
    return dict(
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


def _weighted_ranks(cols: dict[str, list], idx: list[int]) -> dict[str, float | None]:
    """stable_rank and effective_rank: numel-weighted means over the rows that have one."""
    ranks = {}
    for metric in ("stable_rank", "effective_rank"):
        pairs = [(cols[metric][i], cols["numel"][i]) for i in idx if cols[metric][i] is not None]
        weight = sum(n for _, n in pairs)
        ranks[metric] = math.fsum(v * n for v, n in pairs) / weight if weight else None
    return ranks


def _combined_cosine(
    cols: dict[str, list], idx: list[int], prev_inc: list[float | None]
) -> float | None:
    """The cosine of the group's concatenated increments and their previous ones."""
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
    return cos


def update_by_module(tensors: pa.Table) -> pa.Table:
    """Per checkpoint, the relative update of each module type over all layers, in long form
    (step, series, rel_update; series is the module type, in `MODULE_TYPES` order, steps
    ascending within it; null updates dropped). Long, because the module types present vary
    with the model (an untied lm_head, LoRA targets) and a DVC plot names its y columns."""
    order = {m: i for i, m in enumerate(MODULE_TYPES)}
    rows = [
        r
        for r in aggregate(tensors, by=("step", "module")).to_pylist()
        if r["rel_update"] is not None and r["rel_update"] == r["rel_update"]  # not NaN
    ]
    rows.sort(key=lambda r: (order.get(r["module"], len(order)), r["module"], r["step"]))
    return pa.table(
        {
            "step": pa.array([r["step"] for r in rows], type=pa.int32()),
            "series": pa.array([r["module"] for r in rows], type=pa.string()),
            "rel_update": pa.array([r["rel_update"] for r in rows], type=pa.float64()),
        }
    )
