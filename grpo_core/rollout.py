"""Rollouts through Hugging Face `generate`, and the token log-probs the loss needs.

Sequences are laid out as [left-padded prompt | completion right-padded], the layout
`generate` returns. Position ids are derived from the attention mask both when sampling and
when scoring, so the trainer's log-probs equal the sampler's.
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

    @property
    def completion_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len :]

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1)

    def select(self, rows: torch.Tensor | list[int]) -> Rollouts:
        rows = torch.as_tensor(rows, dtype=torch.long, device=self.input_ids.device)
        return Rollouts(
            input_ids=self.input_ids[rows],
            attention_mask=self.attention_mask[rows],
            completion_mask=self.completion_mask[rows],
            prompt_len=self.prompt_len,
            texts=[self.texts[i] for i in rows.tolist()],
            truncated=self.truncated[rows],
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
    return Rollouts(
        input_ids=torch.cat(ids),
        attention_mask=torch.cat(attn),
        completion_mask=torch.cat(cmask),
        prompt_len=p_max,
        texts=[t for r in parts for t in r.texts],
        truncated=torch.cat([r.truncated for r in parts]),
    )


def completion_mask_from_ids(completion_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 up to and including the first EOS of each row; all ones where no EOS appears."""
    is_eos = completion_ids == eos_id
    seen_before = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    return (~seen_before).long()


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: list[str],
    num_samples: int,
    temperature: float,
    max_new_tokens: int,
) -> Rollouts:
    """Sample `num_samples` completions per prompt; rows are grouped prompt by prompt."""
    repeated = [p for p in prompts for _ in range(num_samples)]
    enc = tokenizer(repeated, return_tensors="pt", padding=True, add_special_tokens=False)
    enc = {k: v.to(model.device) for k, v in enc.items()}
    out = model.generate(
        **enc,
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    prompt_len = enc["input_ids"].shape[1]
    completion = out[:, prompt_len:]
    cmask = completion_mask_from_ids(completion, tokenizer.eos_token_id)
    truncated = ~(completion == tokenizer.eos_token_id).any(dim=1)
    return Rollouts(
        input_ids=out,
        attention_mask=torch.cat([enc["attention_mask"], cmask], dim=1),
        completion_mask=cmask,
        prompt_len=prompt_len,
        texts=tokenizer.batch_decode(completion, skip_special_tokens=True),
        truncated=truncated,
    )


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (B, T) of the completion tokens under `model` at `temperature`, and
    optionally the per-token entropy (no gradient). Only completion positions' logits are
    normalised, so nothing of size (B, P + T, V) outlives this call."""
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    ).logits
    logits = logits[:, prompt_len - 1 : -1].float() / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    targets = input_ids[:, prompt_len:].unsqueeze(-1)
    logp = logp_all.gather(-1, targets).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy
