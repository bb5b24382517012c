"""What a step samples from and what it holds: the training questions, one step's rollouts
with their rewards (`Sampled`), and the seeded order the questions are drawn in."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from grpo_core.analysis.difficulty import is_correct
from grpo_core.rollout.rollouts import Rollouts, concat_rollouts


@dataclass(frozen=True)
class Question:
    id: str
    domain: str
    level: int
    prompt: str
    answer: str
    solution: str = ""  # reference solution: OC-GRPO's hints come from it
    guide_fraction: float | None = None  # OC-GRPO: the fraction data/guides.parquet found
    # OC-GRPO fixed mode: this question is the guided row of `guide_fraction`'s question, sampled
    # with the hint in its prompt (its id is the original's with GUIDED_SUFFIX).
    guided: bool = False
    raw_prompt: str = ""  # the prompt before any chat template ("": `prompt` is it)
    chat: bool = False  # `prompt` went through the chat template

    @property
    def text(self) -> str:
        """The prompt's plain text, before any chat template."""
        return self.raw_prompt or self.prompt


# The id of a fixed-mode guided row: the original question's id with this suffix.
GUIDED_SUFFIX = "+hint"


@dataclass
class Sampled:
    """One step's rollouts: G rows per question, group by group."""

    ro: Rollouts
    rewards: torch.Tensor  # (B,) the training reward: weighted sum of the components
    components: dict[str, torch.Tensor]  # (B,) each: correct (the verifier's), format, overlong
    fractions: list[float | None]  # per group: the hint's fraction, None if unguided
    num_rollouts: int  # completions generated, guided ones included
    # OC-GRPO: (B,) rows sampled from a guided prompt x~ and laid out under the unguided x
    # (`importance` / `none`), and (B, T) their tokens' log-probs under x~ at sampling (pi_old;
    # 0 elsewhere). None: no such row.
    hinted: torch.Tensor | None = None
    hinted_logp: torch.Tensor | None = None

    @property
    def guided_rows(self) -> torch.Tensor:
        """(B,) bool: rows sampled from a guided prompt and trained under the unguided one."""
        if self.hinted is None:
            return torch.zeros(len(self.rewards), dtype=torch.bool, device=self.rewards.device)
        return self.hinted

    @property
    def solved(self) -> torch.Tensor:
        """(B,) bool: the completion solves its question (full verifier reward)."""
        return is_correct(self.components["correct"])

    def select(self, rows: list[int] | torch.Tensor, fractions: list[float | None]) -> Sampled:
        """The given rollout rows, regrouped: `fractions` holds the new groups' guide
        fractions."""
        rows = torch.as_tensor(rows, dtype=torch.long, device=self.rewards.device)
        return Sampled(
            self.ro.select(rows),
            self.rewards[rows],
            {k: v[rows] for k, v in self.components.items()},
            fractions,
            self.num_rollouts,
            None if self.hinted is None else self.hinted[rows],
            None if self.hinted_logp is None else self.hinted_logp[rows],
        )

    def to(self, device) -> Sampled:
        """The same rollouts with every tensor on `device`."""
        ro = self.ro
        moved = {
            f.name: getattr(ro, f.name).to(device)
            for f in dataclasses.fields(ro)
            if isinstance(getattr(ro, f.name), torch.Tensor)
        }
        return Sampled(
            dataclasses.replace(ro, **moved),
            self.rewards.to(device),
            {k: v.to(device) for k, v in self.components.items()},
            self.fractions,
            self.num_rollouts,
            None if self.hinted is None else self.hinted.to(device),
            None if self.hinted_logp is None else self.hinted_logp.to(device),
        )

    @staticmethod
    def cat(parts: list[Sampled], pad_id: int) -> Sampled:
        ro = concat_rollouts([p.ro for p in parts], pad_id)
        hinted = hinted_logp = None
        if any(p.hinted is not None for p in parts):
            width = ro.completion_mask.shape[1]
            hinted = torch.cat([p.guided_rows for p in parts])
            hinted_logp = torch.cat(
                [
                    F.pad(p.hinted_logp, (0, width - p.hinted_logp.shape[1]))
                    if p.hinted_logp is not None
                    else torch.zeros(len(p.rewards), width, device=p.rewards.device)
                    for p in parts
                ]
            )
        return Sampled(
            ro,
            torch.cat([p.rewards for p in parts]),
            {k: torch.cat([p.components[k] for p in parts]) for k in parts[0].components},
            [f for p in parts for f in p.fractions],
            sum(p.num_rollouts for p in parts),
            hinted,
            hinted_logp,
        )


class QuestionSampler:
    """Epochs over the question pool in a seeded random order, `n` questions at a time."""

    def __init__(self, num_questions: int, seed: int):
        if num_questions == 0:
            raise ValueError("no training questions: check train.levels against data.levels")
        self.num_questions = num_questions
        self.rng = np.random.default_rng(seed)
        self.order: list[int] = []

    def next(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n:
            if not self.order:
                self.order = self.rng.permutation(self.num_questions).tolist()
            out.append(self.order.pop())
        return out

    def state_dict(self) -> dict:
        """Where the sampler is: its generator's state and what is left of the epoch."""
        return {
            "num_questions": self.num_questions,
            "rng": self.rng.bit_generator.state,
            "order": list(self.order),
        }

    def load_state_dict(self, state: dict) -> None:
        if state["num_questions"] != self.num_questions:
            raise ValueError(
                f"sampler state is for {state['num_questions']} questions, not {self.num_questions}"
            )
        self.rng.bit_generator.state = state["rng"]
        self.order = list(state["order"])
