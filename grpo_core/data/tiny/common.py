"""What the tiny-world generators share: drawing disjoint train/eval problem indices from a
level's problem space, and the unified-schema row."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np


def unique_indices(rng: np.random.Generator, space: int, n: int, exclude: set[int]) -> list[int]:
    """`n` distinct indices in [0, space) outside `exclude`, in draw order."""
    out: dict[int, None] = {}
    while len(out) < n:
        for x in rng.integers(0, space, size=2 * (n - len(out))).tolist():
            if x not in exclude and x not in out:
                out[x] = None
                if len(out) == n:
                    break
    return list(out)


def split_indices(
    rng: np.random.Generator, space: int, n_train: int, n_eval: int
) -> tuple[list[int], list[int]]:
    """(train, eval) problem indices in [0, space).

    The splits are disjoint when the space is at least twice the eval size (eval drawn first,
    without replacement, so it does not depend on `n_train`; train from the rest, with
    replacement only when the rest is smaller than `n_train`). A smaller space cannot hold a
    meaningful held-out set, so there both splits draw from the whole space and overlap.
    """
    if space >= 2 * n_eval:
        eval_idx = unique_indices(rng, space, n_eval, set())
        rest = space - n_eval
        if rest >= 2 * n_train:
            train_idx = unique_indices(rng, space, n_train, set(eval_idx))
        else:
            banned = set(eval_idx)
            pool = np.array([x for x in range(space) if x not in banned])
            train_idx = rng.choice(pool, size=n_train, replace=rest < n_train).tolist()
    else:
        eval_idx = rng.integers(0, space, size=n_eval).tolist()
        train_idx = rng.integers(0, space, size=n_train).tolist()
    return train_idx, eval_idx


def problem_row(
    *,
    domain: str,
    source: str,
    split: str,
    level: int,
    k: int,
    prompt: str,
    answer: str,
    solution: str,
    meta: dict,
) -> dict:
    """One row of the unified schema (`grpo_core.data.schema.PROBLEM_SCHEMA`)."""
    return {
        "id": f"{source}-{split}-L{level}-{k:05d}",
        "domain": domain,
        "source": source,
        "level": level,
        "prompt": prompt,
        "answer": answer,
        "solution": solution,
        "meta": json.dumps(meta),
    }


def generate_rows(
    *,
    domain: str,
    source: str,
    salt: int,
    space: int,
    make_problem: Callable[[int, np.random.Generator], dict],
    level: int,
    n_train: int,
    n_eval: int,
    seed: int,
) -> dict[str, list[dict]]:
    """Train and eval rows of one level of a generator whose problems are indexed 0..space-1
    and decorated with random details (`make_problem(index, rng)` -> prompt, answer, solution,
    meta); deterministic in (level, seed), split as in `split_indices`."""
    rng = np.random.default_rng([seed, level, salt])
    train_idx, eval_idx = split_indices(rng, space, n_train, n_eval)
    out = {}
    for split, stream, indices in (("train", 0, train_idx), ("eval", 1, eval_idx)):
        # One decoration stream per split, so eval rows do not depend on n_train.
        deco = np.random.default_rng([seed, level, salt, stream])
        out[split] = [
            problem_row(
                domain=domain,
                source=source,
                split=split,
                level=level,
                k=k,
                **make_problem(index, deco),
            )
            for k, index in enumerate(indices)
        ]
    return out
