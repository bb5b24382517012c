"""OC-GRPO-Fixed guidance: for each question the model never solves, the smallest prefix
fraction of its reference solution with which the model solves it at least once."""

from __future__ import annotations

from grpo_core.algorithms.offcontext import guide_prefix
from grpo_core.analysis.difficulty import is_correct
from grpo_core.analysis.sampling import sample_problems
from grpo_core.config.guide import GuideParams
from grpo_core.rewards.code import CodeRewardConfig


def find_guides(
    model,
    tokenizer,
    problems: list[dict],
    cfg: GuideParams,
    code: CodeRewardConfig | None = None,
) -> list[dict]:
    """Cascade over `cfg.fractions`: every problem still unsolved is tried at the next
    fraction with `cfg.samples` completions. One row per problem: `fraction` (the first that
    unlocked it, or None), `pass_rate` at that fraction (0 if none), `tried` (fractions tried).
    """
    result = {p["id"]: {"fraction": None, "pass_rate": 0.0, "tried": []} for p in problems}
    pending = list(problems)
    for fraction in cfg.fractions:
        if not pending:
            break
        prefixes = [guide_prefix(p["solution"], fraction) for p in pending]
        rows = sample_problems(
            model, tokenizer, pending, cfg, f"guide {fraction:g}", prefixes=prefixes, code=code
        )
        correct = [0] * len(pending)
        for r in rows:
            correct[r["index"]] += is_correct(r["reward"])
        still = []
        for p, c in zip(pending, correct, strict=True):
            entry = result[p["id"]]
            entry["tried"].append(fraction)
            if c > 0:
                entry["fraction"], entry["pass_rate"] = fraction, c / cfg.samples
            else:
                still.append(p)
        pending = still
    return [{"id": p["id"], "level": p["level"], **result[p["id"]]} for p in problems]
