"""Runs that cannot learn say so: `RunMonitor` reads every step's metrics and warns, once per
run and condition, when the steps give the update nothing to learn from; `run_summary` is the
train stage's summary metrics (metrics/train.json), its warnings included.

The conditions, each over a streak of consecutive steps (or over every step of a run shorter
than the streak, checked when it ends):
- `clipped`: every completion reached `train.max_new_tokens` (`completions/clipped_ratio`
  1.0) on `CLIPPED_STEPS` steps in a row. Every answer was then cut off before its end, so the
  verifier sees none finished (and `train.overlong_filter` drops every one from the loss). One
  step at the start is already the budget's verdict on the base model, but a policy can
  outgrow a batch of long questions; three in a row (out of the default 40) leave no doubt
  and still warn early.
- `uniform`: every group's rewards were equal (`frac_reward_zero_std` 1.0) on `UNIFORM_STEPS`
  steps in a row. No completion then has an advantage and the update is zero (the policy
  stays byte-identical with the default optimizer). One such step happens by chance with few
  questions per step or an easy batch; five in a row is a run that does not move.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from grpo_core.config.train import TrainParams

log = logging.getLogger(__name__)

CLIPPED_STEPS = 3
UNIFORM_STEPS = 5
# The summary's recent means are over this many last steps (all of them when fewer).
SUMMARY_STEPS = 5


def _span(first: int, last: int) -> str:
    """'step 3' or 'steps 0-4'."""
    return f"step {first}" if first == last else f"steps {first}-{last}"


def _mean(steps: list[dict[str, float]], key: str) -> float:
    return statistics.fmean(m[key] for m in steps)


def clipped_message(first: int, steps: list[dict[str, float]], cfg: TrainParams) -> str:
    """The warning of `steps` (from step `first` on) whose every completion was clipped."""
    n = int(sum(m["num_rollouts"] for m in steps))
    why = "every answer was cut off before its end"
    if cfg.overlong_filter:
        why += " and train.overlong_filter leaves all of them out of the loss"
    return (
        f"{_span(first, first + len(steps) - 1)}: all {n} completions reached "
        f"train.max_new_tokens={cfg.max_new_tokens} (clipped ratio 1.0, mean reward "
        f"{_mean(steps, 'reward'):.3f}): {why}: raise train.max_new_tokens"
    )


def uniform_message(first: int, steps: list[dict[str, float]], cfg: TrainParams) -> str:
    """The warning of `steps` (from step `first` on) whose every group had equal rewards; the
    advice follows the verifier's mean (`rewards/correct/mean`): all wrong, all right, or
    groups uniform but unlike each other."""
    g = cfg.group_size
    groups = int(sum(m["num_rollouts"] for m in steps)) // g
    key = "rewards/correct/mean" if all("rewards/correct/mean" in m for m in steps) else None
    solved = _mean(steps, key) if key else None
    if solved == 0.0:
        advice = (
            "the policy solves none of its questions: train easier ones (train.curriculum: "
            "learnable or easy) or give it room (train.max_new_tokens)"
        )
    elif solved == 1.0:
        advice = "the policy solves all of its questions: train harder ones (train.curriculum)"
    else:
        advice = "sample more varied groups (train.group_size, train.temperature)"
    return (
        f"{_span(first, first + len(steps) - 1)}: all {groups} groups ({g} completions each) "
        f"had equal rewards (frac_reward_zero_std 1.0, mean reward "
        f"{_mean(steps, 'reward'):.3f}): no completion has an advantage, so nothing is "
        f"learned: {advice}"
    )


@dataclass(frozen=True)
class Condition:
    """A warning: `holds` on a step's metrics for `streak` steps in a row."""

    name: str
    streak: int
    holds: Callable[[dict[str, float]], bool]
    message: Callable[[int, list[dict[str, float]], TrainParams], str]


CONDITIONS = (
    Condition(
        "clipped", CLIPPED_STEPS, lambda m: m["completions/clipped_ratio"] >= 1.0, clipped_message
    ),
    Condition(
        "uniform", UNIFORM_STEPS, lambda m: m["frac_reward_zero_std"] >= 1.0, uniform_message
    ),
)


class RunMonitor:
    """Fed every step's metrics (`observe`, in step order from step 0; a resumed run replays
    its history first) and the end of the run (`finish`); warns once per condition, with
    `logging.warning` where `emit` (the main process), and keeps the warning lines."""

    def __init__(self, cfg: TrainParams, emit: bool = True):
        self.cfg = cfg
        self.emit = emit
        self.steps: list[dict[str, float]] = []
        self.warnings: list[str] = []
        self._start: dict[str, int | None] = {c.name: None for c in CONDITIONS}
        self._warned: set[str] = set()

    def observe(self, metrics: dict[str, float]) -> None:
        """One more step's metrics."""
        step = len(self.steps)
        self.steps.append(metrics)
        for c in CONDITIONS:
            if not c.holds(metrics):
                self._start[c.name] = None
                continue
            if self._start[c.name] is None:
                self._start[c.name] = step
            if step - self._start[c.name] + 1 >= c.streak:
                self._warn(c)

    def finish(self) -> None:
        """The run ended: a condition that held on every one of its steps warns even when it
        had fewer steps than the streak."""
        for c in CONDITIONS:
            if self._start[c.name] == 0:
                self._warn(c)

    def _warn(self, c: Condition) -> None:
        if c.name in self._warned:
            return
        self._warned.add(c.name)
        first = self._start[c.name]
        line = c.message(first, self.steps[first:], self.cfg)
        self.warnings.append(line)
        if self.emit:
            log.warning(line)


def run_summary(
    history: list[dict[str, float]], warnings: list[str], wall_seconds: float, resumed_from: int
) -> dict:
    """metrics/train.json: `steps` run (a resumed run's earlier ones included), `rollouts`
    sampled, `wall_seconds` of this process's training (since it resumed, if it did),
    `resumed_from` (the step it resumed at; 0: a fresh run), the means over the last
    `SUMMARY_STEPS` steps of the reward, the clipped ratio, the share of uniform groups and of
    sequences trained, and the `warnings` (an empty list when none) with their number
    (`num_warnings`: `dvc metrics show` and `diff` leave lists out, not numbers)."""
    recent = history[-SUMMARY_STEPS:]
    names = {
        "reward": "reward",
        "clipped_ratio": "completions/clipped_ratio",
        "frac_reward_zero_std": "frac_reward_zero_std",
        "frac_sequences_trained": "frac_sequences_trained",
    }
    return {
        "steps": len(history),
        "rollouts": int(sum(m["num_rollouts"] for m in history)),
        "wall_seconds": round(wall_seconds, 1),
        "resumed_from": resumed_from,
        f"last_{SUMMARY_STEPS}_steps": {k: _mean(recent, v) for k, v in names.items()}
        if recent
        else {},
        "num_warnings": len(warnings),
        "warnings": list(warnings),
    }


# The training curves the DVC plots draw (dvc.yaml), one column each: the step metric's name
# (TRL's, as dvclive logs it under metrics/train/) -> the column.
CURVES = {
    "reward": "reward",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "entropy": "entropy",
    "completions/min_length": "min_length",
    "completions/mean_length": "mean_length",
    "completions/max_length": "max_length",
    "completions/clipped_ratio": "clipped_ratio",
    "clip_ratio/low_mean": "clip_low",
    "clip_ratio/high_mean": "clip_high",
    "clip_ratio/region_mean": "clip_region",
    "grad_norm": "grad_norm",
    "num_rollouts": "num_rollouts",
    "heldout/accuracy": "heldout_accuracy",  # train.heldout: empty between evaluations
}


def curves_csv(history: list[dict[str, float]]) -> str:
    """metrics/train_curves.csv: one row per step (`step`, then the `CURVES` columns; a metric
    a step did not log is empty). One small git-tracked file the plots read, so that the full
    dvclive log (metrics/train/) can be a cached output, which keeps the stage in DVC's run
    cache (DVC saves no run-cache entry for a stage with an uncached output that is neither a
    metric nor a plot)."""
    lines = [",".join(["step", *CURVES.values()])]
    for step, metrics in enumerate(history):
        cells = [str(step)] + [
            "" if metrics.get(k) is None else repr(float(metrics[k])) for k in CURVES
        ]
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"
