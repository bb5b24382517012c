"""The figures of a study report (PNG, matplotlib's Agg backend): accuracy by level,
paired differences to the baseline, training reward against rollouts, and the training
dynamics of the variants a study names."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from grpo_core.studies import stats
from grpo_core.studies.results import (
    MINUS,
    Results,
    accuracy_interval,
    difference,
    level_columns,
)
from grpo_core.studies.spec import BASE


def _figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (7.0, 4.0)):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def _bars(ax, groups: list[str], series: dict[str, list[stats.Interval]]) -> None:
    """Grouped bars (in points) with 95% interval error bars, where the interval exists."""
    from matplotlib import colormaps

    x = np.arange(len(groups))
    width = 0.8 / max(len(series), 1)
    # tab10's colours repeat after 10 series; a study may have more variants (difficulty: 13)
    palette = colormaps["tab10" if len(series) <= 10 else "tab20"]
    for i, (label, intervals) in enumerate(series.items()):
        mean = np.array([iv.mean for iv in intervals]) * 100
        lo = np.nan_to_num(mean - np.array([iv.lo for iv in intervals]) * 100)
        hi = np.nan_to_num(np.array([iv.hi for iv in intervals]) * 100 - mean)
        ax.bar(
            x + (i - (len(series) - 1) / 2) * width,
            np.nan_to_num(mean),
            width,
            yerr=[lo, hi],
            capsize=2,
            label=label,
            color=palette(i % palette.N),
        )
    ax.set_xticks(x, groups)
    if series:
        ax.legend(fontsize=7)


def accuracy_figure(results: Results, path: Path) -> None:
    columns, groups = level_columns(results)
    fig, axes = _figure()
    variants = [BASE, *results.study.variants]
    _bars(
        axes[0, 0],
        groups,
        {v: [accuracy_interval(results, v, c) for c in columns] for v in variants},
    )
    axes[0, 0].set(ylabel="accuracy (%, avg@k)", title=f"{results.name}: accuracy by level")
    fig.savefig(path, format="png", dpi=110)


def difference_figure(results: Results, path: Path) -> None:
    columns, groups = level_columns(results)
    baseline = results.study.baseline
    fig, axes = _figure()
    ax = axes[0, 0]
    _bars(
        ax,
        groups,
        {
            f"{v} {MINUS} {baseline}": [difference(results, v, baseline, c) for c in columns]
            for v in results.study.variants
            if v != baseline
        },
    )
    ax.axhline(0.0, color="0.3", linewidth=0.8)
    ax.set(ylabel="paired difference (points)", title=f"{results.name}: difference to {baseline}")
    fig.savefig(path, format="png", dpi=110)


def _seed_mean(frames: list[pd.DataFrame]) -> pd.DataFrame | None:
    """Per step, the mean over seeds of each column (missing values skipped)."""
    frames = [f for f in frames if "step" in f.columns and len(f)]
    if not frames:
        return None
    return pd.concat(frames).groupby("step").mean(numeric_only=True).reset_index()


def _read_csvs(results: Results, variant: str, name: str) -> list[pd.DataFrame]:
    return [pd.read_csv(p) for d in results.seed_dirs(variant) if (p := d / name).exists()]


def curves_figure(results: Results, path: Path) -> None:
    fig, axes = _figure()
    ax = axes[0, 0]
    for v in results.study.variants:
        frames = [
            pd.DataFrame(
                {
                    "step": f["step"],
                    "reward": f["reward"],
                    "rollouts": f["num_rollouts"].fillna(0).cumsum(),
                }
            )
            for f in _read_csvs(results, v, "train.csv")
            if {"reward", "num_rollouts"} <= set(f.columns)
        ]
        mean = _seed_mean(frames)
        if mean is not None:
            ax.plot(mean["rollouts"], mean["reward"], label=v)
    ax.set(
        xlabel="rollouts",
        ylabel="training reward (mean over seeds)",
        title=f"{results.name}: training reward",
    )
    if ax.lines:
        ax.legend(fontsize=7)
    fig.savefig(path, format="png", dpi=110)


def dynamics_figure(results: Results, path: Path) -> None:
    """One column per variant in `study.dynamics`; rows: confidence inflation, advantage
    contraction, hierarchical convergence (group accuracy per level)."""
    variants = results.study.dynamics
    fig, axes = _figure(3, len(variants), (3.6 * len(variants), 8.0))
    panels = [
        ("confidence.csv", lambda c: c in ("logp_correct", "logp_incorrect"), "mean log-prob"),
        ("advantage.csv", lambda c: c in ("adv_abs_p50", "zero_adv_frac"), "advantage"),
        ("convergence.csv", lambda c: re.fullmatch(r"level\d+", c) is not None, "group accuracy"),
    ]
    for j, v in enumerate(variants):
        for i, (name, wanted, ylabel) in enumerate(panels):
            ax = axes[i, j]
            mean = _seed_mean(_read_csvs(results, v, f"dynamics/{name}"))
            for col in [] if mean is None else [c for c in mean.columns if wanted(c)]:
                ax.plot(mean["step"], mean[col], marker=".", label=col)
            if ax.lines:
                ax.legend(fontsize=6)
            else:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
            ax.set(xlabel="step", ylabel=ylabel if j == 0 else "", title=v if i == 0 else "")
    fig.savefig(path, format="png", dpi=110)
