"""Rollouts through Hugging Face `generate`, and the token log-probs the loss needs.

Sequences are laid out as [left-padded prompt | completion right-padded], the layout
`generate` returns. Position ids are derived from the attention mask both when sampling and
when scoring, so the trainer's log-probs equal the sampler's.

Guided rollouts (Off-Context GRPO) have the same layout: the completion starts with the guide
prefix, which the sampler was given rather than sampled, and `guide_mask` marks those tokens.
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
    guide_mask: torch.Tensor | None = None  # (B, T) 1 on guide-prefix tokens; None: zeros

    def __post_init__(self) -> None:
        if self.guide_mask is None:
            self.guide_mask = torch.zeros_like(self.completion_mask)

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
            guide_mask=self.guide_mask[rows],
        )


def concat_rollouts(parts: list[Rollouts], pad_id: int) -> Rollouts:
    """Stack rollout batches whose prompt and completion widths differ: prompts are left-padded
    and completions right-padded to the widest. Position ids follow the attention mask, so every
    row's log-probs are unchanged."""
    p_max = max(r.prompt_len for r in parts)
    t_max = max(r.completion_mask.shape[1] for r in parts)
    ids, attn, cmask, gmask = [], [], [], []
    for r in parts:
        left, right = p_max - r.prompt_len, t_max - r.completion_mask.shape[1]
        ids.append(F.pad(r.input_ids, (left, right), value=pad_id))
        attn.append(F.pad(r.attention_mask, (left, right), value=0))
        cmask.append(F.pad(r.completion_mask, (0, right), value=0))
        gmask.append(F.pad(r.guide_mask, (0, right), value=0))
    return Rollouts(
        input_ids=torch.cat(ids),
        attention_mask=torch.cat(attn),
        completion_mask=torch.cat(cmask),
        prompt_len=p_max,
        texts=[t for r in parts for t in r.texts],
        truncated=torch.cat([r.truncated for r in parts]),
        guide_mask=torch.cat(gmask),
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
    prefixes: list[str] | None = None,
    greedy: bool = False,
) -> Rollouts:
    """Sample `num_samples` completions per prompt; rows are grouped prompt by prompt.

    With `prefixes` (one per prompt, "" for none), each completion starts with its prompt's
    prefix, given to the sampler, and the completion (prefix included) still has at most
    `max_new_tokens` tokens. `greedy` decodes the most likely token at every step instead
    (temperature is then ignored).
    """
    if prefixes is not None and any(prefixes):
        if greedy:
            raise ValueError("greedy decoding of guided rollouts is not supported")
        return _generate_guided(
            model, tokenizer, prompts, prefixes, num_samples, temperature, max_new_tokens
        )
    repeated = [p for p in prompts for _ in range(num_samples)]
    enc = tokenizer(repeated, return_tensors="pt", padding=True, add_special_tokens=False)
    enc = {k: v.to(model.device) for k, v in enc.items()}
    decoding = (
        {"do_sample": False}
        if greedy
        else {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    )
    out = model.generate(
        **enc,
        **decoding,
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


def _generate_guided(
    model, tokenizer, prompts, prefixes, num_samples, temperature, max_new_tokens
) -> Rollouts:
    if len(prefixes) != len(prompts):
        raise ValueError(f"{len(prefixes)} prefixes for {len(prompts)} prompts")
    n = num_samples
    p_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    g_ids = tokenizer(prefixes, add_special_tokens=False)["input_ids"]
    g_ids = [g[:max_new_tokens] for g in g_ids]
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    contexts = [p + g for p, g in zip(p_ids, g_ids, strict=True) for _ in range(n)]
    width = max(len(c) for c in contexts)
    ctx = torch.full((len(contexts), width), pad, dtype=torch.long)
    ctx_attn = torch.zeros_like(ctx)
    for i, c in enumerate(contexts):
        ctx[i, width - len(c) :] = torch.tensor(c)
        ctx_attn[i, width - len(c) :] = 1
    budget = max(1, max_new_tokens - min(len(g) for g in g_ids))
    out = model.generate(
        input_ids=ctx.to(model.device),
        attention_mask=ctx_attn.to(model.device),
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=budget,
        pad_token_id=pad,
        eos_token_id=eos,
    )[:, width:].tolist()

    # Re-lay every row as [left-padded prompt | guide prefix + continuation, right-padded].
    rows, guide_lens, truncated = [], [], []
    for i, cont in enumerate(out):
        g = g_ids[i // n]
        cont = cont[: max_new_tokens - len(g)]
        if eos in cont:
            cont = cont[: cont.index(eos) + 1]
        rows.append(g + cont)
        guide_lens.append(len(g))
        truncated.append(not cont or cont[-1] != eos)
    p_len = max(len(p) for p in p_ids)
    t_len = max(len(r) for r in rows)
    ids = torch.full((len(rows), p_len + t_len), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    cmask = torch.zeros((len(rows), t_len), dtype=torch.long)
    gmask = torch.zeros_like(cmask)
    for i, r in enumerate(rows):
        p = p_ids[i // n]
        ids[i, p_len - len(p) : p_len] = torch.tensor(p)
        ids[i, p_len : p_len + len(r)] = torch.tensor(r)
        attn[i, p_len - len(p) : p_len + len(r)] = 1
        cmask[i, : len(r)] = 1
        gmask[i, : guide_lens[i]] = 1
    device = model.device
    return Rollouts(
        input_ids=ids.to(device),
        attention_mask=attn.to(device),
        completion_mask=cmask.to(device),
        prompt_len=p_len,
        texts=tokenizer.batch_decode(ids[:, p_len:], skip_special_tokens=True),
        truncated=torch.tensor(truncated, device=device),
        guide_mask=gmask.to(device),
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


@torch.no_grad()
def score_rollouts(
    model, ro: Rollouts, temperature: float, micro_batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token log-probs and entropies (B, T) of every rollout under `model`, in micro-batches
    and without gradients: the rollout policy's log-probs (pi_old) that the loss, CoDaPO's
    confidence and OC-GRPO's weights all read."""
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
