"""Scoring rollouts: the token log-probs (and entropies) of their completions under a model,
what the loss, CoDaPO's confidence and OC-GRPO's weights read.

A group's rows share their prompt here too: each distinct prompt is run once and its KV cache
copied to its rows, with gradients flowing back through the shared prompt (`token_logprobs`).
When the rollouts carry the sampler's own log-probs for the same model state and temperature,
`score_rollouts` returns those instead of a forward pass (equal up to float rounding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from grpo_core.rollout.forward import SharedRows, can_share, check_filled, forward, unwrap
from grpo_core.rollout.rollouts import Rollouts, position_ids_from_mask
from grpo_core.rollout.sampler import _sampler_key


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (B, T) of the completion tokens under `model` at `temperature`, and
    optionally the per-token entropy of the model's distribution at `temperature` (as verl's
    `entropy_from_logits` of the scaled logits), without gradient unless `entropy_grad` (an
    entropy bonus in the loss). The LM head runs on the positions that
    predict completion tokens only, so nothing of size (B, P + T, V) is ever made.

    Rows with the same prompt (a group) share it: each distinct prompt is run once and its KV
    cache copied to its rows, whose completions then attend to it; the gradient of every row
    flows back into the one prompt pass. The same numbers as one pass over every row, up to
    float rounding, for a fraction of the work (the prompt is often most of a row).
    """
    p, t = prompt_len, input_ids.shape[1] - prompt_len
    pos = position_ids_from_mask(attention_mask)
    shared = (
        SharedRows.find(input_ids[:, :p], attention_mask[:, :p])
        if t > 1 and can_share(model)
        else None
    )
    if shared is None:
        logits = forward(model, input_ids, attention_mask, pos, logits_to_keep=t + 1)[:, :-1]
    else:
        i = shared.first
        cache = DynamicCache(config=unwrap(model).config)
        head = forward(model, input_ids[i, :p], attention_mask[i, :p], pos[i, :p], cache, 1)
        check_filled(cache, model)
        shared.expand_cache(cache)
        rest = forward(model, input_ids[:, p:-1], attention_mask[:, :-1], pos[:, p:-1], cache)
        logits = torch.cat([shared.expand(head), rest], dim=1)
    logits = logits.float() / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    targets = input_ids[:, prompt_len:].unsqueeze(-1)
    logp = logp_all.gather(-1, targets).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@torch.no_grad()
def score_rollouts(
    model, ro: Rollouts, temperature: float, micro_batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token log-probs and entropies (B, T) of every rollout under `model`, in micro-batches
    and without gradients: the rollout policy's log-probs (pi_old) that the loss, CoDaPO's
    confidence and OC-GRPO's weights all read.

    When `model`, with its weights unchanged since, sampled `ro` at `temperature`, those are
    the log-probs the sampler computed: no forward pass (equal up to float rounding)."""
    if ro.sampler_logp is not None and ro.sampler_key == _sampler_key(model, temperature):
        return ro.sampler_logp, ro.sampler_entropy
    logps, entropies = [], []
    for start in range(0, ro.input_ids.shape[0], micro_batch_size):
        rows = slice(start, start + micro_batch_size)
        logp, entropy = token_logprobs(
            model,
            ro.input_ids[rows],
            ro.attention_mask[rows],
            ro.prompt_len,
            temperature,
            with_entropy=True,
        )
        logps.append(logp)
        entropies.append(entropy)
    return torch.cat(logps), torch.cat(entropies)
