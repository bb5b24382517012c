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

from grpo_core.rollout.forward import (
    SharedRows,
    can_share,
    check_filled,
    forward,
    unwrap,
    zero3_sharded,
)
from grpo_core.rollout.head import PIECE_BYTES, fused_head_logprobs
from grpo_core.rollout.rollouts import Rollouts, position_ids_from_mask
from grpo_core.rollout.sampler import _sampler_key

# Float32 logits computed at a time: tokens per piece = this / (4 V). At Qwen's 151,936-token
# vocabulary, 441 tokens (256 MiB) instead of a (B, T, V) tensor per micro-batch (16 x 1,024
# tokens: 10 GB, each of its float32 copies as much again).
LOGIT_CHUNK_BYTES = 2**28


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    chunk_bytes: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (B, T) of the completion tokens under `model` at `temperature`, and
    optionally the per-token entropy of the model's distribution at `temperature` (as verl's
    `entropy_from_logits` of the scaled logits), without gradient unless `entropy_grad` (an
    entropy bonus in the loss).

    When the float32 logits of the micro-batch's completions, (B, T, V), fit in `chunk_bytes`
    (default `LOGIT_CHUNK_BYTES`) and the head computes in float32 (the tiny world's case),
    they are the model's own. Otherwise the model returns the final hidden states instead
    (`forward(hidden=True)`), and the LM head fused with the log-probs runs on pieces of rows
    (`head_logprobs`), so nothing of size (B, T, V) is made, forward or backward: the same
    numbers up to float rounding.

    Rows with the same prompt (a group) share it: each distinct prompt is run once and its KV
    cache copied to its rows, whose completions then attend to it; the gradient of every row
    flows back into the one prompt pass. The same numbers as one pass over every row, up to
    float rounding, for a fraction of the work (the prompt is often most of a row).
    """
    p, t = prompt_len, input_ids.shape[1] - prompt_len
    chunk_bytes = LOGIT_CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    head = getattr(unwrap(model), "get_output_embeddings", lambda: None)()
    # Not under ZeRO-3 (sharded): the head's weight would be gathered once per piece, a
    # number of collectives that differs between processes.
    # A model computing in bf16 (a real one: the tiny world's float32 logits fit) takes the
    # fused head whatever the size: half the time of its logits' log_softmax and gather
    # (grpo_core/rollout/head.py says what was measured).
    chunked = (
        head is not None
        and (
            input_ids.shape[0] * t * _vocab(head) * 4 > chunk_bytes
            or head.weight.dtype != torch.float32
        )
        and not zero3_sharded(model)
    )
    pos = position_ids_from_mask(attention_mask)
    shared = (
        SharedRows.find(input_ids[:, :p], attention_mask[:, :p])
        if t > 1 and can_share(model)
        else None
    )
    if shared is None:
        out = forward(model, input_ids, attention_mask, pos, logits_to_keep=t + 1, hidden=chunked)
        pieces = [out[:, :-1]]
    else:
        i = shared.first
        cache = DynamicCache(config=unwrap(model).config)
        first = forward(
            model, input_ids[i, :p], attention_mask[i, :p], pos[i, :p], cache, 1, chunked
        )
        check_filled(cache, model)
        shared.expand_cache(cache)
        rest = forward(
            model, input_ids[:, p:-1], attention_mask[:, :-1], pos[:, p:-1], cache, hidden=chunked
        )
        pieces = [shared.expand(first), rest]
    targets = input_ids[:, p:]
    if not chunked:
        return _logprobs(torch.cat(pieces, dim=1), targets, temperature, with_entropy, entropy_grad)
    hidden = torch.cat(pieces, dim=1)
    return head_logprobs(
        head, hidden, targets, temperature, with_entropy, entropy_grad, chunk_bytes
    )


def head_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool,
    chunk_bytes: int = LOGIT_CHUNK_BYTES,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs and entropies (B, T) of `targets` from the LM head `head` on the hidden
    states `hidden` (B, T, H): the head fused with the log-probs (`grpo_core.rollout.head`), in
    pieces of at most `chunk_bytes` (and `head.PIECE_BYTES`) of float32 logits, none of them
    kept for the backward, which recomputes each piece's."""
    return fused_head_logprobs(
        head,
        hidden,
        targets,
        temperature,
        with_entropy,
        entropy_grad,
        piece_bytes=min(chunk_bytes, PIECE_BYTES),
    )


def _vocab(head: torch.nn.Module) -> int:
    return getattr(head.weight, "ds_shape", head.weight.shape)[0]  # ZeRO-3: partitioned


def _logprobs(logits, targets, temperature, with_entropy, entropy_grad):
    """As few (rows, V) float32 blocks alive at once as the values allow: no copy for a
    temperature of 1 (dividing by 1 changes no bit), the logits dropped once normalised, and
    an entropy without gradient computed in place."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    del logits
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        if entropy_grad and torch.is_grad_enabled():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            with torch.no_grad():
                entropy = -logp_all.exp().mul_(logp_all).sum(-1)
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
