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


AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def agg_loss(
    loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    max_tokens: int | None = None,
) -> torch.Tensor:
    """Reduce per-token losses (B, T) to a scalar.

    - token-mean: sum over unmasked tokens / their count. Every token weighs the same, so long
      completions weigh more (DAPO, eq. 8; TRL's "dapo"/"bnpo").
    - seq-mean-token-mean: mean over sequences of each sequence's token mean (the GRPO paper's
      eq. 3; TRL's "grpo"); a token of a short completion weighs more.
    - seq-mean-token-sum-norm: each sequence's token sum divided by the constant `max_tokens`,
      then the mean over sequences (Dr. GRPO, Liu et al. 2025, sec. 3.1; TRL's "dr_grpo"):
      no length bias, and no dependence on the other sequences' lengths.

    `num_tokens` / `num_seqs` override the batch's own counts, so that accumulation over
    micro-batches divides by the whole batch's counts rather than each micro-batch's.
    """
    mask = mask.to(loss.dtype)
    if mode == "token-mean":
        denom = mask.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=loss.dtype)
        return (loss * mask).sum() / denom.clamp(min=1)
    seqs = float(loss.shape[0] if num_seqs is None else num_seqs)
    if mode == "seq-mean-token-mean":
        per_seq = (loss * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        return per_seq.sum() / max(seqs, 1.0)
    if mode == "seq-mean-token-sum-norm":
        if not max_tokens:
            raise ValueError("seq-mean-token-sum-norm needs max_tokens (the generation budget)")
        return (loss * mask).sum() / (max(seqs, 1.0) * max_tokens)
    raise ValueError(f"unknown loss aggregation {mode!r}; known: {list(AGGREGATIONS)}")


KL_ESTIMATORS: Registry[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = Registry(
    "KL estimator"
)


@KL_ESTIMATORS.register("k1")
def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = log pi - log pi_ref: unbiased for KL(pi || pi_ref), high variance, can be < 0."""
    return logp - ref_logp


@KL_ESTIMATORS.register("k2")
def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 = (log pi - log pi_ref)^2 / 2: biased, low variance, >= 0."""
    return 0.5 * (logp - ref_logp) ** 2


@KL_ESTIMATORS.register("k3")
def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = exp(d) - d - 1 with d = log pi_ref - log pi: unbiased, low variance, >= 0
    (Schulman, 2020, "Approximating KL divergence"; the GRPO paper's eq. 4).

    All three estimate KL(pi || pi_ref) per token from samples of pi.
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
    dual_clip: float | None = None,
) -> PolicyLossOutput:
    """PPO clipped surrogate per token, to be minimised (GRPO paper eq. (3)):

        -min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A),  rho = exp(logp - old_logp)

    `advantages` is (B,) per sequence or (B, T) per token. `clip_high > clip_low` is DAPO's
    clip-higher. `dual_clip = c > 1` also bounds the loss of negative-advantage tokens by
    -c * A, so a token whose ratio has exploded cannot dominate (Ye et al., 2020, eq. 5).
    """
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(1)
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    per_token = -torch.min(ratio * advantages, clipped * advantages)
    if dual_clip is not None:
        bounded = torch.minimum(per_token, -dual_clip * advantages)
        per_token = torch.where(advantages < 0, bounded, per_token)
    return PolicyLossOutput(
        per_token=per_token,
        ratio=ratio,
        clipped_low=(ratio < 1 - clip_low) & (advantages < 0),
        clipped_high=(ratio > 1 + clip_high) & (advantages > 0),
    )
