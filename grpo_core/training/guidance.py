"""Off-Context GRPO in the loop (the math: grpo_core.algorithms.offcontext): a group whose
rollouts all fail is re-rolled from prompts that carry a prefix of the reference solution,
and the guided tokens are weighted by their importance under the policy."""

from __future__ import annotations

import torch

from grpo_core.algorithms.offcontext import guide_prefix, importance_weights
from grpo_core.config.train import TrainParams
from grpo_core.training.batch import Question, Sampled
from grpo_core.training.sampling import GroupSampler


def guide_failed(
    sampler: GroupSampler,
    questions: list[Question],
    sampled: Sampled,
    base: int = 0,
    first: int = 0,
) -> Sampled:
    """`sampled` with each failed group re-rolled with a guide prefix (train.oc_grpo).

    `base`: the rollout call's base seed; `first`: the position of questions[0] among the
    rollout call's questions (the groups' sampling streams are keyed by both)."""
    cfg, g = sampler.cfg.oc_grpo, sampler.cfg.group_size
    k = min(cfg.guided_rollouts or g, g)  # guided rollouts per re-rolled group
    solved = sampled.solved.view(-1, g).any(dim=1).tolist()
    pending = [i for i, ok in enumerate(solved) if not ok and questions[i].solution]
    if not pending:
        return sampled
    parts, chosen = [sampled], {}  # group -> (part, group within part, fraction)
    # fixed: one round at each question's own fraction (from data/guides.parquet), kept
    # whatever its rewards; then, for the groups with no measured fraction (not profiled,
    # or not unlocked by the guide stage) and in adaptive mode for all, the fractions in
    # turn until a rollout is correct.
    rounds = ([None] if cfg.mode == "fixed" else []) + list(cfg.fractions)
    for r, fraction in enumerate(rounds, start=1):
        todo = [(i, fraction or questions[i].guide_fraction) for i in pending]
        todo = [(i, f) for i, f in todo if f is not None]
        if not todo:  # fixed mode, no question with a measured fraction
            continue
        prefixes = [guide_prefix(questions[i].solution, f) for i, f in todo]
        gens = sampler.generators(base, [first + i for i, _ in todo], r)
        part = sampler.sample([questions[i] for i, _ in todo], prefixes, n=k, generators=gens)
        parts.append(part)
        part_solved = part.solved.view(-1, k).any(dim=1).tolist()
        for j, (i, f) in enumerate(todo):
            if fraction is None or part_solved[j]:
                chosen[i] = (len(parts) - 1, j, f)
        pending = [i for i in pending if i not in chosen]
        if not pending:
            break
    if len(parts) == 1:
        return sampled
    offsets = [0]
    for part in parts[:-1]:
        offsets.append(offsets[-1] + len(part.rewards))
    # A re-rolled group keeps its first g - k unguided rollouts and takes k guided ones.
    rows, fractions_out = [], []
    for i in range(len(questions)):
        part, j, f = chosen.get(i, (0, i, None))
        if part == 0:
            rows.extend(range(i * g, (i + 1) * g))
        else:
            rows.extend(range(i * g, i * g + g - k))
            rows.extend(range(offsets[part] + j * k, offsets[part] + (j + 1) * k))
        fractions_out.append(f)
    return Sampled.cat(parts, sampler.tokenizer.pad_token_id).select(rows, fractions_out)


def guided_token_weights(
    sampled: Sampled, old_logp: torch.Tensor, cfg: TrainParams
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """(B, T) OC-GRPO's importance weights on the guided rows' tokens (None when no group is
    guided or `correction` is none), and the guidance metrics."""
    ro, g, oc = sampled.ro, cfg.group_size, cfg.oc_grpo
    correct = sampled.solved
    guided = torch.tensor([f is not None for f in sampled.fractions], device=sampled.rewards.device)
    token_weights = None
    weights = importance_weights(old_logp, ro.guide_mask, oc.gamma, oc.c_min, oc.c_max)
    guided_rows = ro.guide_mask.bool().any(dim=1, keepdim=True)
    if oc.correction == "importance" and guided.any():
        token_weights = torch.where(guided_rows, weights, torch.ones_like(weights))
    prefix = ro.guide_mask.bool() & ro.completion_mask.bool()
    metrics = {
        "oc/guided_groups": float(guided.sum()),
        "oc/guided_solved": (
            float((correct.view(-1, g).any(dim=1) & guided).sum() / guided.sum())
            if guided.any()
            else 0.0
        ),
        "oc/prefix_weight_mean": float(weights[prefix].mean()) if prefix.any() else 1.0,
    }
    return token_weights, metrics
