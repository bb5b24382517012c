"""The dynamics stage's figures (metrics/dynamics/*.png, shown in the README): the heatmap of a
tensor statistic per layer and module type (`heatmap_figure`, from `tensor_dynamics`), and the
four panels of the token-level dynamics (`token_figure`, from `token_dynamics`). Both draw on an
explicit Agg canvas: no pyplot, no global backend state, safe without a display.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from grpo_core.analysis.tensor_dynamics import MODULE_TYPES, aggregate
from grpo_core.analysis.token_dynamics import plot_tables
from grpo_core.errors import InputError
from grpo_core.io import atomic_path

# ---------------------------------------------------------------------------------------------
# The heatmap of tensor statistics

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

    step, row_keys, modules, values = _heatmap_grid(table, metric, step)
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
    _annotate(ax, values, cmap, image, fontsize)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)


def _heatmap_grid(
    table: pa.Table, metric: str, step: int | None
) -> tuple[int, list[int | None], list[str], np.ndarray]:
    """The step drawn, the row keys (layers, then None for "global"), the module types, and
    the (rows, modules) values of `metric`, NaN where no tensor of that type is."""
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
    return step, row_keys, modules, values


def _annotate(ax, values: np.ndarray, cmap, image, fontsize: int) -> None:
    """Each cell's value written in it, black on light colours and white on dark ones."""
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


# ---------------------------------------------------------------------------------------------
# The token-level dynamics

# Rolling mean drawn bold over the thin raw per-step values: a centred window of this many
# logged steps (min_periods=1, so the ends and gaps use what is there).
ROLLING_WINDOW = 5


def _rolling(values: pd.Series) -> pd.Series:
    return values.rolling(ROLLING_WINDOW, center=True, min_periods=1).mean()


def _line(ax, steps, values, color, label, style="-") -> None:
    """Raw per-step values thin and faint, their rolling mean bold."""
    values = pd.Series(np.asarray(values, dtype=np.float64))
    ax.plot(steps, values, style, color=color, lw=0.8, alpha=0.35)
    ax.plot(steps, _rolling(values), style, color=color, lw=2.0, label=label)


def _no_data(ax, what: str) -> None:
    ax.text(
        0.5,
        0.5,
        f"no {what} in this log",
        ha="center",
        va="center",
        transform=ax.transAxes,
        color="gray",
    )


def token_figure(tokens: pa.Table, path: str | Path) -> None:
    """One PNG with four panels from `token_dynamics` output: confidence inflation, advantage
    contraction, hierarchical convergence, update weights. Thin lines are raw per-step values,
    bold lines their centred rolling mean over `ROLLING_WINDOW` logged steps."""
    # An explicit Agg canvas: no pyplot, no global backend state, safe without a display.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    tables = {k: v.to_pandas() for k, v in plot_tables(tokens).items()}
    fig = Figure(figsize=(13, 9), layout="constrained")
    FigureCanvasAgg(fig)
    (ax_conf, ax_adv), (ax_conv, ax_upd) = fig.subplots(2, 2)
    steps = tables["confidence"]["step"].to_numpy()
    _confidence_panel(ax_conf, steps, tables["confidence"])
    _advantage_panel(ax_adv, steps, tables["advantage"])
    _convergence_panel(ax_conv, steps, tables["convergence"])
    _update_weights_panel(ax_upd, steps, tables["update_weights"])
    for ax in (ax_conf, ax_adv, ax_conv, ax_upd):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)


def _confidence_panel(ax_conf, steps: np.ndarray, conf: pd.DataFrame) -> None:
    """Confidence inflation: the mean token log-prob of correct and of incorrect rollouts."""
    if conf[["logp_correct", "logp_incorrect"]].notna().any().any():
        _line(ax_conf, steps, conf["logp_correct"], "tab:green", "correct rollouts")
        _line(ax_conf, steps, conf["logp_incorrect"], "tab:red", "incorrect rollouts")
        ax_conf.legend(loc="best", fontsize="small")
    else:
        _no_data(ax_conf, "log-probs")
    ax_conf.set(title="Confidence inflation", xlabel="step", ylabel="mean token log-prob")


def _advantage_panel(ax_adv, steps: np.ndarray, adv: pd.DataFrame) -> None:
    """Advantage contraction: the p10-p90 band and median of |advantage|, and on a twin axis
    the fraction of groups with zero advantage."""
    if adv["adv_abs_p50"].notna().any():
        ax_adv.fill_between(
            steps,
            adv["adv_abs_p10"],
            adv["adv_abs_p90"],
            color="tab:blue",
            alpha=0.12,
            lw=0,
            label="p10-p90 (raw)",
        )
        ax_adv.fill_between(
            steps,
            _rolling(adv["adv_abs_p10"]),
            _rolling(adv["adv_abs_p90"]),
            color="tab:blue",
            alpha=0.25,
            lw=0,
            label="p10-p90 (rolling)",
        )
        _line(ax_adv, steps, adv["adv_abs_p50"], "tab:blue", "median |adv|")
    else:
        _no_data(ax_adv, "advantages")
    twin = ax_adv.twinx()
    _line(twin, steps, adv["zero_adv_frac"], "tab:orange", "zero-advantage fraction")
    twin.set_ylim(-0.02, 1.02)
    twin.set_ylabel("fraction of groups with zero advantage", color="tab:orange")
    handles = ax_adv.get_legend_handles_labels()
    handles2 = twin.get_legend_handles_labels()
    twin.legend(handles[0] + handles2[0], handles[1] + handles2[1], loc="best", fontsize="small")
    ax_adv.set(title="Advantage contraction", xlabel="step", ylabel="per-group mean |advantage|")


def _convergence_panel(ax_conv, steps: np.ndarray, conv: pd.DataFrame) -> None:
    """Hierarchical convergence: accuracy per level (solid) and per profile bin (dashed)."""
    levels = [c for c in conv.columns if c.startswith("level")]
    bins = [c for c in conv.columns if c.startswith("bin_")]
    for i, col in enumerate(levels):
        _line(ax_conv, steps, conv[col], f"C{i % 10}", f"level {col[len('level') :]}")
    for i, col in enumerate(bins):
        _line(
            ax_conv,
            steps,
            conv[col],
            f"C{(len(levels) + i) % 10}",
            f"bin {col[len('bin_') :]}",
            style="--",
        )
    if levels or bins:
        ax_conv.legend(loc="best", fontsize="small", ncol=2)
    else:
        _no_data(ax_conv, "accuracies")
    ax_conv.set_ylim(-0.02, 1.02)
    ax_conv.set(title="Hierarchical convergence", xlabel="step", ylabel="accuracy (1 - difficulty)")


def _update_weights_panel(ax_upd, steps: np.ndarray, upd: pd.DataFrame) -> None:
    """Update weights of the trained groups and, on a twin axis, the fraction of tokens
    clipped."""
    twin = ax_upd.twinx()
    if upd[["update_weight_abs", "update_weight_mean", "clip_frac"]].notna().any().any():
        _line(ax_upd, steps, upd["update_weight_abs"], "tab:purple", "mean |A·ρ·clip·w|")
        _line(ax_upd, steps, upd["update_weight_mean"], "tab:gray", "mean A·ρ·clip·w", style=":")
        _line(twin, steps, upd["clip_frac"], "tab:brown", "clip fraction")
        handles = ax_upd.get_legend_handles_labels()
        handles2 = twin.get_legend_handles_labels()
        twin.legend(
            handles[0] + handles2[0], handles[1] + handles2[1], loc="best", fontsize="small"
        )
    else:
        _no_data(ax_upd, "update weights")
    twin.set_ylim(-0.02, 1.02)
    twin.set_ylabel("fraction of tokens clipped", color="tab:brown")
    ax_upd.set(
        title="Update weights (trained groups)", xlabel="step", ylabel="per-token weight on ∇log π"
    )
