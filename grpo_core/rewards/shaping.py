"""Reward shaping (training only): terms added to the verifier's reward, each with its weight
from `reward.weights` (`reward.weights.<name>`); every component is kept so that it can be
logged on its own (`rewards/<name>/mean`).

The terms are registered by name in `SHAPING_TERMS` (`@shaping_term`): a format reward (the
answer is in the form the domain expects) and DAPO's soft overlong punishment. A new term is a
function of the step's `Completions` registered here, and a weight field of the same name in
`RewardWeights` (grpo_core/config/reward.py): docs/architecture.md#add-a-shaping-term.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

import torch

from grpo_core.errors import InputError
from grpo_core.rewards.code import defines, extract_program, parse_code_answer
from grpo_core.rewards.math import boxed_answer
from grpo_core.rewards.mcq import mcq_answer


def format_reward(domain: str, completion: str, answer: str) -> float:
    """1.0 if the completion gives its answer in the form the domain expects: a closed
    `\\boxed{}`, every box agreeing (math), one `Answer: X` letter (mcq), a program that
    parses and defines the entry point (code). Says nothing about correctness."""
    if domain == "math":
        return float(boxed_answer(completion) is not None)
    if domain == "mcq":
        return float(mcq_answer(completion) is not None)
    if domain == "code":
        entry = parse_code_answer(answer).entry_point
        program = extract_program(completion, entry)
        try:
            ast.parse(program)
        except (SyntaxError, ValueError):
            return 0.0
        return float(entry is None or defines(program, entry))
    return 0.0


def overlong_penalty(lengths: torch.Tensor, max_tokens: int, cache: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al., 2025, eq. 13), per completion:

        0                           if |y| <= L_max - L_cache
        ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
        -1                          if |y| > L_max

    with L_max = `max_tokens` (the generation limit) and L_cache = `cache`.
    """
    if not 0 < cache <= max_tokens:
        raise InputError(f"reward.overlong_cache={cache} must be in 1..max_new_tokens={max_tokens}")
    lengths = lengths.float()
    soft = ((max_tokens - cache) - lengths) / cache
    return torch.where(lengths > max_tokens, torch.full_like(lengths, -1.0), soft.clamp(max=0.0))


@dataclass(frozen=True)
class Completions:
    """What a shaping term may read of a step's B completions, in rollout order."""

    domains: list[str]
    texts: list[str]  # the completion, after its reward prefix (OC-GRPO's guided rows)
    answers: list[str]  # the gold answer
    lengths: torch.Tensor  # (B,) completion tokens
    max_new_tokens: int  # train.max_new_tokens
    overlong_cache: int  # reward.overlong_cache


@dataclass(frozen=True)
class ShapingTerm:
    """A term of the training reward: `values` maps the step's completions to a (B,) tensor;
    `always`: computed and logged at weight 0 too (cheap, and what studies read), else only
    when weighted."""

    values: Callable[[Completions], torch.Tensor]
    always: bool = False


SHAPING_TERMS: dict[str, ShapingTerm] = {}


def shaping_term(name: str, always: bool = False):
    """Register a function of `Completions` as the shaping term `name`, weighted by
    `reward.weights.<name>`."""

    def register(fn: Callable[[Completions], torch.Tensor]):
        if name in SHAPING_TERMS or name == "correct":
            raise ValueError(f"shaping term {name!r} is already registered")
        SHAPING_TERMS[name] = ShapingTerm(fn, always)
        return fn

    return register


@shaping_term("format", always=True)
def _format(c: Completions) -> torch.Tensor:
    values = [format_reward(*x) for x in zip(c.domains, c.texts, c.answers, strict=True)]
    return torch.tensor(values)


@shaping_term("overlong")
def _overlong(c: Completions) -> torch.Tensor:
    return overlong_penalty(c.lengths, c.max_new_tokens, c.overlong_cache)


def shaped_rewards(
    correct: torch.Tensor, completions: Completions, weights
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The training reward w_correct * correct + sum_i w_i r_i over the registered terms, and
    its components (`correct`, and every term that is weighted or `always`), each a (B,)
    tensor on `correct`'s device, for logging one by one."""
    components = {"correct": correct}
    total = weights.correct * correct
    for name, term in SHAPING_TERMS.items():
        weight = getattr(weights, name)
        if weight or term.always:
            values = term.values(completions).to(correct.device)
            components[name] = values
            total = total + weight * values
    return total, components
