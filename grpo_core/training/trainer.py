"""The GRPO step: sample a group per question and reward it, weigh (CoDaPO, OC-GRPO), compute
advantages, take clipped policy-gradient steps, log. Trainer state lives here; each part lives
in its module (sampling, guidance, update, parallel, rollout_log), the math in
grpo_core.algorithms."""

from __future__ import annotations

from collections.abc import Callable

import torch

from grpo_core.algorithms.advantages import get_advantage, group_reward_std
from grpo_core.algorithms.codapo import (
    VALUE_FUNCTIONS,
    focused_batch,
    question_confidence,
    question_difficulty,
    select_questions,
    selects_on,
)
from grpo_core.algorithms.losses import masked_mean
from grpo_core.config.reward import RewardParams
from grpo_core.config.train import TrainParams
from grpo_core.rollout.backends import RolloutBackend
from grpo_core.rollout.rollouts import Rollouts
from grpo_core.rollout.scoring import score_rollouts
from grpo_core.training.batch import Question, Sampled
from grpo_core.training.guidance import OffContext, answer_tokens, guided_token_weights
from grpo_core.training.parallel import data_parallel
from grpo_core.training.rollout_log import log_rows, on_every_row, rollout_metrics
from grpo_core.training.sampling import GroupSampler, backend_token_weights
from grpo_core.training.update import PolicyUpdate


def mixed_accuracy(solved: torch.Tensor, group_size: int) -> torch.Tensor:
    """(num_groups,) bool: groups with both solved and failed completions, DAPO's informative
    groups (eq. 11: 0 < |{o_i correct}| < G; verl's `filter_groups.metric: acc`). By the
    verifier, not the shaped reward: the overlong punishment makes an all-correct group's
    rewards differ without giving it a right/wrong contrast."""
    correct = solved.view(-1, group_size).sum(dim=1)
    return (correct > 0) & (correct < group_size)


class GRPOTrainer:
    """One policy, in one process or data-parallel over several.

    `reference` is None when kl_coef is 0; with LoRA the reference is the policy with its
    adapters disabled (no second copy of the weights).

    `accelerator` (an `accelerate.Accelerator`, None for one process) trains data-parallel
    (parallel.py): N processes give one process's results up to float rounding, every group
    sampling from its own random stream (`sampling.stream_seed`).

    `backend` (None: the policy samples its own rollouts) samples the rollouts instead, its
    weights synced from the policy before each rollout batch (sampling.py).
    """

    def __init__(
        self,
        policy,
        tokenizer,
        cfg: TrainParams,
        reference=None,
        reward: RewardParams | None = None,
        accelerator=None,
        backend: RolloutBackend | None = None,
    ):
        self.parallel = data_parallel(accelerator)
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.reward = reward or RewardParams()
        self.advantage_fn = get_advantage(cfg.advantage)
        self.value_fn = VALUE_FUNCTIONS.get(cfg.codapo.value)
        if cfg.gradient_checkpointing:
            policy.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        params = [p for p in policy.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        warmup = cfg.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda n: min(1.0, (n + 1) / warmup) if warmup else 1.0
        )
        # `policy`: what the loss runs through (DDP / DeepSpeed's engine when wrapped);
        # `model`: the unwrapped policy (sampling, scoring, saving).
        self.policy, self.optimizer, self.model, self.reference = self.parallel.prepare(
            policy, optimizer, reference, cfg
        )
        self.sampler = GroupSampler(self.model, tokenizer, cfg, self.reward, backend)
        self.offcontext = OffContext(self.sampler, cfg) if cfg.oc_grpo.mode != "off" else None
        self.updater = PolicyUpdate(
            cfg,
            self.parallel,
            self.policy,
            self.model,
            self.optimizer,
            self.scheduler,
            self.reference,
        )
        # CoDaPO: the odd batch the last even step selected (`next_batch`, `queue_resampling`).
        self.resample_queue: list[Question] = []
        self.num_resampled = 0  # how many of the current batch's questions were resampled
        self.selects = True  # whether this step selects (CoDaPO: its index is even)
        self.num_selected = 0  # how many questions this step selected

    @property
    def is_main(self) -> bool:
        return self.parallel.is_main

    # ---- the step ---------------------------------------------------------------------
    def step(
        self, questions: list[Question], more: Callable[[int], list[Question]] | None = None
    ) -> tuple[dict[str, float], list[dict]]:
        """One RL step. Returns TRL-named metrics and one log row per question sampled.

        With `dynamic_sampling`, `more(n)` supplies further questions when too few groups are
        informative (reward std > 0); only informative groups, at most `prompts_per_step`,
        are trained on. The reward metrics cover everything that was sampled.
        """
        g = self.cfg.group_size
        # Sample G completions per question and reward them (OC-GRPO: guided rows sampled with
        # a hint in the prompt; dynamic sampling: refilled while too few groups are informative).
        # Under ZeRO-3 the weights are gathered once for all of it (every forward in it is
        # then local, however unevenly the processes share the work).
        with self.parallel.gathered():
            sampled, questions, rounds = self.sample(questions, more)
            ro, rewards = sampled.ro, sampled.rewards
            old_logp, entropy = self.score(ro)  # pi_old
        confidence = question_confidence(old_logp, ro.completion_mask, g)
        difficulty = question_difficulty(sampled.solved, g)
        metrics = rollout_metrics(sampled, rounds, g)
        # Weigh: CoDaPO's value on each question's advantages; OC-GRPO's importance weights on
        # guided rows' tokens, a rollout backend's truncated importance weights on sampled ones.
        values, adv_weights, codapo_metrics = self.codapo_values(confidence, difficulty)
        token_weights, weight_metrics = self.token_weights(sampled, old_logp, questions)
        metrics |= codapo_metrics | weight_metrics
        # Update on the trained groups (advantages, clipped policy gradient: update.py).
        trained, rows = self.trained_groups(rewards, sampled.solved)
        metrics |= self.update(
            ro if rows is None else ro.select(rows),
            _pick(rewards, rows),
            old_logp=_pick(old_logp, rows),
            entropy=_pick(entropy, rows),
            adv_weights=_pick(adv_weights, rows),
            token_weights=_pick(token_weights, rows),
        )
        metrics["entropy"] = float(masked_mean(entropy, ro.completion_mask))
        # CoDaPO: on even steps, select the questions of the next (odd) step's batch.
        self.queue_resampling(questions, values, difficulty)
        if self.cfg.codapo.enabled:
            metrics["codapo/selected_questions"] = float(self.num_selected)
        # Log one row per question sampled.
        advantages = self.advantage_fn(rewards, g, epsilon=self.cfg.adv_epsilon)
        if adv_weights is not None:
            advantages = advantages * adv_weights
        return metrics, log_rows(
            questions,
            sampled,
            g,
            old_logp=old_logp,
            confidence=confidence,
            difficulty=difficulty,
            values=values,
            advantages=advantages,
            trained=trained,
            row_stats=on_every_row(self.row_stats, rows, len(rewards)),
            num_resampled=self.num_resampled,
        )

    # ---- sampling ---------------------------------------------------------------------
    def next_batch(self, draw: Callable[[int], list[Question]], step: int) -> list[Question]:
        """Step `step`'s batch: `prompts_per_step` fresh questions from `draw`, except on
        CoDaPO's odd steps, whose batch is what the even step before selected (`focused_batch`:
        every selected question in blocks of `copies`, cycling until the batch is full). With
        `fresh_fill`, or when the guards left nothing selected, fresh draws fill the rest.

        The step's parity alone decides (`selects_on`), so a resumed run needs only the queue
        and the step index."""
        queue, self.resample_queue = self.resample_queue, []
        self.selects = selects_on(step)
        if self.selects:  # an even step trains a fresh batch
            queue = []
        self.num_resampled = len(queue)
        return queue + draw(self.cfg.prompts_per_step - len(queue))

    def sample(
        self, questions: list[Question], more: Callable[[int], list[Question]] | None = None
    ) -> tuple[Sampled, list[Question], int]:
        """`rollout` of `questions`; with `dynamic_sampling`, while fewer than
        `prompts_per_step` groups are informative, of `more(prompts_per_step)` questions too,
        for at most `max_sampling_rounds` rounds. The rollouts, their questions, the rounds."""
        cfg, g = self.cfg, self.cfg.group_size
        sampled = self.rollout(questions)
        rounds = 1
        if cfg.dynamic_sampling:
            parts = [sampled]
            while (
                more is not None
                and rounds < cfg.max_sampling_rounds
                and int(mixed_accuracy(sampled.solved, g).sum()) < cfg.prompts_per_step
            ):
                extra = more(cfg.prompts_per_step)
                parts.append(self.rollout(extra))
                questions = questions + extra
                rounds += 1
                sampled = Sampled.cat(parts, self.tokenizer.pad_token_id)
        return sampled, questions, rounds

    def rollout(self, questions: list[Question]) -> Sampled:
        """G rewarded completions per question; with OC-GRPO, guided rows sampled from hinted
        prompts (guidance.OffContext).

        Each group samples from its own generator, seeded from one draw of torch's global
        generator and the group's position. With several processes, each samples its block of
        the groups and every process returns the whole batch."""
        self.policy.eval()
        self.sampler.sync_backend()
        base = int(torch.randint(0, 2**62, (1,)))
        lo, hi = self.parallel.share(len(questions))
        sampled = None
        if hi > lo:
            mine = questions[lo:hi]
            if self.offcontext is not None:
                sampled = self.offcontext.rollout(mine, base, lo)
            else:
                gens = self.sampler.generators(base, range(lo, hi), 0)
                sampled = self.sampler.sample(mine, generators=gens)
        return self.sampler.gather(sampled, self.parallel)

    def score(self, ro: Rollouts) -> tuple[torch.Tensor, torch.Tensor]:
        """The rollout policy's token log-probs and entropies (pi_old: weights unchanged
        since sampling)."""
        self.policy.eval()
        return score_rollouts(self.model, ro, self.cfg.temperature, self.cfg.micro_batch_size)

    # ---- weights, trained groups, resampling ------------------------------------------
    def codapo_values(
        self, confidence: torch.Tensor, difficulty: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, dict[str, float]]:
        """CoDaPO: each question's value, the (B,) weights it puts on its rows' advantages
        (with `reweight`), and its metrics; Nones and no metrics otherwise."""
        codapo = self.cfg.codapo
        if not codapo.enabled:
            return None, None, {}
        values = self.value_fn(confidence, difficulty, codapo.offset)
        adv_weights = values.repeat_interleave(self.cfg.group_size) if codapo.reweight else None
        metrics = {
            "codapo/value_mean": values.mean().item(),
            "codapo/resampled_questions": float(self.num_resampled),
        }
        return values, adv_weights, metrics

    def token_weights(
        self, sampled: Sampled, old_logp: torch.Tensor, questions: list[Question]
    ) -> tuple[torch.Tensor | None, dict[str, float]]:
        """(B, T) weights on each token's advantage: OC-GRPO's importance weights on the tokens
        of guided rows, times a rollout backend's truncated importance weights; and their
        metrics (OC-GRPO's on the answer tokens of the solved guided rows among them)."""
        token_weights, metrics = None, {}
        if self.cfg.oc_grpo.mode != "off":
            g = self.cfg.group_size
            rows = torch.nonzero(sampled.guided_rows & sampled.solved).flatten().tolist()
            domains = [questions[b // g].domain for b in rows]
            answer = answer_tokens(self.tokenizer, sampled.ro, rows, domains)
            token_weights, metrics = guided_token_weights(sampled, old_logp, self.cfg, answer)
        token_weights, tis = backend_token_weights(sampled.ro, token_weights, self.cfg.tis_cap)
        return token_weights, metrics | tis

    def trained_groups(
        self, rewards: torch.Tensor, solved: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Which groups are in the loss (its denominators; `trained` in data/rollouts.parquet),
        and with dynamic sampling the rows of the first `prompts_per_step` informative ones,
        both solved and failed (`mixed_accuracy`, DAPO's rule). None: the update takes every
        row, and leaves out the uniform groups itself with filter_zero_std; without it they are
        in the loss, and update.py skips their forward and backward where that changes
        nothing."""
        cfg, g = self.cfg, self.cfg.group_size
        trained = torch.ones(len(rewards) // g, dtype=torch.bool, device=rewards.device)
        if cfg.filter_zero_std:
            trained = group_reward_std(rewards, g) > 0
        rows = None
        if cfg.dynamic_sampling:
            groups = torch.nonzero(mixed_accuracy(solved, g)).flatten()[: cfg.prompts_per_step]
            trained = torch.zeros_like(trained)
            trained[groups] = True
            if len(groups):
                rows = (groups.unsqueeze(1) * g + torch.arange(g, device=groups.device)).flatten()
        return trained, rows

    def queue_resampling(
        self, questions: list[Question], values: torch.Tensor | None, difficulty: torch.Tensor
    ) -> None:
        """CoDaPO, after an even step's update: select its questions (`select_questions`)
        and queue the odd step's batch made of them (`focused_batch`). Odd steps select
        nothing."""
        codapo = self.cfg.codapo
        self.num_selected = 0
        if codapo.enabled and codapo.resample and self.selects:
            chosen = select_questions(
                values,
                difficulty,
                codapo.quantile,
                learnable_only=codapo.learnable_only,
                skip_uniform=codapo.skip_uniform,
                best_first=codapo.best_first,
            )
            positions = focused_batch(
                [q.id for q in questions],
                chosen,
                codapo.copies,
                self.cfg.prompts_per_step,
                cycle=not codapo.fresh_fill,
            )
            self.resample_queue = [questions[i] for i in positions]
            self.num_selected = len(chosen)

    # ---- the update -------------------------------------------------------------------
    def update(
        self,
        ro: Rollouts,
        rewards: torch.Tensor,
        old_logp: torch.Tensor | None = None,
        entropy: torch.Tensor | None = None,
        adv_weights: torch.Tensor | None = None,
        token_weights: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """`updates_per_batch` optimizer steps on one rollout batch (update.py); returns step
        metrics, and keeps per row the update's `row_stats` and which rows this process
        trained (`trained_rows`).

        `old_logp` / `entropy` (B, T) are the rollout policy's, computed here when not given.
        """
        if old_logp is None or entropy is None:
            old_logp, entropy = self.score(ro)
        done = self.updater(ro, rewards, old_logp, entropy, adv_weights, token_weights)
        self.row_stats, self.trained_rows = done.row_stats, done.trained_rows
        return done.metrics

    # ---- state (resume) ---------------------------------------------------------------
    def state_dict(self) -> dict:
        """What a resumed run needs besides the weights: optimizer and scheduler state, and
        CoDaPO's queue (by question id; the schedule's phase is the parity of the step index,
        which `next_batch` is given). Under DeepSpeed the optimizer state is this process's
        ZeRO shard (`parallel.DeepSpeedZeRO.optimizer_extras`)."""
        state = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "resample_queue": [q.id for q in self.resample_queue],
            "num_resampled": self.num_resampled,
        }
        state.update(self.parallel.optimizer_extras())
        return state

    def load_state_dict(self, state: dict, questions: list[Question]) -> None:
        self.parallel.load_optimizer_state(self.optimizer, state)
        self.scheduler.load_state_dict(state["scheduler"])
        by_id = {q.id: q for q in questions}
        self.resample_queue = [by_id[i] for i in state["resample_queue"]]
        self.num_resampled = state["num_resampled"]


def _pick(x: torch.Tensor | None, rows: torch.Tensor | None) -> torch.Tensor | None:
    """`x`'s rows `rows` (None: all of them)."""
    return x if x is None or rows is None else x[rows]
