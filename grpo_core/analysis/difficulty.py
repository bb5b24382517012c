"""Difficulty profiles: how the base model does on each training question, and the
curricula that select questions by it."""

from __future__ import annotations

import math
from collections import defaultdict

BINS = ("unsolved", "hard", "easy", "solved")

# train.curriculum -> the difficulty bins it trains on ("all" needs no profile).
CURRICULA: dict[str, tuple[str, ...]] = {
    "learnable": ("hard", "easy"),
    "easy": ("easy",),
    "hard": ("hard",),
    "unsolved": ("unsolved",),
}


def difficulty_bin(pass_rate: float) -> str:
    """unsolved (p = 0), hard (0 < p < 0.5), easy (0.5 <= p < 1), solved (p = 1)."""
    if pass_rate <= 0:
        return "unsolved"
    if pass_rate >= 1:
        return "solved"
    return "hard" if pass_rate < 0.5 else "easy"


def is_correct(reward):
    """A completion counts as solving its question when its reward is full (1); works on
    floats and on reward tensors alike."""
    return reward >= 1.0


def summarize_profile(problems: list[dict], samples: list[dict]) -> list[dict]:
    """One row per problem from `sample_problems(..., with_logprobs=True)` rows: `pass_rate`,
    `mean_logprob` (mean over samples of each one's mean token log-prob), `confidence`
    (its exp, CoDaPO's c), `mean_length` (tokens) and the difficulty `bin`."""
    by_problem: dict[int, list[dict]] = defaultdict(list)
    for row in samples:
        by_problem[row["index"]].append(row)
    out = []
    for i, p in enumerate(problems):
        rows = by_problem[i]
        if not rows:
            raise ValueError(f"problem {p['id']!r} has no samples")
        rate = sum(is_correct(r["reward"]) for r in rows) / len(rows)
        mean_logp = sum(r["mean_logprob"] for r in rows) / len(rows)
        out.append(
            {
                "id": p["id"],
                "level": p["level"],
                "samples": len(rows),
                "pass_rate": rate,
                "mean_logprob": mean_logp,
                "confidence": math.exp(mean_logp),
                "mean_length": sum(r["length"] for r in rows) / len(rows),
                "bin": difficulty_bin(rate),
            }
        )
    return out
