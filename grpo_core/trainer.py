"""The GRPO loop: sample a group per question, score it, compute advantages, take clipped
policy-gradient steps. Trainer state lives here; the math lives in `advantages` and `losses`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from grpo_core.advantages import get_advantage, group_reward_std
from grpo_core.config import TrainParams
from grpo_core.losses import KL_ESTIMATORS, POLICY_LOSSES, agg_loss, masked_mean
from grpo_core.rewards import score
from grpo_core.rollout import Rollouts, concat_rollouts, generate, token_logprobs


@dataclass(frozen=True)
class Question:
    id: str
    domain: str
    level: int
    prompt: str
    answer: str


class QuestionSampler:
    """Epochs over the question pool in a seeded random order, `n` questions at a time."""

    def __init__(self, num_questions: int, seed: int):
        if num_questions == 0:
            raise ValueError("no training questions: check train.levels against data.levels")
        self.num_questions = num_questions
        self.rng = np.random.default_rng(seed)
        self.order: list[int] = []

    def next(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n:
            if not self.order:
                self.order = self.rng.permutation(self.num_questions).tolist()
            out.append(self.order.pop())
        return out


def add_lora(model, lora) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


class GRPOTrainer:
    """One process, one policy. `reference` is None when kl_coef is 0; with LoRA the
    reference is the policy with its adapters disabled (no second copy of the weights)."""

    def __init__(self, policy, tokenizer, cfg: TrainParams, reference=None):
        self.policy = policy
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.reference = reference
        self.advantage_fn = get_advantage(cfg.advantage)
        self.kl_fn = KL_ESTIMATORS.get(cfg.kl_estimator)
        self.policy_loss = POLICY_LOSSES.get("clipped")
        params = [p for p in policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        warmup = cfg.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda n: min(1.0, (n + 1) / warmup) if warmup else 1.0
        )

    # ---- rollouts ---------------------------------------------------------------------
    def rollout(self, questions: list[Question]) -> tuple[Rollouts, torch.Tensor]:
        self.policy.eval()
        ro = generate(
            self.policy,
            self.tokenizer,
            [q.prompt for q in questions],
            num_samples=self.cfg.group_size,
            temperature=self.cfg.temperature,
            max_new_tokens=self.cfg.max_new_tokens,
        )
        g = self.cfg.group_size
        rewards = torch.tensor(
            [
                score(questions[i // g].domain, text, questions[i // g].answer)
                for i, text in enumerate(ro.texts)
            ],
            device=ro.input_ids.device,
        )
        return ro, rewards

    # ---- the update -------------------------------------------------------------------
    def _reference_logprobs(self, ids, attn, prompt_len) -> torch.Tensor | None:
        if self.cfg.kl_coef == 0:
            return None
        if self.reference is not None:
            ctx, model = nullcontext(), self.reference
        else:  # LoRA: the base weights are the reference
            ctx, model = self.policy.disable_adapter(), self.policy
        with torch.no_grad(), ctx:
            logp, _ = token_logprobs(model, ids, attn, prompt_len, self.cfg.temperature)
        return logp

    def update(self, ro: Rollouts, rewards: torch.Tensor) -> dict[str, float]:
        """`updates_per_batch` optimizer steps on one rollout batch; returns step metrics."""
        cfg = self.cfg
        advantages = self.advantage_fn(rewards, cfg.group_size, epsilon=cfg.adv_epsilon)
        std = group_reward_std(rewards, cfg.group_size)
        keep = torch.ones_like(rewards, dtype=torch.bool)
        if cfg.filter_zero_std or cfg.dynamic_sampling:
            keep = (std > 0).repeat_interleave(cfg.group_size)
        loss_mask = ro.completion_mask
        if cfg.overlong_filter:
            loss_mask = loss_mask * (~ro.truncated).unsqueeze(1)
            keep = keep & (loss_mask.sum(dim=1) > 0)
        metrics = {
            "loss": 0.0,
            "grad_norm": 0.0,
            "frac_sequences_trained": keep.float().mean().item(),
        }
        if not keep.any():
            # Nothing to learn from (every group uniform): no optimizer step, but the same
            # metric keys, so every curve has a point at every step.
            with torch.no_grad():
                logp, entropy = token_logprobs(
                    self.policy,
                    ro.input_ids,
                    ro.attention_mask,
                    ro.prompt_len,
                    cfg.temperature,
                    with_entropy=True,
                )
                ref_logp = self._reference_logprobs(ro.input_ids, ro.attention_mask, ro.prompt_len)
            metrics["entropy"] = float(masked_mean(entropy, ro.completion_mask))
            if ref_logp is not None:
                metrics["kl"] = float(masked_mean(self.kl_fn(logp, ref_logp), ro.completion_mask))
            for name in ("low_mean", "high_mean", "region_mean"):
                metrics[f"clip_ratio/{name}"] = 0.0
            return metrics

        # Keep the trained rows only, and only as many completion columns as they use.
        cmask = loss_mask[keep]
        width = int(cmask.sum(1).max())
        p = ro.prompt_len
        ids = ro.input_ids[keep][:, : p + width]
        attn = ro.attention_mask[keep][:, : p + width]
        cmask = cmask[:, :width]
        adv = advantages[keep]
        num_tokens = float(cmask.sum())
        num_seqs = float(len(adv))
        chunks = [
            slice(i, i + cfg.micro_batch_size) for i in range(0, len(adv), cfg.micro_batch_size)
        ]
        ref_logps = [self._reference_logprobs(ids[c], attn[c], p) for c in chunks]
        old_logps: list[torch.Tensor] = []

        # Running sums stay tensors on the device: no host sync inside the loop.
        sums = dict.fromkeys(
            ("loss", "kl", "entropy", "low", "high"), torch.zeros((), device=ids.device)
        )
        self.policy.train()
        for update in range(cfg.updates_per_batch):
            for j, c in enumerate(chunks):
                m = cmask[c]
                logp, entropy = token_logprobs(
                    self.policy, ids[c], attn[c], p, cfg.temperature, with_entropy=update == 0
                )
                if update == 0:
                    # The weights have not moved since sampling, so this forward pass already
                    # gives the rollout policy's log-probs: no separate old-log-prob pass.
                    old_logps.append(logp.detach())
                    sums["entropy"] = sums["entropy"] + (entropy * m).sum()
                out = self.policy_loss(
                    logp, old_logps[j], adv[c], cfg.clip_low, cfg.clip_high, cfg.dual_clip
                )
                per_token = out.per_token
                if ref_logps[j] is not None:
                    kl = self.kl_fn(logp, ref_logps[j])
                    per_token = per_token + cfg.kl_coef * kl
                    sums["kl"] = sums["kl"] + (kl.detach() * m).sum()
                loss = agg_loss(
                    per_token,
                    m,
                    cfg.loss_agg,
                    num_tokens=num_tokens,
                    num_seqs=num_seqs,
                    max_tokens=cfg.max_new_tokens,
                )
                loss.backward()
                sums["loss"] = sums["loss"] + loss.detach()
                sums["low"] = sums["low"] + (out.clipped_low & m.bool()).sum()
                sums["high"] = sums["high"] + (out.clipped_high & m.bool()).sum()
            grad_norm = torch.nn.utils.clip_grad_norm_(
                [q for q in self.policy.parameters() if q.requires_grad], cfg.max_grad_norm
            )
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            metrics["grad_norm"] += float(grad_norm) / cfg.updates_per_batch

        n_upd = cfg.updates_per_batch
        sums = {k: float(v) for k, v in sums.items()}
        metrics["loss"] = sums["loss"] / n_upd
        metrics["entropy"] = sums["entropy"] / num_tokens
        if cfg.kl_coef > 0:
            metrics["kl"] = sums["kl"] / (num_tokens * n_upd)
        metrics["clip_ratio/low_mean"] = sums["low"] / (num_tokens * n_upd)
        metrics["clip_ratio/high_mean"] = sums["high"] / (num_tokens * n_upd)
        metrics["clip_ratio/region_mean"] = (sums["low"] + sums["high"]) / (num_tokens * n_upd)
        return metrics

    def step(
        self, questions: list[Question], more: Callable[[int], list[Question]] | None = None
    ) -> tuple[dict[str, float], list[dict]]:
        """One RL step. Returns TRL-named metrics and one log row per question sampled.

        With `dynamic_sampling`, `more(n)` supplies further questions when too few groups are
        informative (reward std > 0); only informative groups, at most `prompts_per_step`,
        are trained on. The reward metrics cover everything that was sampled.
        """
        cfg, g = self.cfg, self.cfg.group_size
        ro, rewards = self.rollout(questions)
        rounds = 1
        if cfg.dynamic_sampling:
            parts = [(ro, rewards)]
            while (
                more is not None
                and rounds < cfg.max_sampling_rounds
                and int((group_reward_std(rewards, g) > 0).sum()) < cfg.prompts_per_step
            ):
                extra = more(cfg.prompts_per_step)
                parts.append(self.rollout(extra))
                questions = questions + extra
                rounds += 1
                rewards = torch.cat([r for _, r in parts])
            ro = concat_rollouts([r for r, _ in parts], self.tokenizer.pad_token_id)
        metrics = rollout_metrics(ro, rewards, g)
        metrics["sampling_rounds"] = float(rounds)

        train_ro, train_rewards = ro, rewards
        if cfg.dynamic_sampling:
            groups = torch.nonzero(group_reward_std(rewards, g) > 0).flatten()
            groups = groups[: cfg.prompts_per_step]
            if len(groups):
                rows = (groups.unsqueeze(1) * g + torch.arange(g, device=groups.device)).flatten()
                train_ro, train_rewards = ro.select(rows), rewards[rows]
        metrics.update(self.update(train_ro, train_rewards))

        grouped = rewards.view(-1, g)
        mean, std = grouped.mean(dim=1).tolist(), grouped.std(dim=1).tolist()
        length = ro.lengths.float().view(-1, g).mean(dim=1).tolist()
        rows_log = [
            {
                "id": q.id,
                "level": q.level,
                "reward_mean": mean[i],
                "reward_std": std[i],
                "mean_length": length[i],
            }
            for i, q in enumerate(questions)
        ]
        return metrics, rows_log


def rollout_metrics(ro: Rollouts, rewards: torch.Tensor, group_size: int) -> dict[str, float]:
    std = group_reward_std(rewards, group_size)
    lengths = ro.lengths.float()
    return {
        "reward": rewards.mean().item(),
        "reward_std": std.mean().item(),
        "frac_reward_zero_std": (std == 0).float().mean().item(),
        "completions/mean_length": lengths.mean().item(),
        "completions/min_length": lengths.min().item(),
        "completions/max_length": lengths.max().item(),
        "completions/clipped_ratio": ro.truncated.float().mean().item(),
    }


def run(
    trainer: GRPOTrainer,
    questions: list[Question],
    steps: int,
    seed: int,
    on_step: Callable[[int, dict[str, float], list[dict]], None] | None = None,
) -> None:
    """The RL loop: `steps` steps of `prompts_per_step` questions each, with a progress bar."""
    sampler = QuestionSampler(len(questions), seed)
    bar = tqdm(range(steps), desc="grpo", unit="step")
    for step in bar:
        torch.manual_seed(seed * 100_003 + step)  # each step's sampling is reproducible alone
        batch = [questions[i] for i in sampler.next(trainer.cfg.prompts_per_step)]
        metrics, rows = trainer.step(batch, more=lambda n: [questions[i] for i in sampler.next(n)])
        bar.set_postfix(reward=f"{metrics['reward']:.3f}", entropy=f"{metrics['entropy']:.3f}")
        if on_step is not None:
            on_step(step, metrics, rows)
