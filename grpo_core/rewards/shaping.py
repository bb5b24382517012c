"""Reward shaping (training only): a format reward (the answer is in the form the domain
expects) and DAPO's soft overlong punishment, added to the verifier's reward each with its
weight from `reward.weights`; every component is kept so that it can be logged on its own.
"""

from __future__ import annotations

import ast

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


def shaped_rewards(
    correct: torch.Tensor,
    fmt: torch.Tensor,
    overlong: torch.Tensor | None,
    weights,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The training reward sum_i w_i r_i and its components (`correct`, `format`, and
    `overlong` when it is weighted), each a (B,) tensor, for logging one by one."""
    components = {"correct": correct, "format": fmt}
    total = weights.correct * correct + weights.format * fmt
    if overlong is not None:
        components["overlong"] = overlong
        total = total + weights.overlong * overlong
    return total, components
