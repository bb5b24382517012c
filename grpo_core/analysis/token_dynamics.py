"""Token-level training dynamics from the RL rollout log (`data/rollouts.parquet`).

The train stage logs one row per question per RL step
(`grpo_core.training.rollout_log.ROLLOUT_LOG`). This module aggregates that log per step, over
all questions and per slice (per level, and per base-model difficulty bin when a profile is
given), into a tidy table, and the per-step tables behind
the four classic views (`plot_tables`; drawn by `grpo_core.analysis.figures.token_figure`):

- confidence inflation: the log-prob of correct and of incorrect rollouts rises over training;
- advantage contraction: the per-group mean |advantage| shrinks and more groups get zero
  advantage (all G completions rewarded alike) as questions become solved or stay unsolved;
- hierarchical convergence: easy levels / bins converge before hard ones;
- update weights: the per-token coefficient the loss put on grad log pi, and the clip fraction.

Conventions (all aggregates are plain, unweighted means over question groups):

- `accuracy` is the mean of 1 - difficulty over the slice's groups.
- `logp_correct` / `logp_incorrect` are the plain mean over the groups that have one (a group
  with no correct completion has a null `logp_correct` and is skipped, not counted as zero);
  groups are not weighted by their number of correct completions or tokens.
  `confidence_gap` is the difference of those two slice means.
- `adv_abs_p10/p50/p90` are quantiles of the per-group `adv_abs_mean` over the slice, with
  linear interpolation between order statistics (numpy's / pandas' default "linear" method:
  position q * (n - 1) in the sorted values), nulls ignored.
- `zero_adv_frac` is the fraction of groups with `reward_std == 0` (all rewards equal, hence zero
  advantage); groups with a null `reward_std` are left out.
- `trained_frac` / `guided_frac` are the fractions of groups with `trained` / `guided` true.
- `update_weight_abs`, `update_weight_mean` and `clip_frac` are plain means over the slice's
  trained groups only (untrained groups have null weights by construction, and are masked out
  even if a value was logged). Logs written before these columns existed give nulls.
- Every null or NaN input is treated as missing; a slice with no usable value gives null.
- Rows with a null `level` count in the "all" slice but in no "level" slice.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from grpo_core.analysis.difficulty import BINS
from grpo_core.errors import InputError

REQUIRED_COLUMNS = (
    "step",
    "id",
    "level",
    "reward_std",
    "difficulty",
    "adv_abs_mean",
    "logp_correct",
    "logp_incorrect",
    "guided",
    "trained",
)
OPTIONAL_COLUMNS = ("update_weight_abs", "update_weight_mean", "clip_frac")
PROFILE_COLUMNS = ("id", "bin")
UNPROFILED = "unprofiled"

QUANTILES = {"adv_abs_p10": 0.1, "adv_abs_p50": 0.5, "adv_abs_p90": 0.9}

TOKENS_SCHEMA = pa.schema(
    [
        ("step", pa.int32()),
        ("by", pa.string()),  # "all" | "level" | "bin"
        ("slice", pa.string()),  # "all", "3", "hard", "unprofiled", ...
        ("questions", pa.int64()),
        ("accuracy", pa.float64()),
        ("logp_correct", pa.float64()),
        ("logp_incorrect", pa.float64()),
        ("confidence_gap", pa.float64()),
        ("adv_abs_mean", pa.float64()),
        ("adv_abs_p10", pa.float64()),
        ("adv_abs_p50", pa.float64()),
        ("adv_abs_p90", pa.float64()),
        ("zero_adv_frac", pa.float64()),
        ("trained_frac", pa.float64()),
        ("update_weight_abs", pa.float64()),
        ("update_weight_mean", pa.float64()),
        ("clip_frac", pa.float64()),
        ("guided_frac", pa.float64()),
    ]
)

# Columns of the per-group frame that are averaged per slice (NaN = missing, skipped).
_MEAN_COLUMNS = (
    "accuracy",
    "logp_correct",
    "logp_incorrect",
    "adv_abs_mean",
    "zero_adv_frac",
    "trained_frac",
    "update_weight_abs",
    "update_weight_mean",
    "clip_frac",
    "guided_frac",
)
_BY_ORDER = {"all": 0, "level": 1, "bin": 2}


def _require(table: pa.Table, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        names = ", ".join(repr(c) for c in missing)
        raise InputError(f"{what} is missing column{'s' if len(missing) > 1 else ''} {names}")


def _float(table: pa.Table, name: str) -> np.ndarray:
    """A column as float64 with nulls as NaN (all NaN when the column is absent)."""
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    col = table.column(name).cast(pa.float64())
    return col.to_numpy(zero_copy_only=False).astype(np.float64)


def _bin_sort_key(name: str) -> tuple[int, str]:
    order = {b: i for i, b in enumerate((*BINS, UNPROFILED))}
    return (order.get(name, len(order)), name)


def _profile_bins(ids: pd.Series, profile: pa.Table) -> pd.Series:
    _require(profile, PROFILE_COLUMNS, "profile table")
    prof = profile.select(list(PROFILE_COLUMNS)).to_pandas().drop_duplicates()
    dup = prof["id"][prof["id"].duplicated()]
    if len(dup):
        raise InputError(f"profile table: question {dup.iloc[0]!r} has more than one bin")
    bins = ids.map(prof.set_index("id")["bin"])
    return bins.where(bins.notna(), UNPROFILED).astype(object)


def _groups(log: pa.Table, profile: pa.Table | None) -> pd.DataFrame:
    """One row per logged group with the per-group quantities that are averaged per slice."""
    trained = _float(log, "trained")
    is_trained = trained == 1.0
    reward_std = _float(log, "reward_std")
    df = pd.DataFrame(
        {
            "step": log.column("step").to_numpy(zero_copy_only=False),
            "accuracy": 1.0 - _float(log, "difficulty"),
            "logp_correct": _float(log, "logp_correct"),
            "logp_incorrect": _float(log, "logp_incorrect"),
            "adv_abs_mean": _float(log, "adv_abs_mean"),
            "zero_adv_frac": np.where(np.isnan(reward_std), np.nan, reward_std == 0),
            "trained_frac": trained,
            "update_weight_abs": np.where(is_trained, _float(log, "update_weight_abs"), np.nan),
            "update_weight_mean": np.where(is_trained, _float(log, "update_weight_mean"), np.nan),
            "clip_frac": np.where(is_trained, _float(log, "clip_frac"), np.nan),
            "guided_frac": _float(log, "guided"),
        }
    )
    level = log.column("level").to_pandas().astype("Int64")
    df["level"] = level.astype("string").astype(object).where(level.notna(), None)
    if profile is not None:
        df["bin"] = _profile_bins(log.column("id").to_pandas().astype(object), profile).values
    return df


def _aggregate(df: pd.DataFrame, by: str, key: pd.Series) -> pd.DataFrame:
    """Per (step, slice) aggregates of `df` with the slice given by `key` (nulls dropped)."""
    frame = df.assign(slice=key.values)
    frame = frame[frame["slice"].notna()]
    grouped = frame.groupby(["step", "slice"], sort=False)
    out = grouped[list(_MEAN_COLUMNS)].mean()
    out["questions"] = grouped.size()
    quant = grouped["adv_abs_mean"].quantile(list(QUANTILES.values()), interpolation="linear")
    quant = quant.unstack(level=-1)
    for name, q in QUANTILES.items():
        out[name] = quant[q]
    out = out.reset_index()
    out["by"] = by
    return out


def token_dynamics(log: pa.Table, profile: pa.Table | None = None) -> pa.Table:
    """Per-step token-level dynamics, one row per (step, slice): `TOKENS_SCHEMA`.

    `log` is the rollout log (`grpo_core.training.rollout_log.ROLLOUT_LOG`, with or without the
    optional `update_weight_abs`, `update_weight_mean`, `clip_frac` columns); `profile`, if
    given, has `id` and `bin` columns (`data/profile.parquet`) and adds by="bin" slices,
    questions not in it going to bin "unprofiled". Rows are ordered by step, then all / level /
    bin, then level number or bin difficulty (unsolved, hard, easy, solved, unprofiled, others
    by name). A missing required column raises `InputError` naming it."""
    _require(log, REQUIRED_COLUMNS, "rollout log")
    if log.num_rows == 0:
        return TOKENS_SCHEMA.empty_table()
    df = _groups(log, profile)
    parts = [
        _aggregate(df, "all", pd.Series("all", index=df.index, dtype=object)),
        _aggregate(df, "level", df["level"]),
    ]
    if profile is not None:
        parts.append(_aggregate(df, "bin", df["bin"]))
    out = pd.concat(parts, ignore_index=True)
    out["confidence_gap"] = out["logp_correct"] - out["logp_incorrect"]

    # Order: step, then all / level / bin, then level number or bin difficulty, then name.
    is_level = out["by"] == "level"
    is_bin = out["by"] == "bin"
    level_rank = pd.to_numeric(out["slice"].where(is_level), errors="coerce")
    bin_rank = out["slice"].map(lambda s: _bin_sort_key(s)[0])
    rank = np.where(is_level, level_rank, np.where(is_bin, bin_rank, 0))
    out = out.assign(_by=out["by"].map(_BY_ORDER), _rank=rank)
    out = out.sort_values(["step", "_by", "_rank", "slice"], kind="stable")
    out["step"] = out["step"].astype("int32")
    out["questions"] = out["questions"].astype("int64")
    table = pa.Table.from_pandas(
        out[TOKENS_SCHEMA.names], schema=TOKENS_SCHEMA, preserve_index=False
    )
    return table.replace_schema_metadata(None)


# ------------------------------------------------------------------------------ plot tables


def _slices(tokens: pd.DataFrame, by: str) -> pd.DataFrame:
    return tokens[tokens["by"] == by]


def plot_tables(tokens: pa.Table) -> dict[str, pa.Table]:
    """Per-step tables for DVC plots and study reports, from `token_dynamics` output:

    - `confidence`: step, logp_correct, logp_incorrect (all questions);
    - `advantage`: step, adv_abs_p10, adv_abs_p50, adv_abs_p90, zero_adv_frac;
    - `convergence`: step, `level<N>` accuracy per level, then `bin_<name>` per profile bin
      (only when the tokens have bin slices); a slice absent at a step is null;
    - `convergence_long`: the same numbers in long form (`long_table`: step, series, accuracy),
      which is what the DVC plot reads, since its columns vary with the levels trained;
    - `update_weights`: step, update_weight_abs, update_weight_mean, clip_frac.
    The wide tables have one row per step, ascending."""
    _require(tokens, tuple(TOKENS_SCHEMA.names), "token dynamics table")
    df = tokens.to_pandas()
    overall = _slices(df, "all").sort_values("step")
    steps = overall["step"].astype("int32").to_numpy()
    out: dict[str, pa.Table] = {}
    wide = {
        "confidence": ["logp_correct", "logp_incorrect"],
        "advantage": ["adv_abs_p10", "adv_abs_p50", "adv_abs_p90", "zero_adv_frac"],
        "update_weights": ["update_weight_abs", "update_weight_mean", "clip_frac"],
    }
    for name, cols in wide.items():
        out[name] = _wide_table(steps, {c: overall[c].to_numpy() for c in cols})
    conv: dict[str, np.ndarray] = {}
    for by, prefix in (("level", "level"), ("bin", "bin_")):
        part = _slices(df, by)
        if part.empty:
            continue
        pivot = part.pivot(index="step", columns="slice", values="accuracy").reindex(steps)
        for s in sorted(pivot.columns, key=_level_or_bin_key(by)):
            conv[f"{prefix}{s}"] = pivot[s].to_numpy()
    out["convergence"] = _wide_table(steps, conv)
    out["convergence_long"] = long_table(out["convergence"], "accuracy")
    names = ("confidence", "advantage", "convergence", "convergence_long", "update_weights")
    return {k: out[k] for k in names}


def long_table(wide: pa.Table, value: str) -> pa.Table:
    """`wide` (step, then one column per series) as rows of (step, series, `value`): series in
    column order, steps ascending within each, null values dropped.

    Why: a DVC plot names its y columns in dvc.yaml, so a file whose columns vary (one per
    level trained, one per module type present) cannot be declared column by column; in long
    form it is one y column, and the template .dvc/plots/series.json colours by `series`."""
    steps, series, values = [], [], []
    step_values = wide["step"].to_pylist()
    for name in wide.column_names:
        if name == "step":
            continue
        for step, v in zip(step_values, wide[name].to_pylist(), strict=True):
            if v is not None and v == v:  # v != v: NaN
                steps.append(step)
                series.append(name)
                values.append(v)
    return pa.table(
        {
            "step": pa.array(steps, type=pa.int32()),
            "series": pa.array(series, type=pa.string()),
            value: pa.array(values, type=pa.float64()),
        }
    )


def _level_or_bin_key(by: str):
    if by == "level":
        return lambda s: int(s)
    return _bin_sort_key


def _wide_table(steps: np.ndarray, columns: dict[str, np.ndarray]) -> pa.Table:
    arrays = [pa.array(steps, type=pa.int32())]
    arrays += [
        pa.array(np.asarray(v, dtype=np.float64), from_pandas=True) for v in columns.values()
    ]
    return pa.Table.from_arrays(arrays, names=["step", *columns])
