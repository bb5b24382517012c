"""Advantage estimators, registered by name (verl's `core_algos` pattern).

Each estimator maps per-completion scalar rewards of shape (num_groups * group_size,), ordered
group by group, to per-completion advantages of the same shape. The loss broadcasts them over
each completion's tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from grpo_core.registry import Registry

ADVANTAGE_ESTIMATORS: Registry[Callable[..., torch.Tensor]] = Registry("advantage estimator")
register_advantage = ADVANTAGE_ESTIMATORS.register
get_advantage = ADVANTAGE_ESTIMATORS.get


def _groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    if rewards.ndim != 1 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards of shape {tuple(rewards.shape)} do not split into groups of {group_size}"
        )
    return rewards.view(-1, group_size)


@register_advantage("grpo")
def grpo_advantage(rewards: torch.Tensor, group_size: int, epsilon: float = 1e-4) -> torch.Tensor:
    """A_i = (r_i - mean(r_group)) / (std(r_group) + epsilon).

    DeepSeekMath (Shao et al., 2024), eq. (3) outcome supervision. The std is the unbiased
    sample std, as in TRL's GRPOTrainer and verl.
    """
    r = _groups(rewards.float(), group_size)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, keepdim=True)
    return ((r - mean) / (std + epsilon)).reshape(-1)


def group_reward_std(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Unbiased std of each group's rewards, shape (num_groups,)."""
    return _groups(rewards.float(), group_size).std(dim=1)


@register_advantage("dr_grpo")
def dr_grpo_advantage(
    rewards: torch.Tensor, group_size: int, epsilon: float = 1e-4
) -> torch.Tensor:
    """A_i = r_i - mean(r_group): Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-Like
    Training", sec. 3.1) drops the std, which up-weights questions that are nearly always or
    never solved. `epsilon` is unused; it is accepted so every estimator has one signature."""
    r = _groups(rewards.float(), group_size)
    return (r - r.mean(dim=1, keepdim=True)).reshape(-1)


@register_advantage("batch_norm")
def batch_norm_advantage(
    rewards: torch.Tensor, group_size: int, epsilon: float = 1e-4
) -> torch.Tensor:
    """A_i = (r_i - mean(r_group)) / (std(r_batch) + epsilon): centred per group, scaled by the
    whole batch's std (TRL's `scale_rewards="batch"`; REINFORCE++-baseline in verl), so one
    near-uniform group cannot blow up its advantages."""
    r = _groups(rewards.float(), group_size)
    return ((r - r.mean(dim=1, keepdim=True)) / (rewards.float().std() + epsilon)).reshape(-1)


@register_advantage("rloo")
def rloo_advantage(rewards: torch.Tensor, group_size: int, epsilon: float = 1e-4) -> torch.Tensor:
    """A_i = r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mean(r_group)): the leave-one-out
    baseline (Ahmadian et al., 2024, eq. 5), unbiased because the baseline excludes r_i."""
    r = _groups(rewards.float(), group_size)
    return (group_size / (group_size - 1) * (r - r.mean(dim=1, keepdim=True))).reshape(-1)
