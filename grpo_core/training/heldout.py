"""Held-out accuracy during training (`train.heldout`; TRL's `eval_steps`, verl's `test_freq`).

Every `train.heldout.every` steps, and after the last, the policy answers a fixed sample of the
eval split greedily, and the step's metrics gain `heldout/accuracy` and `heldout/level<k>`
(dvclive's log and metrics/train_curves.csv, drawn beside the training reward). The sample is
the same at every evaluation, so the curve moves with the policy alone; the `evaluate` stage
still gives the final numbers, on the whole split with `eval.samples` samples each.

An evaluation draws no random numbers (greedy decoding, inside a forked RNG as well): the run
trains exactly as it would without it. Under data parallelism every process answers the whole
sample with the weights gathered (ZeRO-3 needs every process in each forward), so each logs
the same numbers."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from grpo_core.analysis.sampling import sample_problems
from grpo_core.config.sampling import SamplingParams
from grpo_core.config.train import TrainStage
from grpo_core.config.user_reward import resolve
from grpo_core.data.prompts import render_prompts
from grpo_core.data.schema import read_problems

EVAL_SPLIT = "data/prepared/eval.parquet"


def heldout_sample(problems: list[dict], n: int) -> list[dict]:
    """`n` problems (all, if fewer), taking the first not yet taken of each (source, level) in
    turn, groups in sorted order: every source and level is represented while `n` allows,
    and the sample depends on the split alone."""
    groups: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for p in problems:
        groups[(p["source"], p["level"])].append(p)
    queues = [groups[k] for k in sorted(groups)]
    out: list[dict] = []
    depth = 0
    while len(out) < min(n, len(problems)):
        for q in queues:
            if depth < len(q) and len(out) < n:
                out.append(q[depth])
        depth += 1
    return out


def heldout_metrics(rows: list[dict], problems: list[dict]) -> dict[str, float]:
    """`heldout/accuracy`: the mean reward of `rows` (one per problem, `index` into
    `problems`); `heldout/level<k>`: the same over the problems of level k."""
    by_level: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        by_level[problems[r["index"]]["level"]].append(float(r["reward"]))
    out = {"heldout/accuracy": float(np.mean([float(r["reward"]) for r in rows]))}
    for level in sorted(by_level):
        out[f"heldout/level{level}"] = float(np.mean(by_level[level]))
    return out


class HeldoutEval:
    """The held-out evaluation of one training run (`train.heldout`)."""

    def __init__(
        self,
        params: TrainStage,
        tokenizer,
        chat: bool,
        path: str = EVAL_SPLIT,
        problems: list[dict] | None = None,
    ):
        """`problems`: the sample itself (rows with `domain`, `source`, `level`, `prompt`,
        `answer`), instead of `train.heldout.questions` of the split at `path`."""
        cfg = params.train
        self.every = cfg.heldout.every
        self.tokenizer = tokenizer
        self.code = params.reward.code
        self.function = resolve(params.reward.function)
        self.sampling = SamplingParams(
            samples=1,
            temperature=cfg.temperature,  # unused by greedy decoding
            max_new_tokens=cfg.max_new_tokens,
            batch_size=cfg.prompts_per_step * cfg.group_size,  # a rollout batch fits
            dtype=cfg.dtype,
            draw=cfg.draw,
            compact=cfg.compact,
        )
        self.problems: list[dict] = problems or []
        if self.every and problems is None:
            split = read_problems(path).to_pylist()
            self.problems = render_prompts(
                heldout_sample(split, cfg.heldout.questions), tokenizer, chat
            )

    def due(self, done: int, last: bool) -> bool:
        """Whether the step that made it `done` steps evaluates."""
        return bool(self.every) and (done % self.every == 0 or last)

    def __call__(self, policy: torch.nn.Module, done: int) -> dict[str, float]:
        """The held-out metrics of `policy` after `done` steps."""
        was_training = policy.training
        with torch.random.fork_rng(), torch.no_grad():
            rows = sample_problems(
                policy,
                self.tokenizer,
                self.problems,
                self.sampling,
                f"held-out after step {done}",
                code=self.code,
                greedy=True,
                function=self.function,
            )
        policy.train(was_training)
        return heldout_metrics(rows, self.problems)
