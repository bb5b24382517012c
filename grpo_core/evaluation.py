"""Evaluation metrics as papers report them: avg@k accuracy, unbiased pass@k, per level."""

from __future__ import annotations

from collections import defaultdict

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021, eq. 1):

    1 - C(n - c, k) / C(n, k), computed as a stable product.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def summarize(
    sources: list[str],
    levels: list[int],
    question_ids: list[str],
    rewards: list[float],
    pass_at: list[int],
) -> dict[str, dict[str, float]]:
    """Per benchmark (source): accuracy (mean reward over all samples = avg@k), pass@k for each
    k in `pass_at` (mean over questions), and `levelN` accuracy. Rewards are 0/1 per sample."""
    per_question: dict[tuple[str, str], list[float]] = defaultdict(list)
    level_of: dict[tuple[str, str], int] = {}
    for s, lv, q, r in zip(sources, levels, question_ids, rewards, strict=True):
        per_question[(s, q)].append(float(r))
        level_of[(s, q)] = int(lv)
    out: dict[str, dict[str, float]] = {}
    for source in sorted({s for s, _ in per_question}):
        keys = [key for key in per_question if key[0] == source]
        samples = [r for key in keys for r in per_question[key]]
        metrics = {"accuracy": float(np.mean(samples))}
        for k in pass_at:
            metrics[f"pass@{k}"] = float(
                np.mean(
                    [pass_at_k(len(per_question[q]), int(sum(per_question[q])), k) for q in keys]
                )
            )
        for level in sorted({level_of[key] for key in keys}):
            lv = [r for key in keys if level_of[key] == level for r in per_question[key]]
            metrics[f"level{level}"] = float(np.mean(lv))
        out[source] = metrics
    return out
