"""CoDaPO: confidence- and difficulty-aware question values.

Per question, from its group of G rollouts under the rollout policy:
- confidence c = exp(mean over the group of each rollout's mean token log-prob), in (0, 1];
- difficulty d = 1 - group accuracy, in [0, 1];
- value V = c * 4d(1 - d) + offset. 4d(1 - d) is 1 at d = 1/2 and 0 for questions always or
  never solved, so V favours learnable questions the model is confident on; the offset keeps
  every question's advantages from vanishing.

V multiplies the question's advantages (the loss is linear in them), on every step.

The schedule (the reference, tmlr-group/CoDaPO `codapo/ray_trainer.py`, trains each data batch
on two consecutive steps): on an even step (0, 2, ...) a fresh batch is trained, and its
questions with V at or above the batch's `quantile` of V are selected (`select_questions`); the
odd step after it trains a batch made only of the selected questions, each in blocks of `copies`
groups, cycling through them until the batch is full (`focused_batch`). Odd steps select
nothing: the step's parity alone decides (`selects_on`). The guards of `train.codapo`
(`learnable_only`, `skip_uniform`, `best_first`, `fresh_fill`) change the rule; all are off in
the reference.
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


def selects_on(step: int) -> bool:
    """Whether selection runs after `step`'s update: on even steps only (0, 2, ...), the fresh
    batches; the odd step after one trains what it selected."""
    return step % 2 == 0


def select_questions(
    values: torch.Tensor,
    difficulty: torch.Tensor,
    quantile: float,
    *,
    learnable_only: bool = False,
    skip_uniform: bool = False,
    best_first: bool = False,
) -> list[int]:
    """Positions (into the batch's groups) of the selected questions: V >= the batch's
    `quantile` of V (linear interpolation, as torch.quantile and numpy's default), in batch
    order. This is the reference's rule, with no filter on difficulty: when most of the batch
    is always solved, the quantile equals the offset and those questions are selected too; when
    all values are equal, every question is.

    Guards (off in the reference): `learnable_only` keeps only questions with 0 < d < 1 (an
    always- or never-solved group has no gradient); `skip_uniform` selects nothing when all
    values are equal (no question stands out); `best_first` orders the selection by value,
    highest first (stable), so a full odd batch holds the best rather than the first ones.
    An empty batch selects nothing.
    """
    if values.numel() == 0:
        return []
    if skip_uniform and bool((values.max() - values.min()).abs() < 1e-12):
        return []
    threshold = torch.quantile(values.float(), quantile)
    keep = values.float() >= threshold
    if learnable_only:
        keep = keep & (difficulty > 0) & (difficulty < 1)
    chosen = torch.nonzero(keep).flatten()
    if best_first:
        chosen = chosen[torch.argsort(values[chosen], descending=True, stable=True)]
    return chosen.tolist()


def focused_batch(
    ids: list[str], chosen: list[int], copies: int, capacity: int, cycle: bool = True
) -> list[int]:
    """Positions (into `ids`, the even batch's question ids) that make up the odd batch: the
    chosen questions, once each by id in the order given, each in a block of `copies` groups
    (every group a fresh set of rollouts), cycling through the list again until `capacity`
    groups, the last block cut short. Two chosen with capacity 16 and copies 4 give 8 groups
    each, and with more than capacity / copies chosen the last ones get none.

    As in the reference, which matches the selected questions by their text, a block of a
    question the even batch held twice is `copies` times both of its positions.

    `cycle=False` (the `fresh_fill` guard) stops after one pass: each chosen question `copies`
    groups, at most `capacity` in all, the rest of the batch left to fresh questions.
    """
    order: list[str] = []
    for i in chosen:
        if ids[i] not in order:
            order.append(ids[i])
    out: list[int] = []
    k = 0
    while order and len(out) < capacity and (cycle or k < len(order)):
        matching = [i for i, q in enumerate(ids) if q == order[k % len(order)]]
        for _ in range(copies):
            out.extend(matching[: capacity - len(out)])
        k += 1
    return out
