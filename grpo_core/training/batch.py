"""What a step samples from and what it holds: the training questions, one step's rollouts
with their rewards (`Sampled`), and the seeded order the questions are drawn in."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from grpo_core.analysis.difficulty import is_correct
from grpo_core.rollout.rollouts import Rollouts, concat_rollouts


@dataclass(frozen=True)
class Question:
    id: str
    domain: str
    level: int
    prompt: str
    answer: str
    solution: str = ""  # reference solution: OC-GRPO's guide prefixes come from it
    guide_fraction: float | None = None  # OC-GRPO fixed mode: from data/guides.parquet


@dataclass
class Sampled:
    """One step's rollouts: G rows per question, group by group."""

    ro: Rollouts
    rewards: torch.Tensor  # (B,) the training reward: weighted sum of the components
    components: dict[str, torch.Tensor]  # (B,) each: correct (the verifier's), format, overlong
    fractions: list[float | None]  # per group: the guide fraction, None if unguided
    num_rollouts: int  # completions generated, guided re-rolls included

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
        )

    @staticmethod
    def cat(parts: list[Sampled], pad_id: int) -> Sampled:
        return Sampled(
            concat_rollouts([p.ro for p in parts], pad_id),
            torch.cat([p.rewards for p in parts]),
            {k: torch.cat([p.components[k] for p in parts]) for k in parts[0].components},
            [f for p in parts for f in p.fractions],
            sum(p.num_rollouts for p in parts),
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
