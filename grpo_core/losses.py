"""Policy losses over padded (batch, tokens) tensors with a 0/1 response mask.

In the spirit of tiny-grpo's `loss.py` and verl's `core_algos.py`: pure functions, one shared
aggregation (`agg_loss`), losses registered by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from grpo_core.registry import Registry


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1)
    return (values * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def agg_loss(
    loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    num_tokens: float | None = None,
) -> torch.Tensor:
    """Reduce per-token losses to a scalar.

    token-mean: sum over all unmasked tokens / their count (DAPO, TRL's "dapo"/"bnpo").
    `num_tokens` overrides the count so that gradient accumulation over micro-batches divides
    by the whole batch's tokens rather than each micro-batch's.
    """
    if mode != "token-mean":
        raise ValueError(f"unknown loss aggregation {mode!r}; known: ['token-mean']")
    mask = mask.to(loss.dtype)
    denom = mask.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=loss.dtype)
    return (loss * mask).sum() / denom.clamp(min=1)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi || pi_ref) per token: exp(d) - d - 1 with d = ref_logp - logp.

    Schulman (2020), "Approximating KL divergence"; the GRPO paper's eq. (4). Unbiased, >= 0.
    """
    d = ref_logp - logp
    return torch.exp(d) - d - 1


@dataclass
class PolicyLossOutput:
    per_token: torch.Tensor  # (B, T) loss before aggregation
    ratio: torch.Tensor  # (B, T) pi / pi_old
    clipped_low: torch.Tensor  # (B, T) bool: ratio clipped below with a negative advantage
    clipped_high: torch.Tensor  # (B, T) bool: ratio clipped above with a positive advantage


POLICY_LOSSES: Registry[Callable[..., PolicyLossOutput]] = Registry("policy loss")
register_policy_loss = POLICY_LOSSES.register


@register_policy_loss("clipped")
def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> PolicyLossOutput:
    """PPO clipped surrogate per token, to be minimised (GRPO paper eq. (3)):

        -min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A),  rho = exp(logp - old_logp)

    `advantages` is (B,) per sequence or (B, T) per token. `clip_high > clip_low` is DAPO's
    clip-higher.
    """
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(1)
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    per_token = -torch.min(ratio * advantages, clipped * advantages)
    return PolicyLossOutput(
        per_token=per_token,
        ratio=ratio,
        clipped_low=(ratio < 1 - clip_low) & (advantages < 0),
        clipped_high=(ratio > 1 + clip_high) & (advantages > 0),
    )
