"""The GRPO loop: sample a group per question, score it, compute advantages, take clipped
policy-gradient steps. Trainer state lives here; the math lives in `advantages` and `losses`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from grpo_core.algorithms.advantages import get_advantage, group_reward_std
from grpo_core.algorithms.codapo import (
    VALUE_FUNCTIONS,
    question_confidence,
    question_difficulty,
    resampled_batch,
    select_for_resampling,
)
from grpo_core.algorithms.losses import KL_ESTIMATORS, POLICY_LOSSES, agg_loss, masked_mean
from grpo_core.algorithms.offcontext import guide_prefix, importance_weights
from grpo_core.analysis.difficulty import is_correct
from grpo_core.config.reward import RewardParams
from grpo_core.config.train import TrainParams
from grpo_core.errors import InputError
from grpo_core.rewards.verifiers import (
    format_reward,
    overlong_penalty,
    shaped_rewards,
    verify_batch,
)
from grpo_core.rollout.backends import RolloutBackend, truncated_is_weights
from grpo_core.rollout.sampler import (
    Rollouts,
    _sampler_key,
    concat_rollouts,
    generate,
    score_rollouts,
    token_logprobs,
)


@dataclass(frozen=True)
class Question:
    id: str
    domain: str
    level: int
    prompt: str
    answer: str
    solution: str = ""  # reference solution: OC-GRPO's guide prefixes come from it
    guide_fraction: float | None = None  # OC-GRPO fixed mode: from data/guides.parquet


@dataclass
class Sampled:
    """One step's rollouts: G rows per question, group by group."""

    ro: Rollouts
    rewards: torch.Tensor  # (B,) the training reward: weighted sum of the components
    components: dict[str, torch.Tensor]  # (B,) each: correct (the verifier's), format, overlong
    fractions: list[float | None]  # per group: the guide fraction, None if unguided
    num_rollouts: int  # completions generated, guided re-rolls included

    @property
    def solved(self) -> torch.Tensor:
        """(B,) bool: the completion solves its question (full verifier reward)."""
        return is_correct(self.components["correct"])

    def select(self, rows: list[int] | torch.Tensor, fractions: list[float | None]) -> Sampled:
        """The given rollout rows, regrouped: `fractions` holds the new groups' guide
        fractions."""
        rows = torch.as_tensor(rows, dtype=torch.long, device=self.rewards.device)
        return Sampled(
            self.ro.select(rows),
            self.rewards[rows],
            {k: v[rows] for k, v in self.components.items()},
            fractions,
            self.num_rollouts,
        )

    def to(self, device) -> Sampled:
        """The same rollouts with every tensor on `device`."""
        ro = self.ro
        moved = {
            f.name: getattr(ro, f.name).to(device)
            for f in dataclasses.fields(ro)
            if isinstance(getattr(ro, f.name), torch.Tensor)
        }
        return Sampled(
            dataclasses.replace(ro, **moved),
            self.rewards.to(device),
            {k: v.to(device) for k, v in self.components.items()},
            self.fractions,
            self.num_rollouts,
        )

    @staticmethod
    def cat(parts: list[Sampled], pad_id: int) -> Sampled:
        return Sampled(
            concat_rollouts([p.ro for p in parts], pad_id),
            torch.cat([p.rewards for p in parts]),
            {k: torch.cat([p.components[k] for p in parts]) for k in parts[0].components},
            [f for p in parts for f in p.fractions],
            sum(p.num_rollouts for p in parts),
        )


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

    def state_dict(self) -> dict:
        """Where the sampler is: its generator's state and what is left of the epoch."""
        return {
            "num_questions": self.num_questions,
            "rng": self.rng.bit_generator.state,
            "order": list(self.order),
        }

    def load_state_dict(self, state: dict) -> None:
        if state["num_questions"] != self.num_questions:
            raise ValueError(
                f"sampler state is for {state['num_questions']} questions, not {self.num_questions}"
            )
        self.rng.bit_generator.state = state["rng"]
        self.order = list(state["order"])


# `train.lora.target_modules` aliases, by the module names of Llama/Qwen/Mistral-style models.
LORA_TARGETS = {
    "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mlp": ["gate_proj", "up_proj", "down_proj"],
}


def lora_config(model, lora):
    """peft's LoraConfig for `train.lora` on `model`, with the aliases resolved and the module
    names and layer indices checked against the model (an InputError names the key)."""
    from peft import LoraConfig

    linear = sorted(
        {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    )
    targets = lora.target_modules
    if isinstance(targets, str):
        targets = LORA_TARGETS.get(targets, targets)
    if targets != "all-linear":
        missing = [t for t in targets if t not in linear]
        if missing:
            raise InputError(
                f"train.lora.target_modules={lora.target_modules!r}: the model has no linear "
                f"module named {missing}; its linear modules are {linear}"
            )
    layers = None
    if lora.layers is not None:
        num_layers = model.config.num_hidden_layers
        bad = [i for i in lora.layers if i >= num_layers]
        if bad:
            raise InputError(
                f"train.lora.layers={lora.layers}: the model has {num_layers} layers "
                f"(0..{num_layers - 1}); no layer {bad}"
            )
        layers = list(lora.layers)
        if targets == "all-linear":  # peft takes layers only with named targets
            head = model.get_output_embeddings()
            targets = [
                n.rsplit(".", 1)[-1]
                for n, m in model.named_modules()
                if isinstance(m, torch.nn.Linear) and m is not head and ".layers." in n
            ]
            targets = sorted(set(targets))
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        layers_to_transform=layers,
        layers_pattern="layers" if layers is not None else None,
        task_type="CAUSAL_LM",
    )


def add_lora(model, lora) -> torch.nn.Module:
    from peft import get_peft_model

    return get_peft_model(model, lora_config(model, lora))


def _stream_seed(base: int, group: int, round_: int) -> int:
    """The seed of one group's sampling stream: from the rollout call's base seed, the group's
    position in the call's questions and the round (0: unguided; r: OC-GRPO's r-th guided
    round). It does not depend on which process samples the group."""
    digest = hashlib.blake2b(f"{base}:{group}:{round_}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _share(n: int, rank: int, world: int) -> tuple[int, int]:
    """[lo, hi): rank's contiguous block of n items split as evenly as can be."""
    return rank * n // world, (rank + 1) * n // world


class GRPOTrainer:
    """One policy, in one process or data-parallel over several.

    `reference` is None when kl_coef is 0; with LoRA the reference is the policy with its
    adapters disabled (no second copy of the weights).

    `accelerator` (an `accelerate.Accelerator`, None for one process) trains data-parallel:
    every process holds the same full batch and takes every decision that depends on it
    (advantages, dynamic sampling, CoDaPO, OC-GRPO weights, metrics, the question queue)
    exactly as one process would; only the work is split, by whole groups: each process
    samples and rewards its block of a step's groups (then all gather the rows), and trains
    on its block of the trained groups, with the loss normalised by the whole batch's counts so
    that the averaged gradient is one process's. Each group samples from its own random
    stream (`_stream_seed`), so N processes give one process's results up to float rounding.
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
        self.accelerator = accelerator
        # None: the policy samples its own rollouts (grpo_core.rollout.sampler.generate, with
        # per-group
        # random streams). Otherwise a backend (`grpo_core.rollout.backends`: vLLM) samples them,
        # its
        # weights synced from the policy before each rollout batch, and the loss is corrected
        # for its log-probs differing from the policy's (truncated importance sampling).
        self.backend = backend
        self._synced = None  # the weights' `_sampler_key` at the backend's last sync
        self.world = accelerator.num_processes if accelerator is not None else 1
        self.rank = accelerator.process_index if accelerator is not None else 0
        self.model = policy  # the unwrapped policy: sampling, scoring, saving
        self.policy = policy  # what the loss runs through (DDP / DeepSpeed when wrapped)
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.reference = reference
        self.reward = reward or RewardParams()
        self.advantage_fn = get_advantage(cfg.advantage)
        self.kl_fn = KL_ESTIMATORS.get(cfg.kl_estimator)
        self.policy_loss = POLICY_LOSSES.get("clipped")
        self.value_fn = VALUE_FUNCTIONS.get(cfg.codapo.value)
        if cfg.gradient_checkpointing:
            policy.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        params = [p for p in policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        warmup = cfg.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda n: min(1.0, (n + 1) / warmup) if warmup else 1.0
        )
        # DeepSpeed (ZeRO): `self.policy` becomes its engine, which owns the optimizer step.
        self.deepspeed = accelerator is not None and accelerator.state.deepspeed_plugin is not None
        if accelerator is not None:
            if self.deepspeed:
                self._configure_deepspeed(accelerator.state.deepspeed_plugin.deepspeed_config)
            # The scheduler stays ours: accelerate's would step once per process. Under
            # DeepSpeed it still sets the lr of the AdamW param groups ZeRO steps with.
            self.policy, self.optimizer = accelerator.prepare(policy, self.optimizer)
            self.model = accelerator.unwrap_model(self.policy)
            if reference is not None:
                self.reference = reference.to(accelerator.device)
        # CoDaPO: questions chosen after the last update, to open the next mini-batch.
        self.resample_queue: list[Question] = []
        self.num_resampled = 0  # how many of the current batch's questions were resampled

    # ---- state (resume) ---------------------------------------------------------------
    def state_dict(self) -> dict:
        """What a resumed run needs besides the weights: optimizer and scheduler state, and
        CoDaPO's queue (by question id).

        Under DeepSpeed the optimizer state is this process's ZeRO shard (its partition of the
        Adam moments and of the fp32 master weights; DeepSpeed's own per-rank format, as
        `engine.save_checkpoint` writes it) with the engine's step counters: every process
        saves its own, and loads it back into an engine of the same world size and config."""
        state = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "resample_queue": [q.id for q in self.resample_queue],
            "num_resampled": self.num_resampled,
        }
        if self.deepspeed:
            engine = self.policy
            state["engine"] = {
                "global_steps": engine.global_steps,
                "global_samples": engine.global_samples,
                "skipped_steps": engine.skipped_steps,
            }
            state["rank"], state["world"] = self.rank, self.world
        return state

    def load_state_dict(self, state: dict, questions: list[Question]) -> None:
        if self.deepspeed:
            self._load_zero_state(state)
        else:
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        by_id = {q.id: q for q in questions}
        self.resample_queue = [by_id[i] for i in state["resample_queue"]]
        self.num_resampled = state["num_resampled"]

    def _load_zero_state(self, state: dict) -> None:
        """This process's ZeRO shard back into the engine, as `engine.load_checkpoint` does
        (the weights are already in: the engine was built from them). The fp32 master weights
        come from the shard (load_from_fp32_weights, DeepSpeed's default), not from the 16-bit
        weights, so a bf16 run continues exactly too."""
        if (state.get("rank"), state.get("world")) != (self.rank, self.world):
            raise ValueError(
                f"ZeRO optimizer state of process {state.get('rank')} of {state.get('world')}, "
                f"loaded into process {self.rank} of {self.world}"
            )
        engine = self.policy
        # A list by rank, as DeepSpeed reads its per-rank files: a shard saved by the same
        # world size (not elastic) is read from this process's entry only.
        shards: list[dict | None] = [None] * self.world
        shards[self.rank] = state["optimizer"]
        engine.optimizer.load_state_dict(
            shards,
            load_optimizer_states=True,
            load_from_fp32_weights=engine.zero_load_from_fp32_weights(),
        )
        for key, value in state["engine"].items():
            setattr(engine, key, value)

    # ---- batches ----------------------------------------------------------------------
    def next_batch(self, draw: Callable[[int], list[Question]]) -> list[Question]:
        """The next mini-batch: CoDaPO's resampled questions first, then fresh draws."""
        queue, self.resample_queue = self.resample_queue, []
        self.num_resampled = len(queue)
        return queue + draw(self.cfg.prompts_per_step - len(queue))

    # ---- rollouts ---------------------------------------------------------------------
    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _generators(self, base: int, groups, round_: int) -> list[torch.Generator]:
        device = self.model.device
        return [
            torch.Generator(device=device).manual_seed(_stream_seed(base, i, round_))
            for i in groups
        ]

    def _sample(
        self,
        questions: list[Question],
        prefixes: list[str] | None = None,
        n: int | None = None,
        generators: list[torch.Generator] | None = None,
    ) -> Sampled:
        n = n or self.cfg.group_size
        prompts = [q.prompt for q in questions]
        if self.backend is None:
            ro = generate(
                self.model,
                self.tokenizer,
                prompts,
                num_samples=n,
                temperature=self.cfg.temperature,
                max_new_tokens=self.cfg.max_new_tokens,
                prefixes=prefixes,
                generators=generators,
            )
        else:
            ro = self._backend_rollouts(prompts, n, prefixes)
        owners = [questions[i // n] for i in range(len(ro.texts))]
        domains, answers = [q.domain for q in owners], [q.answer for q in owners]
        device = ro.input_ids.device
        correct = verify_batch(domains, ro.texts, answers, self.reward.code)
        fmt = [format_reward(d, t, a) for d, t, a in zip(domains, ro.texts, answers, strict=True)]
        overlong = None
        if self.reward.weights.overlong:
            overlong = overlong_penalty(
                ro.lengths, self.cfg.max_new_tokens, self.reward.overlong_cache
            ).to(device)
        rewards, components = shaped_rewards(
            torch.tensor(correct, device=device),
            torch.tensor(fmt, device=device),
            overlong,
            self.reward.weights,
        )
        return Sampled(ro, rewards, components, [None] * len(questions), len(ro.texts))

    def _backend_rollouts(self, prompts: list[str], n: int, prefixes: list[str] | None) -> Rollouts:
        """Rollouts from `self.backend`, scored by the policy: pi_old is the policy's log-probs
        (what the ratio and CoDaPO's confidence read), and each completion token not given by a
        guide carries the truncated importance weight min(pi_old / q, tis_cap) of its sampler q
        (`backends.truncated_is_weights`); guide tokens keep 1: OC-GRPO weights them."""
        cfg = self.cfg
        ro = self.backend.generate(
            prompts, n, cfg.temperature, cfg.max_new_tokens, prefixes=prefixes
        )
        logp, entropy = score_rollouts(self.model, ro, cfg.temperature, cfg.micro_batch_size)
        sampled_tokens = ro.completion_mask.bool() & ~ro.guide_mask.bool()
        w = truncated_is_weights(logp, ro.sampler_logp, sampled_tokens, cfg.tis_cap)
        return dataclasses.replace(
            ro,
            sampler_logp=logp,
            sampler_entropy=entropy,
            sampler_key=_sampler_key(self.model, cfg.temperature),
            is_weight=torch.where(sampled_tokens, w, torch.ones_like(w)),
        )

    def rollout(self, questions: list[Question]) -> Sampled:
        """G completions per question; with OC-GRPO, groups that all fail are re-rolled from
        guided prompts and replaced by the guided groups.

        Each group samples from its own generator, seeded from one draw of torch's global
        generator and the group's position. With several processes, each samples its block of
        the groups and every process returns the whole batch."""
        self.policy.eval()
        if self.backend is not None:  # once per weight change, not per refill round
            key = _sampler_key(self.model, self.cfg.temperature)
            if key != self._synced:
                self.backend.sync_weights(self.model)
                self._synced = key
        base = int(torch.randint(0, 2**62, (1,)))
        lo, hi = _share(len(questions), self.rank, self.world)
        sampled = None
        if hi > lo:
            mine = questions[lo:hi]
            sampled = self._sample(mine, generators=self._generators(base, range(lo, hi), 0))
            if self.cfg.oc_grpo.mode != "off":
                sampled = self._guide_failed(mine, sampled, base, lo)
        if self.world == 1:
            return sampled
        return self._gather(sampled)

    def _gather(self, sampled: Sampled | None) -> Sampled:
        """Every process's rollouts, in rank order (its block of groups), on every process.
        Rows whose sampler log-probs were not recorded (guided ones) are scored first, on
        the process that sampled them, so no process scores the whole batch."""
        import torch.distributed as dist

        local = None
        if sampled is not None:
            ro = sampled.ro
            if ro.sampler_logp is None or ro.sampler_key != _sampler_key(
                self.model, self.cfg.temperature
            ):
                logp, entropy = score_rollouts(
                    self.model, ro, self.cfg.temperature, self.cfg.micro_batch_size
                )
                ro = dataclasses.replace(ro, sampler_logp=logp, sampler_entropy=entropy)
            # The key holds a weak reference to this process's model: it does not travel. A
            # placeholder, the same in every part, keeps the log-probs through the concatenation.
            ro = dataclasses.replace(ro, sampler_key=("gathered",))
            local = dataclasses.replace(sampled, ro=ro).to("cpu")
        parts: list[Sampled | None] = [None] * self.world
        dist.all_gather_object(parts, local)
        full = Sampled.cat([p for p in parts if p is not None], self.tokenizer.pad_token_id)
        full = full.to(self.accelerator.device)
        assert full.ro.sampler_logp is not None
        # Every row's log-probs are the current weights' (the same on every process).
        full.ro.sampler_key = _sampler_key(self.model, self.cfg.temperature)
        return full

    def _guide_failed(
        self, questions: list[Question], sampled: Sampled, base: int = 0, first: int = 0
    ) -> Sampled:
        """`first`: the position of questions[0] among the rollout call's questions (the
        groups' sampling streams are keyed by it)."""
        cfg, g = self.cfg.oc_grpo, self.cfg.group_size
        k = min(cfg.guided_rollouts or g, g)  # guided rollouts per re-rolled group
        solved = sampled.solved.view(-1, g).any(dim=1).tolist()
        pending = [i for i, ok in enumerate(solved) if not ok and questions[i].solution]
        if not pending:
            return sampled
        parts, chosen = [sampled], {}  # group -> (part, group within part, fraction)
        # fixed: one round at each question's own fraction (from data/guides.parquet), kept
        # whatever its rewards; then, for the groups with no measured fraction (not profiled,
        # or not unlocked by the guide stage) and in adaptive mode for all, the fractions in
        # turn until a rollout is correct.
        rounds = ([None] if cfg.mode == "fixed" else []) + list(cfg.fractions)
        for r, fraction in enumerate(rounds, start=1):
            todo = [(i, fraction or questions[i].guide_fraction) for i in pending]
            todo = [(i, f) for i, f in todo if f is not None]
            if not todo:  # fixed mode, no question with a measured fraction
                continue
            prefixes = [guide_prefix(questions[i].solution, f) for i, f in todo]
            gens = self._generators(base, [first + i for i, _ in todo], r)
            part = self._sample([questions[i] for i, _ in todo], prefixes, n=k, generators=gens)
            parts.append(part)
            part_solved = part.solved.view(-1, k).any(dim=1).tolist()
            for j, (i, f) in enumerate(todo):
                if fraction is None or part_solved[j]:
                    chosen[i] = (len(parts) - 1, j, f)
            pending = [i for i in pending if i not in chosen]
            if not pending:
                break
        if len(parts) == 1:
            return sampled
        offsets = [0]
        for part in parts[:-1]:
            offsets.append(offsets[-1] + len(part.rewards))
        # A re-rolled group keeps its first g - k unguided rollouts and takes k guided ones.
        rows, fractions_out = [], []
        for i in range(len(questions)):
            part, j, f = chosen.get(i, (0, i, None))
            if part == 0:
                rows.extend(range(i * g, (i + 1) * g))
            else:
                rows.extend(range(i * g, i * g + g - k))
                rows.extend(range(offsets[part] + j * k, offsets[part] + (j + 1) * k))
            fractions_out.append(f)
        return Sampled.cat(parts, self.tokenizer.pad_token_id).select(rows, fractions_out)

    # ---- the update -------------------------------------------------------------------
    def _reference_logprobs(self, ids, attn, prompt_len) -> torch.Tensor | None:
        if self.cfg.kl_coef == 0:
            return None
        if self.reference is not None:
            ctx, model = nullcontext(), self.reference
        else:  # LoRA: the base weights are the reference
            ctx, model = self.model.disable_adapter(), self.model
        with torch.no_grad(), ctx:
            logp, _ = token_logprobs(model, ids, attn, prompt_len, self.cfg.temperature)
        return logp

    def score(self, ro: Rollouts) -> tuple[torch.Tensor, torch.Tensor]:
        """The rollout policy's token log-probs and entropies (pi_old: weights unchanged
        since sampling)."""
        self.policy.eval()
        return score_rollouts(self.model, ro, self.cfg.temperature, self.cfg.micro_batch_size)

    def update(
        self,
        ro: Rollouts,
        rewards: torch.Tensor,
        old_logp: torch.Tensor | None = None,
        entropy: torch.Tensor | None = None,
        adv_weights: torch.Tensor | None = None,
        token_weights: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """`updates_per_batch` optimizer steps on one rollout batch; returns step metrics.

        `old_logp` / `entropy` (B, T) are the rollout policy's, computed here when not given.
        `adv_weights` (B,) scale each sequence's advantage (CoDaPO's value), `token_weights`
        (B, T) each token's (OC-GRPO's importance weight).
        """
        cfg = self.cfg
        if old_logp is None or entropy is None:
            old_logp, entropy = self.score(ro)
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
        metrics = {
            "loss": 0.0,
            "grad_norm": 0.0,
            "entropy": float(masked_mean(entropy, ro.completion_mask)),
            "frac_sequences_trained": keep.float().mean().item(),
        }
        # Per row of this batch, summed over its tokens and the optimizer steps: the
        # coefficient the loss put on grad log pi (|.|, signed), clipped tokens, tokens.
        zeros = torch.zeros(len(rewards), device=rewards.device)
        self.row_stats = {k: zeros.clone() for k in ("weight_abs", "weight", "clipped", "tokens")}
        self.trained_rows: list[int] = []  # rows of this batch this process trained
        if not keep.any():
            # Nothing to learn from (every group uniform): no optimizer step, but the same
            # metric keys, so every curve has a point at every step.
            ref_logp = self._reference_logprobs(ro.input_ids, ro.attention_mask, ro.prompt_len)
            if ref_logp is not None:
                kl = self.kl_fn(old_logp, ref_logp)
                metrics["kl"] = float(masked_mean(kl, ro.completion_mask))
            for name in ("low_mean", "high_mean", "region_mean"):
                metrics[f"clip_ratio/{name}"] = 0.0
            metrics["update_weight/abs_mean"] = 0.0
            return metrics

        # Keep the trained rows only, and only as many completion columns as they use.
        cmask = loss_mask[keep]
        width = int(cmask.sum(1).max())
        p = ro.prompt_len
        ids = ro.input_ids[keep][:, : p + width]
        attn = ro.attention_mask[keep][:, : p + width]
        cmask = cmask[:, :width]
        old = old_logp[keep][:, :width]
        adv = advantages[keep]
        if token_weights is not None:
            adv = adv.unsqueeze(1) * token_weights[keep][:, :width]
        # The whole batch's counts: every process divides by them.
        num_tokens = float(cmask.sum())
        num_seqs = float(len(adv))
        kept = torch.nonzero(keep).flatten()
        lo, hi = self._train_share(kept)
        self.trained_rows = kept[lo:hi].tolist()
        chunks = [
            slice(i, min(i + cfg.micro_batch_size, hi)) for i in range(lo, hi, cfg.micro_batch_size)
        ]
        ref_logps = [self._reference_logprobs(ids[c], attn[c], p) for c in chunks]

        # Running sums stay tensors on the device: no host sync inside the loop.
        sums = dict.fromkeys(("loss", "kl", "low", "high"), torch.zeros((), device=ids.device))
        rows = {k: torch.zeros(len(adv), device=ids.device) for k in self.row_stats}
        # Zero backward passes that only take part in the collectives: DDP's one all-reduce
        # for a process with no rows; under ZeRO, which reduces at every backward, as many as
        # make this process's count the largest one's.
        pad = self._padding_backwards(kept, len(chunks))
        self.policy.train()
        for _ in range(cfg.updates_per_batch):
            for k in range(pad):
                self._zero_backward(ids[:1], attn[:1], p, last=not chunks and k == pad - 1)
            for j, c in enumerate(chunks):
                m = cmask[c]
                last = j == len(chunks) - 1  # DDP all-reduces on it; DeepSpeed's boundary
                with self._no_sync() if not last else nullcontext():
                    logp, _ = token_logprobs(self.policy, ids[c], attn[c], p, cfg.temperature)
                    out = self.policy_loss(
                        logp, old[c], adv[c], cfg.clip_low, cfg.clip_high, cfg.dual_clip
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
                    self._backward(loss, last)
                sums["loss"] = sums["loss"] + loss.detach()
                sums["low"] = sums["low"] + (out.clipped_low & m.bool()).sum()
                sums["high"] = sums["high"] + (out.clipped_high & m.bool()).sum()
                with torch.no_grad():
                    weight = update_weights(out, adv[c], cfg.dual_clip) * m
                    rows["weight_abs"][c] += weight.abs().sum(1)
                    rows["weight"][c] += weight.sum(1)
                    rows["clipped"][c] += ((out.clipped_low | out.clipped_high) & m.bool()).sum(1)
                    rows["tokens"][c] += m.sum(1)
            if self.deepspeed:
                # The engine clips (gradient_clipping = max_grad_norm), steps and zeroes the
                # gradients; the norm is the one before clipping, as clip_grad_norm_'s.
                self.policy.step()
                grad_norm = self.policy.get_global_grad_norm()
            else:
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    [q for q in self.model.parameters() if q.requires_grad], cfg.max_grad_norm
                )
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
            self.scheduler.step()
            metrics["grad_norm"] += float(grad_norm) / cfg.updates_per_batch

        if self.world > 1:  # each process summed its own rows: add them up
            sums, rows = self._all_reduce_sum(sums), self._all_reduce_sum(rows)
        for k, v in rows.items():
            self.row_stats[k][kept] = v
        n_upd = cfg.updates_per_batch
        metrics["update_weight/abs_mean"] = float(rows["weight_abs"].sum()) / (num_tokens * n_upd)
        sums = {k: float(v) for k, v in sums.items()}
        metrics["loss"] = sums["loss"] / n_upd
        if cfg.kl_coef > 0:
            metrics["kl"] = sums["kl"] / (num_tokens * n_upd)
        metrics["clip_ratio/low_mean"] = sums["low"] / (num_tokens * n_upd)
        metrics["clip_ratio/high_mean"] = sums["high"] / (num_tokens * n_upd)
        metrics["clip_ratio/region_mean"] = (sums["low"] + sums["high"]) / (num_tokens * n_upd)
        return metrics

    # ---- data parallelism ---------------------------------------------------------------
    def _train_share(self, kept: torch.Tensor, rank: int | None = None) -> tuple[int, int]:
        """[lo, hi): the positions among the trained rows `kept` (row indices of the batch,
        increasing) that process `rank` (this one by default) trains: its contiguous block of
        their groups."""
        if self.world == 1:
            return 0, len(kept)
        groups = (kept // self.cfg.group_size).tolist()
        distinct = sorted(set(groups))
        rank = self.rank if rank is None else rank
        g_lo, g_hi = _share(len(distinct), rank, self.world)
        if g_lo == g_hi:
            return 0, 0
        first, last = distinct[g_lo], distinct[g_hi - 1]
        lo = groups.index(first)
        hi = len(groups) - groups[::-1].index(last)
        return lo, hi

    def _configure_deepspeed(self, ds_config: dict) -> None:
        """What the run's params decide in the DeepSpeed config, before the engine is built:
        clipping at train.max_grad_norm (the engine clips, not us), the micro-batch size (no
        dataloader to take it from), and no accumulation counting by the engine: the number
        of micro-batches per update varies (dynamic sampling, uneven shares), so `update`
        marks the last one itself and the engine must not divide the loss by a fixed count."""
        ds_config["gradient_clipping"] = self.cfg.max_grad_norm
        ds_config["gradient_accumulation_steps"] = 1
        ds_config["train_micro_batch_size_per_gpu"] = self.cfg.micro_batch_size
        ds_config.pop("train_batch_size", None)  # derived again from the two above

    def _padding_backwards(self, kept: torch.Tensor, n_chunks: int) -> int:
        """How many zero backward passes this process runs before its own `n_chunks` in each
        update. DDP all-reduces once, at the last backward: one for a process with no rows.
        ZeRO reduces gradients at every backward, so every process runs as many as the one
        with the most micro-batches (each process knows every share: no communication)."""
        if not self.deepspeed:
            return 0 if n_chunks else 1
        mbs = self.cfg.micro_batch_size
        most = 1
        for rank in range(self.world):
            lo, hi = self._train_share(kept, rank)
            most = max(most, -(-(hi - lo) // mbs))
        return most - n_chunks

    def _backward(self, loss: torch.Tensor, last: bool = True) -> None:
        """Backward of this process's part of the batch loss (normalised by the whole batch's
        counts). DDP and ZeRO average gradients over processes, hence the factor: the average
        of world x the parts is their sum, one process's gradient. `last`: the update's last
        backward (DeepSpeed's accumulation boundary; DDP's is `_no_sync`'s absence)."""
        if self.accelerator is None:
            loss.backward()
        elif self.deepspeed:
            # Not accelerator.backward: that would run the engine's optimizer step after every
            # backward outside an accumulate() block. `update` steps the engine once.
            self.policy.set_gradient_accumulation_boundary(last)
            self.policy.backward(loss * self.world)
        else:
            self.accelerator.backward(loss * self.world)

    def _zero_backward(self, ids, attn, prompt_len: int, last: bool = True) -> None:
        """A synced backward that adds nothing, for a process with no rows (or fewer
        micro-batches) to train: the collectives need every process."""
        logp, _ = token_logprobs(self.policy, ids, attn, prompt_len, self.cfg.temperature)
        self._backward(logp.sum() * 0.0, last)

    def _no_sync(self):
        if self.accelerator is None or self.deepspeed:  # ZeRO-2 reduces at every backward
            return nullcontext()
        return self.accelerator.no_sync(self.policy)

    def _all_reduce_sum(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        import torch.distributed as dist

        names = list(tensors)
        flat = torch.cat([tensors[k].detach().float().reshape(-1) for k in names])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        out, i = {}, 0
        for k in names:
            n = tensors[k].numel()
            out[k] = flat[i : i + n].reshape(tensors[k].shape)
            i += n
        return out

    def step(
        self, questions: list[Question], more: Callable[[int], list[Question]] | None = None
    ) -> tuple[dict[str, float], list[dict]]:
        """One RL step. Returns TRL-named metrics and one log row per question sampled.

        With `dynamic_sampling`, `more(n)` supplies further questions when too few groups are
        informative (reward std > 0); only informative groups, at most `prompts_per_step`,
        are trained on. The reward metrics cover everything that was sampled.
        """
        cfg, g = self.cfg, self.cfg.group_size
        sampled = self.rollout(questions)
        rounds = 1
        if cfg.dynamic_sampling:
            parts = [sampled]
            while (
                more is not None
                and rounds < cfg.max_sampling_rounds
                and int((group_reward_std(sampled.rewards, g) > 0).sum()) < cfg.prompts_per_step
            ):
                extra = more(cfg.prompts_per_step)
                parts.append(self.rollout(extra))
                questions = questions + extra
                rounds += 1
                sampled = Sampled.cat(parts, self.tokenizer.pad_token_id)
        ro, rewards = sampled.ro, sampled.rewards
        old_logp, entropy = self.score(ro)
        correct = sampled.solved
        confidence = question_confidence(old_logp, ro.completion_mask, g)
        difficulty = question_difficulty(correct, g)
        metrics = rollout_metrics(ro, rewards, g)
        for name, values in sampled.components.items():
            metrics[f"rewards/{name}/mean"] = values.mean().item()
            metrics[f"rewards/{name}/std"] = values.std().item() if len(values) > 1 else 0.0
        metrics["sampling_rounds"] = float(rounds)
        metrics["num_rollouts"] = float(sampled.num_rollouts)

        values = adv_weights = token_weights = None
        if cfg.codapo.enabled:
            values = self.value_fn(confidence, difficulty, cfg.codapo.offset)
            if cfg.codapo.reweight:
                adv_weights = values.repeat_interleave(g)
            metrics["codapo/value_mean"] = values.mean().item()
            metrics["codapo/resampled_questions"] = float(self.num_resampled)
        guided = torch.tensor([f is not None for f in sampled.fractions], device=rewards.device)
        if cfg.oc_grpo.mode != "off":
            oc = cfg.oc_grpo
            weights = importance_weights(old_logp, ro.guide_mask, oc.gamma, oc.c_min, oc.c_max)
            guided_rows = ro.guide_mask.bool().any(dim=1, keepdim=True)
            if oc.correction == "importance" and guided.any():
                token_weights = torch.where(guided_rows, weights, torch.ones_like(weights))
            prefix = ro.guide_mask.bool() & ro.completion_mask.bool()
            metrics["oc/guided_groups"] = float(guided.sum())
            metrics["oc/guided_solved"] = (
                float((correct.view(-1, g).any(dim=1) & guided).sum() / guided.sum())
                if guided.any()
                else 0.0
            )
            metrics["oc/prefix_weight_mean"] = (
                float(weights[prefix].mean()) if prefix.any() else 1.0
            )

        if ro.is_weight is not None:  # a backend sampled: truncated importance weights
            token_weights = ro.is_weight if token_weights is None else token_weights * ro.is_weight
            sampled_tokens = ro.completion_mask.bool() & ~ro.guide_mask.bool()
            if sampled_tokens.any():
                w = ro.is_weight[sampled_tokens]
                metrics["tis/weight_mean"] = float(w.mean())
                metrics["tis/capped_frac"] = float((w >= cfg.tis_cap).float().mean())

        trained = torch.ones(len(questions), dtype=torch.bool, device=rewards.device)
        if cfg.filter_zero_std or cfg.dynamic_sampling:
            trained = group_reward_std(rewards, g) > 0
        rows = None
        if cfg.dynamic_sampling:
            groups = torch.nonzero(trained).flatten()[: cfg.prompts_per_step]
            trained = torch.zeros_like(trained)
            trained[groups] = True
            if len(groups):
                rows = (groups.unsqueeze(1) * g + torch.arange(g, device=groups.device)).flatten()

        def pick(x):
            return x if x is None or rows is None else x[rows]

        train_ro = ro if rows is None else ro.select(rows)
        metrics.update(
            self.update(
                train_ro,
                pick(rewards),
                old_logp=pick(old_logp),
                entropy=pick(entropy),
                adv_weights=pick(adv_weights),
                token_weights=pick(token_weights),
            )
        )
        metrics["entropy"] = float(masked_mean(entropy, ro.completion_mask))
        row_stats = self.row_stats
        if rows is not None:  # back onto every sampled row; the untrained ones stay 0
            row_stats = {}
            for k, v in self.row_stats.items():
                row_stats[k] = torch.zeros(len(rewards), device=v.device)
                row_stats[k][rows] = v

        resample = cfg.codapo.enabled and cfg.codapo.resample
        if resample and not (cfg.codapo.alternate and self.num_resampled):
            chosen = select_for_resampling(values, difficulty, cfg.codapo.quantile)
            positions = resampled_batch(
                [q.id for q in questions], chosen, cfg.codapo.copies, cfg.prompts_per_step
            )
            self.resample_queue = [questions[i] for i in positions]

        advantages = self.advantage_fn(rewards, g, epsilon=cfg.adv_epsilon)
        if adv_weights is not None:
            advantages = advantages * adv_weights
        return metrics, self._log_rows(
            questions,
            sampled,
            old_logp,
            confidence,
            difficulty,
            values,
            advantages,
            trained,
            row_stats,
        )

    def _log_rows(
        self,
        questions,
        sampled,
        old_logp,
        confidence,
        difficulty,
        values,
        advantages,
        trained,
        row_stats,
    ) -> list[dict]:
        g, ro = self.cfg.group_size, sampled.ro
        grouped = sampled.rewards.view(-1, g)
        mean, std = grouped.mean(dim=1).tolist(), grouped.std(dim=1).tolist()
        length = ro.lengths.float().view(-1, g).mean(dim=1).tolist()
        seq_logp = masked_mean(old_logp, ro.completion_mask, dim=1).view(-1, g)
        correct = sampled.solved.view(-1, g)
        n_correct = correct.sum(dim=1)
        logp_correct = ((seq_logp * correct).sum(dim=1) / n_correct.clamp(min=1)).tolist()
        logp_wrong = ((seq_logp * ~correct).sum(dim=1) / (g - n_correct).clamp(min=1)).tolist()
        adv_abs = advantages.abs().view(-1, g).mean(dim=1).tolist()
        conf, diff = confidence.tolist(), difficulty.tolist()
        vals = values.tolist() if values is not None else [None] * len(questions)
        n_correct, trained = n_correct.tolist(), trained.tolist()
        group = {k: v.view(-1, g).sum(dim=1) for k, v in row_stats.items()}
        tokens = group["tokens"].tolist()
        per_token = {
            k: (group[k] / group["tokens"].clamp(min=1)).tolist()
            for k in ("weight_abs", "weight", "clipped")
        }
        return [
            {
                "id": q.id,
                "level": q.level,
                "reward_mean": mean[i],
                "reward_std": std[i],
                "mean_length": length[i],
                "confidence": conf[i],
                "difficulty": diff[i],
                "value": vals[i],
                "adv_abs_mean": adv_abs[i],
                "logp_correct": logp_correct[i] if n_correct[i] else None,
                "logp_incorrect": logp_wrong[i] if n_correct[i] < g else None,
                "guided": sampled.fractions[i] is not None,
                "guide_fraction": sampled.fractions[i],
                "resampled": i < self.num_resampled,
                "trained": trained[i],
                "update_weight_abs": per_token["weight_abs"][i] if tokens[i] else None,
                "update_weight_mean": per_token["weight"][i] if tokens[i] else None,
                "clip_frac": per_token["clipped"][i] if tokens[i] else None,
            }
            for i, q in enumerate(questions)
        ]


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
    sampler: QuestionSampler | None = None,
    start: int = 0,
) -> None:
    """The RL loop: steps `start`..`steps - 1` of `prompts_per_step` questions each, with a
    progress bar. A resumed run passes the sampler and the trainer as they were after step
    `start - 1`; every step seeds its own sampling, so it continues exactly where it stopped."""
    sampler = sampler or QuestionSampler(len(questions), seed)
    bar = tqdm(
        range(start, steps),
        desc="grpo",
        unit="step",
        initial=start,
        total=steps,
        disable=not trainer.is_main,
    )
    for step in bar:
        torch.manual_seed(seed * 100_003 + step)  # each step's sampling is reproducible alone

        def draw(n: int) -> list[Question]:
            return [questions[i] for i in sampler.next(n)]

        metrics, rows = trainer.step(trainer.next_batch(draw), more=draw)
        bar.set_postfix(reward=f"{metrics['reward']:.3f}", entropy=f"{metrics['entropy']:.3f}")
        if on_step is not None:
            on_step(step, metrics, rows)
