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
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from grpo_core.errors import InputError
from grpo_core.rewards.code import defines, extract_program, parse_code_answer, program_source
from grpo_core.rewards.math import boxed_answer, halfwidth
from grpo_core.rewards.mcq import LETTERS, mcq_answer, option_letters

# What a box may hold that is no answer: formatting, spacing, dots, `?`.
_NO_ANSWER = re.compile(
    r"\\(?:text\w*|math\w*|mbox|boxed|fbox|[lcv]?dots|quad|qquad|[,;:!> ])|[{}\s?.…]"
)


def format_reward(domain: str, completion: str, answer: str, prompt: str | None = None) -> float:
    """1.0 if the completion gives a real answer in the form the domain expects, else 0.0. Says
    nothing about correctness, but pays only an answer, never the bare form:

    - math: a closed `\\boxed{}`, every box agreeing (`math.boxed_answer`), that holds a
      letter, digit or symbol command once formatting, spacing, dots and `?` are set aside:
      `\\boxed{}`, `\\boxed{?}` and `\\boxed{\\text{?}}` earn 0;
    - mcq: one letter committed to (`mcq.mcq_answer`: `Answer: X`, "The answer is X", ...)
      among the options `prompt` lists (`mcq.option_letters`): `Answer: J` on a four-option
      question earns 0. Without `prompt` (or where it lists none), any of A-J;
    - code: a program that parses and defines the entry point, as the verifier builds it
      (`code.program_source`, the answer's `prefix` before a HumanEval-style continuation);
      where the prefix holds the definition, the completion must write a statement of its
      body: an empty completion, or top-level code after the prefix, defines nothing. With no
      entry point, the program must define a function or class.
    """
    if domain == "math":
        box = boxed_answer(halfwidth(completion))
        return float(
            box is not None and re.search(r"[A-Za-z0-9\\]", _NO_ANSWER.sub("", box)) is not None
        )
    if domain == "mcq":
        letter = mcq_answer(completion)
        return float(letter is not None and letter in (option_letters(prompt or "") or LETTERS))
    if domain == "code":
        return _code_format(completion, answer)
    return 0.0


def _code_format(completion: str, answer: str) -> float:
    """The code form of `format_reward`."""
    code = parse_code_answer(answer)
    entry = code.entry_point
    program = program_source(completion, code)
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError):
        return 0.0
    if entry is None:
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        return float(any(isinstance(node, kinds) for node in tree.body))
    if not defines(program, entry):
        return 0.0
    if not code.prefix or defines(extract_program(completion, entry), entry):
        return 1.0
    # The prefix's signature and docstring, continued: the body must be the completion's.
    prefix_lines = len(code.prefix.splitlines())
    return float(
        any(
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name == entry
            and any(stmt.lineno > prefix_lines for stmt in node.body)
            for node in tree.body
        )
    )


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
    # the question's plain-text prompt (mcq: the options the format term accepts); None:
    # unknown, any letter A-J
    prompts: list[str] | None = None


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
    prompts = c.prompts if c.prompts is not None else [None] * len(c.texts)
    rows = zip(c.domains, c.texts, c.answers, prompts, strict=True)
    values = [format_reward(*row) for row in rows]
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
