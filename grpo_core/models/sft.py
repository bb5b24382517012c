"""Supervised warm start on reference solutions: the loss covers completion tokens only."""

from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import get_cosine_schedule_with_warmup

from grpo_core.config.model import SFTParams
from grpo_core.errors import InputError


def sft_batch(tokenizer, prompts: list[str], targets: list[str]) -> dict[str, torch.Tensor]:
    """Right-padded prompt+target+EOS sequences; labels are -100 outside target+EOS."""
    p_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    t_ids = tokenizer(targets, add_special_tokens=False)["input_ids"]
    seqs = [p + t + [tokenizer.eos_token_id] for p, t in zip(p_ids, t_ids, strict=True)]
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full_like(input_ids, -100)
    attention = torch.zeros_like(input_ids)
    for i, (p, s) in enumerate(zip(p_ids, seqs, strict=True)):
        input_ids[i, : len(s)] = torch.tensor(s)
        labels[i, len(p) : len(s)] = torch.tensor(s[len(p) :])
        attention[i, : len(s)] = 1
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}


def level_mixture(levels: np.ndarray, level_weights: list[float]) -> np.ndarray:
    """Per-row sampling probabilities so that level L gets weight level_weights[L-1] in total."""
    if levels.max() > len(level_weights):
        raise InputError(
            f"model.sft.level_weights has {len(level_weights)} entries but the data has "
            f"level {levels.max()}"
        )
    weights = np.asarray(level_weights, dtype=float)[levels - 1]
    counts = np.bincount(levels)[levels]
    p = weights / counts
    if p.sum() <= 0:
        raise InputError("model.sft.level_weights gives every training level weight 0")
    return p / p.sum()


def warm_start(
    model,
    tokenizer,
    prompts: list[str],
    targets: list[str],
    levels: np.ndarray,
    params: SFTParams,
    seed: int,
) -> list[float]:
    """Train `model` in place; returns the loss of every step."""
    if params.steps == 0:
        return []
    rng = np.random.default_rng(seed)
    probs = level_mixture(levels, params.level_weights)
    opt = torch.optim.AdamW(model.parameters(), lr=params.lr, weight_decay=0.0)
    sched = get_cosine_schedule_with_warmup(opt, params.warmup_steps, params.steps)
    torch.manual_seed(seed)
    model.train()
    losses = []
    bar = tqdm(range(params.steps), desc="sft", unit="step")
    for _ in bar:
        idx = rng.choice(len(prompts), size=params.batch_size, p=probs)
        batch = sft_batch(tokenizer, [prompts[i] for i in idx], [targets[i] for i in idx])
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return losses
