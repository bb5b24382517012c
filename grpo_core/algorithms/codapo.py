"""CoDaPO: confidence- and difficulty-aware question values.

Per question, from its group of G rollouts under the rollout policy:
- confidence c = exp(mean over the group of each rollout's mean token log-prob), in (0, 1];
- difficulty d = 1 - group accuracy, in [0, 1];
- value V = c * 4d(1 - d) + offset. 4d(1 - d) is 1 at d = 1/2 and 0 for questions always or
  never solved, so V favours learnable questions the model is confident on; the offset keeps
  every question's advantages from vanishing.

V multiplies the question's advantages (the loss is linear in them), and after each update the
questions with V at or above a batch quantile are repeated in the next mini-batch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from grpo_core.algorithms.losses import masked_mean
from grpo_core.registry import Registry


def question_confidence(logp: torch.Tensor, mask: torch.Tensor, group_size: int) -> torch.Tensor:
    """c = exp(mean_i mean_t log pi(y_i,t)) per group: (B, T) token log-probs -> (B / G,)."""
    per_rollout = masked_mean(logp, mask, dim=1)
    return per_rollout.view(-1, group_size).mean(dim=1).exp()


def question_difficulty(correct: torch.Tensor, group_size: int) -> torch.Tensor:
    """d = 1 - group accuracy: (B,) 0/1 correctness -> (B / G,)."""
    return 1.0 - correct.float().view(-1, group_size).mean(dim=1)


VALUE_FUNCTIONS: Registry[Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]] = Registry(
    "CoDaPO value function"
)


@VALUE_FUNCTIONS.register("confidence_difficulty")
def confidence_difficulty_value(c: torch.Tensor, d: torch.Tensor, offset: float) -> torch.Tensor:
    """V = c * 4d(1 - d) + offset (CoDaPO)."""
    return c * 4 * d * (1 - d) + offset


@VALUE_FUNCTIONS.register("difficulty")
def difficulty_value(c: torch.Tensor, d: torch.Tensor, offset: float) -> torch.Tensor:
    """V = 4d(1 - d) + offset: the ablation without confidence."""
    return 4 * d * (1 - d) + offset


@VALUE_FUNCTIONS.register("confidence")
def confidence_value(c: torch.Tensor, d: torch.Tensor, offset: float) -> torch.Tensor:
    """V = c + offset: the ablation without difficulty."""
    return c + offset


def select_for_resampling(
    values: torch.Tensor, difficulty: torch.Tensor, quantile: float
) -> list[int]:
    """Indices of the questions to repeat: V >= the batch's `quantile` of V, and learnable
    (0 < d < 1), highest value first.

    Guards the cases a plain quantile rule gets wrong: when all values are equal the quantile
    selects every question although none stands out, so nothing is selected; questions
    that are always or never solved carry no gradient however high their value, so they are
    never selected; an empty batch selects nothing.
    """
    if values.numel() == 0 or bool((values.max() - values.min()).abs() < 1e-12):
        return []
    threshold = torch.quantile(values.float(), quantile)
    learnable = (difficulty > 0) & (difficulty < 1)
    chosen = torch.nonzero((values >= threshold) & learnable).flatten()
    order = torch.argsort(values[chosen], descending=True, stable=True)
    return chosen[order].tolist()


def resampled_batch(ids: list[str], chosen: list[int], copies: int, capacity: int) -> list[int]:
    """Positions (into `ids`) that make up the next mini-batch's resampled part: each chosen
    question `copies` times, distinct questions only (a question already drawn twice in this
    batch is repeated once), at most `capacity` groups; highest value first."""
    seen: set[str] = set()
    out: list[int] = []
    for i in chosen:
        if ids[i] in seen:
            continue
        seen.add(ids[i])
        take = min(copies, capacity - len(out))
        if take <= 0:
            break
        out.extend([i] * take)
    return out
