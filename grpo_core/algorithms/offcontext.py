"""Off-Context GRPO (Agrawal et al.; reference code AgPriyank/OC-GRPO): learn the questions the
policy never solves from rollouts sampled with a hint in the prompt, trained on the prompt
without it.

For a question x with reference solution s, the guided prompt x~
(`grpo_core.data.prompts.hinted_prompt`) is x with a "partial reference solution" block holding
`char_prefix(s, f)`: the first fraction f of the solution's characters, cut back to a word
boundary. The model writes the whole response y
itself from x~; y is rewarded on its own text (the hint is not part of it). The loss and the
PPO ratio are computed under the unguided prompt x, and every token of a guided row weights
its advantage by the truncated importance weight of the unguided to the guided context under
the rollout policy pi_old:

    w_t = clamp(exp(gamma * (log pi_old(y_t | x, y_<t) - log pi_old(y_t | x~, y_<t))),
                floor, cap)

(the reference's `exp(-diff) ** gamma`, diff = log pi_old(.|x~) - log pi_old(.|x); gamma 1,
floor 0.01 in all its runs, cap 1). Tokens the hint made likely, that the model would not have
written from x alone, count little; tokens it writes as readily from x keep weight 1.
Unguided rows keep w = 1, so a batch without guided rows is GRPO's.

The variants and baselines (`train.oc_grpo`, grpo_core.training.guidance) differ in which
context samples y and which one trains it: `importance` samples under x~ and trains under x
with w; `none` the same with w = 1; `hinted` trains under x~ itself (BREAD/POPE-style hints);
`prefix_rl` places the prefix after the prompt (in the assistant turn) and trains only the
continuation, under that context, rewarding prefix + continuation.
"""

from __future__ import annotations

import torch


def importance_weights(
    logp_x: torch.Tensor,
    logp_hinted: torch.Tensor,
    gamma: float = 1.0,
    floor: float = 0.01,
    cap: float = 1.0,
) -> torch.Tensor:
    """w = clamp(exp(gamma * (log pi_old(y|x) - log pi_old(y|x~))), floor, cap) per token:
    both (B, T) log-probs of the same response tokens, under the unguided and the guided
    prompt."""
    return torch.exp(gamma * (logp_x - logp_hinted)).clamp(min=floor, max=cap)
