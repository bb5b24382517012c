"""The padded layout of a batch of rollouts, shared by every sampler and scorer.

Sequences are laid out as [left-padded prompt | completion right-padded], the layout
`grpo_core.rollout.sampler.generate` returns. Position ids are derived from the attention mask
both when sampling and when scoring, so the trainer's log-probs equal the sampler's.
Every completion token was sampled: the sampler is never given part of the completion.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Rollouts:
    input_ids: torch.Tensor  # (B, P + T) prompt (left-padded) then completion
    attention_mask: torch.Tensor  # (B, P + T)
    completion_mask: torch.Tensor  # (B, T) 1 on completion tokens up to and including EOS
    prompt_len: int  # P
    texts: list[str]  # decoded completions, special tokens removed
    truncated: torch.Tensor  # (B,) bool: no EOS within max_new_tokens
    # The sampler's token log-probs and entropies (B, T) at its temperature, and which model,
    # weights and temperature they belong to (`_sampler_key`); None where not recorded.
    sampler_logp: torch.Tensor | None = None
    sampler_entropy: torch.Tensor | None = None
    sampler_key: tuple | None = None
    # Per-token weights correcting for a sampler other than the policy (a vLLM engine):
    # truncated importance weights min(pi_old / q, cap), 1 where not applicable; None: none.
    is_weight: torch.Tensor | None = None

    @property
    def completion_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len :]

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1)

    def select(self, rows: torch.Tensor | list[int]) -> Rollouts:
        rows = torch.as_tensor(rows, dtype=torch.long, device=self.input_ids.device)
        recorded = self.sampler_logp is not None
        return Rollouts(
            input_ids=self.input_ids[rows],
            attention_mask=self.attention_mask[rows],
            completion_mask=self.completion_mask[rows],
            prompt_len=self.prompt_len,
            texts=[self.texts[i] for i in rows.tolist()],
            truncated=self.truncated[rows],
            sampler_logp=self.sampler_logp[rows] if recorded else None,
            sampler_entropy=self.sampler_entropy[rows] if recorded else None,
            sampler_key=self.sampler_key if recorded else None,
            is_weight=None if self.is_weight is None else self.is_weight[rows],
        )


def concat_rollouts(parts: list[Rollouts], pad_id: int) -> Rollouts:
    """Stack rollout batches whose prompt and completion widths differ: prompts are left-padded
    and completions right-padded to the widest. Position ids follow the attention mask, so every
    row's log-probs are unchanged."""
    p_max = max(r.prompt_len for r in parts)
    t_max = max(r.completion_mask.shape[1] for r in parts)
    ids, attn, cmask = [], [], []
    for r in parts:
        left, right = p_max - r.prompt_len, t_max - r.completion_mask.shape[1]
        ids.append(F.pad(r.input_ids, (left, right), value=pad_id))
        attn.append(F.pad(r.attention_mask, (left, right), value=0))
        cmask.append(F.pad(r.completion_mask, (0, right), value=0))
    # The sampler's log-probs carry over when every part was sampled by the same model state.
    key = parts[0].sampler_key
    recorded = key is not None and all(
        r.sampler_logp is not None and r.sampler_key == key for r in parts
    )

    def right_padded(name: str) -> torch.Tensor:
        return torch.cat(
            [F.pad(getattr(r, name), (0, t_max - r.completion_mask.shape[1])) for r in parts]
        )

    return Rollouts(
        input_ids=torch.cat(ids),
        attention_mask=torch.cat(attn),
        completion_mask=torch.cat(cmask),
        prompt_len=p_max,
        texts=[t for r in parts for t in r.texts],
        truncated=torch.cat([r.truncated for r in parts]),
        sampler_logp=right_padded("sampler_logp") if recorded else None,
        sampler_entropy=right_padded("sampler_entropy") if recorded else None,
        sampler_key=key if recorded else None,
        is_weight=right_padded("is_weight")
        if all(r.is_weight is not None for r in parts)
        else None,
    )


def completion_mask_from_ids(completion_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 up to and including the first EOS of each row; all ones where no EOS appears."""
    is_eos = completion_ids == eos_id
    seen_before = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    return (~seen_before).long()


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)
