"""Off-Context GRPO: learn on questions the policy never solves from guided rollouts.

A group whose rollouts all fail is re-rolled from a *guided* context: the prompt followed by a
prefix g of the reference solution, which the sampler continues. The trained response is the
whole y = g + continuation, scored under the *unguided* prompt x, so the policy learns to
answer x alone. The guided sampler q forces g (probability 1) and samples the rest from
pi_old, so per token

    log q(y_t | x, y_<t) = 0                         on the prefix tokens,
    log q(y_t | x, y_<t) = log pi_old(y_t | x, y_<t) on the continuation,

and each token's advantage is weighted by the truncated importance ratio of the policy being
trained to the policy that sampled:

    w_t = clip(exp(gamma * (log pi_old(y_t | x, y_<t) - log q(y_t | x, y_<t))), c_min, c_max).

Continuation tokens get w = 1 (same context, same policy); a prefix token gets
clip(pi_old(g_t)^gamma, c_min, c_max): reference tokens the policy finds unlikely count less.
With an empty guide every w is 1 and the loss is GRPO's.

The paper's guided context (Agrawal et al., "Off-Context GRPO", reference code
AgPriyank/OC-GRPO) instead puts the hint *inside the prompt*: x~ is the problem, a "partial
reference solution" block and an instruction to complete it (`prompts.guided_prompt`), and the
model writes the whole response itself. Its hint is `char_prefix`: the first `fraction` of the
solution's characters, cut back to a word boundary and stripped (fraction 1 is the whole
solution, which x~ asks the model to verify).
"""

from __future__ import annotations

import math
import re

import torch


def guide_prefix(solution: str, fraction: float) -> str:
    """The first `fraction` of the reference solution's words, cut at a word boundary and
    keeping the whitespace that follows the last word (so the sampler starts a new word).

    The word count is rounded half up; fraction 1 is the whole solution.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"guidance fraction must be in (0, 1], got {fraction}")
    words = solution.split()
    k = min(len(words), math.floor(fraction * len(words) + 0.5))
    if k == 0:
        return ""
    if k == len(words):
        return solution
    pos = 0
    for word in words[:k]:
        pos = solution.index(word, pos) + len(word)
    end = pos
    while end < len(solution) and solution[end].isspace():
        end += 1
    return solution[:end]


# The reference drops Asymptote diagram source before cutting ([asy] ... [/asy] in MATH
# solutions), and only a space, newline or tab counts as a word boundary.
_ASYMPTOTE = re.compile(r"\[asy\].*?\[/asy\]", re.DOTALL)
_WORD_BOUNDARY = " \n\t"


def char_prefix(solution: str, fraction: float) -> str:
    """The paper's hint: the first `fraction` of the solution's characters, cut back to a word
    boundary, with the trailing whitespace stripped.

    The solution is first stripped (and any `[asy]...[/asy]` diagram removed); the target length
    is floor(fraction * len), at least 1. The cut moves back from the target to the nearest
    space, newline or tab, so a word ending exactly at the target is kept; when no boundary
    precedes the target (the first word is longer) the cut stays at the target, mid-word.
    Fraction 1 is the whole stripped solution.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"guidance fraction must be in (0, 1], got {fraction}")
    text = _ASYMPTOTE.sub("", solution).strip()
    target = max(1, int(fraction * len(text)))
    if fraction == 1 or target >= len(text):
        return text
    cut = target
    while cut > 0 and text[cut] not in _WORD_BOUNDARY:
        cut -= 1
    if cut == 0:
        cut = target
    return text[:cut].rstrip()


def behaviour_logprobs(old_logp: torch.Tensor, guide_mask: torch.Tensor) -> torch.Tensor:
    """log q per token: 0 where the guide forced the token, log pi_old elsewhere."""
    return torch.where(guide_mask.bool(), torch.zeros_like(old_logp), old_logp)


def importance_weights(
    old_logp: torch.Tensor,
    guide_mask: torch.Tensor,
    gamma: float = 1.0,
    c_min: float = 0.01,
    c_max: float = 1.0,
) -> torch.Tensor:
    """w = clip(exp(gamma * (log pi_old - log q)), c_min, c_max) per token, (B, T)."""
    log_ratio = old_logp - behaviour_logprobs(old_logp, guide_mask)
    return torch.exp(gamma * log_ratio).clamp(min=c_min, max=c_max)
