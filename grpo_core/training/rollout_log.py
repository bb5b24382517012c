"""What a step reports about its rollouts: the rollout metrics (TRL's names, logged per step
to metrics/train) and one row per question (data/rollouts.parquet, `ROLLOUT_LOG`)."""

from __future__ import annotations

import pyarrow as pa
import torch

from grpo_core.algorithms.advantages import group_reward_std
from grpo_core.algorithms.losses import masked_mean
from grpo_core.training.batch import Question, Sampled

# data/rollouts.parquet: one row per question per step (`log_rows`, with the step).
ROLLOUT_LOG = pa.schema(
    [
        ("step", pa.int32()),
        ("id", pa.string()),
        ("level", pa.int32()),
        ("reward_mean", pa.float64()),
        ("reward_std", pa.float64()),
        ("mean_length", pa.float64()),
        ("confidence", pa.float64()),  # exp(mean token log-prob of the group), pi_old
        ("difficulty", pa.float64()),  # 1 - group accuracy
        ("value", pa.float64()),  # CoDaPO value; null for other algorithms
        ("adv_abs_mean", pa.float64()),  # mean |advantage| over the group (after weighting)
        ("logp_correct", pa.float64()),  # mean token log-prob of correct rollouts; null if none
        ("logp_incorrect", pa.float64()),
        ("guided", pa.bool_()),  # OC-GRPO: the group was sampled with a hint in its prompt
        ("guide_fraction", pa.float64()),
        ("resampled", pa.bool_()),  # CoDaPO: the question was repeated from the last step
        ("trained", pa.bool_()),  # the group entered the loss
        # Per completion token of the group, over the step's optimizer updates: the coefficient
        # the loss put on grad log pi (advantage x ratio x clip mask x CoDaPO / OC-GRPO weight),
        # its absolute value, and the fraction of tokens clipped; null if not trained.
        ("update_weight_abs", pa.float64()),
        ("update_weight_mean", pa.float64()),
        ("clip_frac", pa.float64()),
    ]
)


def rollout_metrics(sampled: Sampled, rounds: int, group_size: int) -> dict[str, float]:
    """Rewards (each component's too), lengths and sampling effort of everything sampled."""
    ro, rewards = sampled.ro, sampled.rewards
    std = group_reward_std(rewards, group_size)
    lengths = ro.lengths.float()
    metrics = {
        "reward": rewards.mean().item(),
        "reward_std": std.mean().item(),
        "frac_reward_zero_std": (std == 0).float().mean().item(),
        "completions/mean_length": lengths.mean().item(),
        "completions/min_length": lengths.min().item(),
        "completions/max_length": lengths.max().item(),
        "completions/clipped_ratio": ro.truncated.float().mean().item(),
    }
    for name, values in sampled.components.items():
        metrics[f"rewards/{name}/mean"] = values.mean().item()
        metrics[f"rewards/{name}/std"] = values.std().item() if len(values) > 1 else 0.0
    metrics["sampling_rounds"] = float(rounds)
    metrics["num_rollouts"] = float(sampled.num_rollouts)
    return metrics


def on_every_row(
    row_stats: dict[str, torch.Tensor], rows: torch.Tensor | None, n: int
) -> dict[str, torch.Tensor]:
    """Stats of the trained `rows` (None: of every row) back onto every one of the `n` sampled
    rows; the untrained ones stay 0."""
    if rows is None:
        return row_stats
    out = {}
    for k, v in row_stats.items():
        out[k] = torch.zeros(n, device=v.device)
        out[k][rows] = v
    return out


def log_rows(
    questions: list[Question],
    sampled: Sampled,
    group_size: int,
    *,
    old_logp: torch.Tensor,
    confidence: torch.Tensor,
    difficulty: torch.Tensor,
    values: torch.Tensor | None,
    advantages: torch.Tensor,
    trained: torch.Tensor,
    row_stats: dict[str, torch.Tensor],
    num_resampled: int,
) -> list[dict]:
    """One `ROLLOUT_LOG` row (without the step) per question; the first `num_resampled` were
    resampled by CoDaPO."""
    g, ro = group_size, sampled.ro
    grouped = sampled.rewards.view(-1, g)
    mean, std = grouped.mean(dim=1).tolist(), grouped.std(dim=1).tolist()
    length = ro.lengths.float().view(-1, g).mean(dim=1).tolist()
    seq_logp = masked_mean(old_logp, ro.completion_mask, dim=1).view(-1, g)
    correct = sampled.solved.view(-1, g)
    n_correct = correct.sum(dim=1)
    logp_correct = ((seq_logp * correct).sum(dim=1) / n_correct.clamp(min=1)).tolist()
    logp_wrong = ((seq_logp * ~correct).sum(dim=1) / (g - n_correct).clamp(min=1)).tolist()
    adv_abs = advantages.abs().view(-1, g).mean(dim=1).tolist()
    conf, diff = confidence.tolist(), difficulty.tolist()
    vals = values.tolist() if values is not None else [None] * len(questions)
    n_correct, trained = n_correct.tolist(), trained.tolist()
    group = {k: v.view(-1, g).sum(dim=1) for k, v in row_stats.items()}
    tokens = group["tokens"].tolist()
    per_token = {
        k: (group[k] / group["tokens"].clamp(min=1)).tolist()
        for k in ("weight_abs", "weight", "clipped")
    }
    return [
        {
            "id": q.id,
            "level": q.level,
            "reward_mean": mean[i],
            "reward_std": std[i],
            "mean_length": length[i],
            "confidence": conf[i],
            "difficulty": diff[i],
            "value": vals[i],
            "adv_abs_mean": adv_abs[i],
            "logp_correct": logp_correct[i] if n_correct[i] else None,
            "logp_incorrect": logp_wrong[i] if n_correct[i] < g else None,
            "guided": sampled.fractions[i] is not None,
            "guide_fraction": sampled.fractions[i],
            "resampled": i < num_resampled,
            "trained": trained[i],
            "update_weight_abs": per_token["weight_abs"][i] if tokens[i] else None,
            "update_weight_mean": per_token["weight"][i] if tokens[i] else None,
            "clip_frac": per_token["clipped"][i] if tokens[i] else None,
        }
        for i, q in enumerate(questions)
    ]
