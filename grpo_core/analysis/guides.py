"""OC-GRPO-Fixed guidance: for each question the model never solves, the smallest hint
fraction of its reference solution with which the model solves it at least once.

As in the paper, the hint goes into the prompt (the guided prompt x~, `hinted_prompt`) and the
model writes the whole response itself; the response alone is rewarded, the hint is no part of
it."""

from __future__ import annotations

from grpo_core.analysis.difficulty import is_correct
from grpo_core.analysis.sampling import sample_problems
from grpo_core.config.guide import GuideParams
from grpo_core.config.user_reward import RewardFunction
from grpo_core.data.prompts import render_hinted
from grpo_core.rewards.code import CodeRewardConfig


def guided_problems(problems: list[dict], fraction: float, tokenizer, chat: bool) -> list[dict]:
    """`problems` (unrendered) whose `prompt` is the rendered guided prompt (`render_hinted`)."""
    return [
        {
            **p,
            "prompt": render_hinted(
                tokenizer, p["prompt"], p["solution"], fraction, chat, p.get("domain")
            ),
        }
        for p in problems
    ]


def find_guides(
    model,
    tokenizer,
    problems: list[dict],
    cfg: GuideParams,
    chat: bool,
    code: CodeRewardConfig | None = None,
    function: RewardFunction | None = None,
) -> list[dict]:
    """Cascade over `cfg.fractions`: every problem still unsolved is tried at the next
    fraction with `cfg.samples` completions sampled from its guided prompt (`guided_problems`:
    `problems` are unrendered, with `prompt` and `solution`; `chat` renders them for an
    instruct model), each rewarded on its own text. One row per problem: `fraction` (the first
    that unlocked it, or None), `pass_rate` at that fraction (0 if none), `tried` (fractions
    tried).
    """
    result = {p["id"]: {"fraction": None, "pass_rate": 0.0, "tried": []} for p in problems}
    pending = list(problems)
    for fraction in cfg.fractions:
        if not pending:
            break
        rows = sample_problems(
            model,
            tokenizer,
            guided_problems(pending, fraction, tokenizer, chat),
            cfg,
            f"guide {fraction:g}",
            code=code,
            function=function,
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
