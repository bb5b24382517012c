"""The clipped policy-gradient update on one rollout batch: `updates_per_batch` optimizer steps,
each over micro-batches of the trained rows, with the loss of grpo_core.algorithms.losses, an
optional KL term to the reference and entropy bonus, and each process training its share
(parallel.py)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch

from grpo_core.algorithms.advantages import get_advantage, group_reward_std
from grpo_core.algorithms.losses import KL_ESTIMATORS, POLICY_LOSSES, agg_loss, masked_mean
from grpo_core.config.train import TrainParams
from grpo_core.rollout.rollouts import Rollouts
from grpo_core.rollout.scoring import token_logprobs
from grpo_core.training.parallel import SingleProcess

# Per row of the batch, summed over its tokens and the optimizer steps: the coefficient the
# loss put on grad log pi (|.|, signed), clipped tokens, tokens.
ROW_STATS = ("weight_abs", "weight", "clipped", "tokens")


def update_weights(out, advantages: torch.Tensor, dual_clip: float | None) -> torch.Tensor:
    """(B, T) the coefficient the clipped surrogate puts on each token's grad log pi:
    advantage x ratio where the loss is not clipped, 0 where it is (the gradient of
    -min(rho A, clip(rho) A) with respect to log pi). `advantages` (B,) or (B, T) already carry
    CoDaPO's value and OC-GRPO's importance weights."""
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(1)
    active = ~(out.clipped_low | out.clipped_high)
    if dual_clip is not None:  # a dual-clipped token's loss is the constant -c A
        active = active & ~((advantages < 0) & (out.ratio > dual_clip))
    return advantages * out.ratio * active


@dataclass
class Update:
    """What one update did: its step metrics, per row of the batch the `ROW_STATS` (0 where
    not trained; a row in the loss whose forward and backward were skipped has its tokens and
    0 for the rest, what running it would have given), and the rows this process ran forward
    and backward."""

    metrics: dict[str, float]
    row_stats: dict[str, torch.Tensor]
    trained_rows: list[int]


@dataclass
class TrainedRows:
    """The rows of a batch that run forward and backward, cut to as many completion columns
    as they use, with the counts of every row in the loss (skipped ones included) that every
    process divides its loss by."""

    kept: torch.Tensor  # (N,) their row indices in the batch, increasing
    ids: torch.Tensor
    attn: torch.Tensor
    prompt_len: int
    cmask: torch.Tensor  # the loss mask
    old: torch.Tensor  # pi_old's token log-probs
    adv: torch.Tensor  # (N,) or (N, T) with the token weights
    num_tokens: float
    num_seqs: float


def trained_rows(
    ro: Rollouts,
    keep: torch.Tensor,
    loss_mask: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    token_weights: torch.Tensor | None,
    skip: torch.Tensor | None = None,
) -> TrainedRows:
    """The rows `keep` (B,) of the batch are in the loss: its denominators count their tokens
    and sequences. Those also in `skip` (B,), whose forward and backward would add exactly
    nothing, do not run; if that leaves none, the first row of `keep` runs alone, so that the
    optimizer still steps (on zero gradients) as it would with every row."""
    num_tokens = float(loss_mask[keep].sum())
    num_seqs = float(keep.sum())
    run = keep if skip is None else keep & ~skip
    if not run.any():
        run = torch.zeros_like(keep)
        run[torch.nonzero(keep)[0]] = True
    cmask = loss_mask[run]
    width = int(cmask.sum(1).max())
    p = ro.prompt_len
    ids = ro.input_ids[run][:, : p + width]
    attn = ro.attention_mask[run][:, : p + width]
    cmask = cmask[:, :width]
    old = old_logp[run][:, :width]
    adv = advantages[run]
    if token_weights is not None:
        adv = adv.unsqueeze(1) * token_weights[run][:, :width]
    kept = torch.nonzero(run).flatten()
    return TrainedRows(kept, ids, attn, p, cmask, old, adv, num_tokens, num_seqs)


class PolicyUpdate:
    """The update of `policy` (what the loss runs through: DDP / DeepSpeed when wrapped;
    `model` the unwrapped one) by `optimizer` and `scheduler`.

    `reference` is None when kl_coef is 0 or with LoRA, where the reference is the policy with
    its adapters disabled."""

    # Skip the forward and backward of rows in the loss whose advantage is 0 on every token,
    # where that cannot change the update (`zero_advantage_rows`). False runs them (a check).
    skip_zero_advantage = True

    def __init__(
        self,
        cfg: TrainParams,
        parallel: SingleProcess,
        policy,
        model,
        optimizer,
        scheduler,
        reference=None,
    ):
        self.cfg = cfg
        self.parallel = parallel
        self.policy = policy
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.reference = reference
        self.advantage_fn = get_advantage(cfg.advantage)
        self.kl_fn = KL_ESTIMATORS.get(cfg.kl_estimator)
        self.policy_loss = POLICY_LOSSES.get("clipped")

    def reference_logprobs(self, ids, attn, prompt_len) -> torch.Tensor | None:
        if self.cfg.kl_coef == 0:
            return None
        if self.reference is not None:
            ctx, model = nullcontext(), self.reference
        else:  # LoRA: the base weights are the reference
            ctx, model = self.model.disable_adapter(), self.model
        with torch.no_grad(), ctx:
            logp, _ = token_logprobs(model, ids, attn, prompt_len, self.cfg.temperature)
        return logp

    def __call__(
        self,
        ro: Rollouts,
        rewards: torch.Tensor,
        old_logp: torch.Tensor,
        entropy: torch.Tensor,
        adv_weights: torch.Tensor | None = None,
        token_weights: torch.Tensor | None = None,
    ) -> Update:
        """`updates_per_batch` optimizer steps on one rollout batch.

        `old_logp` / `entropy` (B, T) are the rollout policy's. `adv_weights` (B,) scale each
        sequence's advantage (CoDaPO's value), `token_weights` (B, T) each token's (OC-GRPO's
        importance weight)."""
        cfg = self.cfg
        advantages = self.advantage_fn(rewards, cfg.group_size, epsilon=cfg.adv_epsilon)
        if adv_weights is not None:
            advantages = advantages * adv_weights
        std = group_reward_std(rewards, cfg.group_size)
        keep = torch.ones_like(rewards, dtype=torch.bool)
        if cfg.filter_zero_std or cfg.dynamic_sampling:
            keep = (std > 0).repeat_interleave(cfg.group_size)
        loss_mask = ro.completion_mask
        if cfg.overlong_filter:
            loss_mask = loss_mask * (~ro.truncated).unsqueeze(1)
            keep = keep & (loss_mask.sum(dim=1) > 0)
        # `keep`: the rows in the loss (its denominators, KL and entropy terms, clip ratios).
        metrics = {
            "loss": 0.0,
            "grad_norm": 0.0,
            "entropy": float(masked_mean(entropy, ro.completion_mask)),
            "frac_sequences_trained": keep.float().mean().item(),
        }
        zeros = torch.zeros(len(rewards), device=rewards.device)
        row_stats = {k: zeros.clone() for k in ROW_STATS}
        if not keep.any():
            return Update(self._nothing_to_learn(ro, old_logp, metrics), row_stats, [])

        skip = self.zero_advantage_rows(keep, loss_mask, advantages, token_weights)
        batch = trained_rows(ro, keep, loss_mask, old_logp, advantages, token_weights, skip)
        lo, hi = self.parallel.train_share(batch.kept, cfg.group_size)
        mine = batch.kept[lo:hi].tolist()
        chunks = [
            slice(i, min(i + cfg.micro_batch_size, hi)) for i in range(lo, hi, cfg.micro_batch_size)
        ]
        sums, rows = self._train(batch, chunks, metrics)
        # Each process summed its own rows: add them up.
        sums, rows = self.parallel.all_reduce_sum(sums), self.parallel.all_reduce_sum(rows)
        for k, v in rows.items():
            row_stats[k][batch.kept] = v
        # Skipped rows: in the loss with weight 0 and nothing clipped, over their tokens.
        skipped = keep.clone()
        skipped[batch.kept] = False
        row_stats["tokens"][skipped] = (
            loss_mask[skipped].sum(dim=1).to(zeros.dtype) * cfg.updates_per_batch
        )
        return Update(self._metrics(metrics, sums, rows, batch.num_tokens), row_stats, mine)

    def zero_advantage_rows(
        self,
        keep: torch.Tensor,
        loss_mask: torch.Tensor,
        advantages: torch.Tensor,
        token_weights: torch.Tensor | None,
    ) -> torch.Tensor | None:
        """(B,) the rows of `keep` whose forward and backward can be skipped without changing
        the update, or None. A row whose advantage (with its weights) is 0 on every loss token
        adds exactly 0 to the clipped surrogate's gradient; it still counts in the denominators
        (`trained_rows`), so the other rows' gradients are unchanged. Not when the loss has a
        term that such a row feeds (kl_coef or entropy_coef > 0), nor with filter_zero_std,
        which keeps its own rows as it always has."""
        cfg = self.cfg
        if (
            not self.skip_zero_advantage
            or cfg.filter_zero_std
            or cfg.kl_coef != 0
            or cfg.entropy_coef != 0
        ):
            return None
        if token_weights is None:
            return keep & (advantages == 0)
        weighted = advantages.unsqueeze(1) * token_weights
        return keep & ~((weighted != 0) & loss_mask.bool()).any(dim=1)

    def _nothing_to_learn(self, ro: Rollouts, old_logp: torch.Tensor, metrics: dict) -> dict:
        """No row in the loss (every group uniform with filter_zero_std or dynamic sampling,
        or every row overlong-filtered): no optimizer step, but the same metric keys, so every
        curve has a point at every step."""
        if self.cfg.kl_coef > 0:  # the reference's forwards in micro-batches, as the loss's
            mbs = self.cfg.micro_batch_size
            ref_logp = torch.cat(
                [
                    self.reference_logprobs(
                        ro.input_ids[i : i + mbs], ro.attention_mask[i : i + mbs], ro.prompt_len
                    )
                    for i in range(0, ro.input_ids.shape[0], mbs)
                ]
            )
            kl = self.kl_fn(old_logp, ref_logp)
            metrics["kl"] = float(masked_mean(kl, ro.completion_mask))
        for name in ("low_mean", "high_mean", "region_mean"):
            metrics[f"clip_ratio/{name}"] = 0.0
        metrics["update_weight/abs_mean"] = 0.0
        return metrics

    def _train(
        self, batch: TrainedRows, chunks: list[slice], metrics: dict
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The optimizer steps over this process's micro-batches `chunks`: the running sums
        (loss, kl, clipped low / high tokens) and the per-row `ROW_STATS`, this process's."""
        cfg = self.cfg
        ids, attn, p = batch.ids, batch.attn, batch.prompt_len
        # Under ZeRO-3 the policy's weights gathered once for these (LoRA's reference is the
        # policy with its adapters off): the processes' micro-batch counts differ.
        with self.parallel.gathered() if cfg.kl_coef > 0 else nullcontext():
            ref_logps = [self.reference_logprobs(ids[c], attn[c], p) for c in chunks]
        # Running sums stay tensors on the device: no host sync inside the loop.
        sums = dict.fromkeys(("loss", "kl", "low", "high"), torch.zeros((), device=ids.device))
        rows = {k: torch.zeros(len(batch.adv), device=ids.device) for k in ROW_STATS}
        # Zero backward passes that only take part in the collectives: DDP's one all-reduce
        # for a process with no rows; under ZeRO, which reduces at every backward, as many as
        # make this process's count the largest one's.
        pad = self.parallel.padding_backwards(
            batch.kept, len(chunks), cfg.group_size, cfg.micro_batch_size
        )
        self.policy.train()
        for _ in range(cfg.updates_per_batch):
            for k in range(pad):
                self._zero_backward(ids[:1], attn[:1], p, last=not chunks and k == pad - 1)
            for j, c in enumerate(chunks):
                last = j == len(chunks) - 1  # DDP all-reduces on it; DeepSpeed's boundary
                self._micro_batch(batch, c, ref_logps[j], last, sums, rows)
            grad_norm = self.parallel.optimizer_step(self.model, self.optimizer, cfg.max_grad_norm)
            self.scheduler.step()
            metrics["grad_norm"] += float(grad_norm) / cfg.updates_per_batch
        return sums, rows

    def _micro_batch(
        self,
        batch: TrainedRows,
        c: slice,
        ref_logp: torch.Tensor | None,
        last: bool,
        sums: dict[str, torch.Tensor],
        rows: dict[str, torch.Tensor],
    ) -> None:
        """Forward and backward of the rows `c`; adds to `sums` and `rows`."""
        cfg = self.cfg
        m = batch.cmask[c]
        bonus = cfg.entropy_coef > 0
        with self.parallel.no_sync() if not last else nullcontext():
            logp, entropy = token_logprobs(
                self.policy,
                batch.ids[c],
                batch.attn[c],
                batch.prompt_len,
                cfg.temperature,
                with_entropy=bonus,
                entropy_grad=bonus,
            )
            out = self.policy_loss(
                logp, batch.old[c], batch.adv[c], cfg.clip_low, cfg.clip_high, cfg.dual_clip
            )
            per_token = out.per_token
            if bonus:  # verl: pg_loss - entropy_coeff * agg_loss(entropy), the same aggregation
                per_token = per_token - cfg.entropy_coef * entropy
            if ref_logp is not None:
                kl = self.kl_fn(logp, ref_logp)
                per_token = per_token + cfg.kl_coef * kl
                sums["kl"] = sums["kl"] + (kl.detach() * m).sum()
            loss = agg_loss(
                per_token,
                m,
                cfg.loss_agg,
                num_tokens=batch.num_tokens,
                num_seqs=batch.num_seqs,
                max_tokens=cfg.max_new_tokens,
            )
            self.parallel.backward(loss, last)
        sums["loss"] = sums["loss"] + loss.detach()
        sums["low"] = sums["low"] + (out.clipped_low & m.bool()).sum()
        sums["high"] = sums["high"] + (out.clipped_high & m.bool()).sum()
        with torch.no_grad():
            weight = update_weights(out, batch.adv[c], cfg.dual_clip) * m
            rows["weight_abs"][c] += weight.abs().sum(1)
            rows["weight"][c] += weight.sum(1)
            rows["clipped"][c] += ((out.clipped_low | out.clipped_high) & m.bool()).sum(1)
            rows["tokens"][c] += m.sum(1)

    def _zero_backward(self, ids, attn, prompt_len: int, last: bool = True) -> None:
        """A synced backward that adds nothing, for a process with no rows (or fewer
        micro-batches) to train: the collectives need every process."""
        logp, _ = token_logprobs(self.policy, ids, attn, prompt_len, self.cfg.temperature)
        self.parallel.backward(logp.sum() * 0.0, last)

    def _metrics(
        self,
        metrics: dict,
        sums: dict[str, torch.Tensor],
        rows: dict[str, torch.Tensor],
        num_tokens: float,
    ) -> dict[str, float]:
        """The update's metrics from the whole batch's sums, per token and optimizer step."""
        n_upd = self.cfg.updates_per_batch
        metrics["update_weight/abs_mean"] = float(rows["weight_abs"].sum()) / (num_tokens * n_upd)
        sums = {k: float(v) for k, v in sums.items()}
        metrics["loss"] = sums["loss"] / n_upd
        if self.cfg.kl_coef > 0:
            metrics["kl"] = sums["kl"] / (num_tokens * n_upd)
        metrics["clip_ratio/low_mean"] = sums["low"] / (num_tokens * n_upd)
        metrics["clip_ratio/high_mean"] = sums["high"] / (num_tokens * n_upd)
        metrics["clip_ratio/region_mean"] = (sums["low"] + sums["high"]) / (num_tokens * n_upd)
        return metrics
