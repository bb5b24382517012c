"""A step's groups, sampled and rewarded: G completions per question, from the policy (each
group from its own random stream, whichever process samples it) or from a rollout backend
(vLLM: its weights synced from the policy, its tokens weighted by truncated importance
sampling), scored by the verifiers and shaped into the training reward."""

from __future__ import annotations

import dataclasses
import hashlib

import torch

from grpo_core.config.reward import RewardParams
from grpo_core.config.train import TrainParams
from grpo_core.config.user_reward import resolve
from grpo_core.rewards.shaping import Completions, shaped_rewards
from grpo_core.rewards.verify import verify_batch
from grpo_core.rollout.backends import RolloutBackend, truncated_is_weights
from grpo_core.rollout.rollouts import Rollouts
from grpo_core.rollout.sampler import _sampler_key, generate
from grpo_core.rollout.scoring import score_rollouts
from grpo_core.training.batch import Question, Sampled
from grpo_core.training.parallel import SingleProcess


def stream_seed(base: int, group: int, round_: int) -> int:
    """The seed of one group's sampling stream: from the rollout call's base seed, the group's
    position in the call's questions and the round (0: unguided; r: OC-GRPO's r-th guided
    round). It does not depend on which process samples the group."""
    digest = hashlib.blake2b(f"{base}:{group}:{round_}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class GroupSampler:
    """Samples and rewards groups with `model` (the unwrapped policy).

    `backend` None: the policy samples its own rollouts (grpo_core.rollout.sampler.generate,
    with per-group random streams). Otherwise a backend (`grpo_core.rollout.backends`: vLLM, or
    the merged-LoRA copy, which takes the same per-group streams) samples them, its weights
    synced from the policy before each rollout batch, and the loss is corrected for its
    log-probs differing from the policy's (truncated importance sampling)."""

    def __init__(
        self,
        model,
        tokenizer,
        cfg: TrainParams,
        reward: RewardParams,
        backend: RolloutBackend | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.reward = reward
        self.backend = backend
        self.function = resolve(reward.function)  # a user's reward.function, or None
        self._synced = None  # the weights' `_sampler_key` at the backend's last sync

    def sync_backend(self) -> None:
        """The backend's weights from the policy's, once per weight change (not per dynamic
        sampling refill round)."""
        if self.backend is not None:
            key = _sampler_key(self.model, self.cfg.temperature)
            if key != self._synced:
                self.backend.sync_weights(self.model)
                self._synced = key

    def eval_model(self, policy):
        """What held-out evaluation decodes with: the merged-LoRA copy (synced now, so the next
        rollout batch's sync is free), which decodes with one matmul per layer where the
        adapters take three; otherwise `policy`. vLLM's engine is not a torch model: `policy`
        then."""
        copy = getattr(self.backend, "model", None)
        if not isinstance(copy, torch.nn.Module):
            return policy
        self.sync_backend()
        return copy

    def generators(self, base: int, groups, round_: int) -> list[torch.Generator]:
        """One seeded generator per group (`stream_seed`)."""
        device = self.model.device
        return [
            torch.Generator(device=device).manual_seed(stream_seed(base, i, round_)) for i in groups
        ]

    def sample(
        self,
        questions: list[Question],
        n: int | None = None,
        generators: list[torch.Generator] | None = None,
        contexts: list[str] | None = None,
        reward_prefixes: list[str] | None = None,
    ) -> Sampled:
        """`n` (G by default) rewarded completions per question, sampled from its prompt or
        from `contexts` (one prompt per question: OC-GRPO's guided ones). `reward_prefixes`
        (one per question) are prepended to each completion's text before it is rewarded
        (PrefixRL rewards the prefix it was given and the continuation together)."""
        n = n or self.cfg.group_size
        prompts = contexts if contexts is not None else [q.prompt for q in questions]
        if self.backend is None:
            ro = generate(
                self.model,
                self.tokenizer,
                prompts,
                num_samples=n,
                temperature=self.cfg.temperature,
                max_new_tokens=self.cfg.max_new_tokens,
                generators=generators,
                draw=self.cfg.draw,
                compact=self.cfg.compact,
            )
        else:
            ro = self._backend_rollouts(prompts, n, generators)
        return self.reward_rollouts(questions, ro, n, reward_prefixes)

    def reward_rollouts(
        self,
        questions: list[Question],
        ro: Rollouts,
        n: int,
        reward_prefixes: list[str] | None = None,
    ) -> Sampled:
        """The verifier's reward of each completion (`correct`), its shaping terms (format,
        overlong, `rewards.shaping.SHAPING_TERMS`) and their weighted sum (reward.weights);
        each text after its question's `reward_prefixes` entry, if any."""
        owners = [questions[i // n] for i in range(len(ro.texts))]
        domains, answers = [q.domain for q in owners], [q.answer for q in owners]
        texts = ro.texts
        if reward_prefixes is not None:
            texts = [reward_prefixes[i // n] + t for i, t in enumerate(ro.texts)]
        device = ro.input_ids.device
        correct = verify_batch(domains, texts, answers, self.reward.code, self.function)
        completions = Completions(
            domains,
            texts,
            answers,
            ro.lengths,
            self.cfg.max_new_tokens,
            self.reward.overlong_cache,
            prompts=[q.text for q in owners],
        )
        rewards, components = shaped_rewards(
            torch.tensor(correct, device=device), completions, self.reward.weights
        )
        return Sampled(ro, rewards, components, [None] * len(questions), len(ro.texts))

    def _backend_rollouts(
        self, prompts: list[str], n: int, generators: list[torch.Generator] | None = None
    ) -> Rollouts:
        """Rollouts from `self.backend`, scored by the policy: pi_old is the policy's log-probs
        (what the ratio and CoDaPO's confidence read), and each completion token carries the
        truncated importance weight min(pi_old / q, tis_cap) of its sampler q
        (`backends.truncated_is_weights`)."""
        cfg = self.cfg
        ro = self.backend.generate(
            prompts, n, cfg.temperature, cfg.max_new_tokens, generators=generators
        )
        logp, entropy = score_rollouts(self.model, ro, cfg.temperature, cfg.micro_batch_size)
        sampled_tokens = ro.completion_mask.bool()
        w = truncated_is_weights(logp, ro.sampler_logp, sampled_tokens, cfg.tis_cap)
        return dataclasses.replace(
            ro,
            sampler_logp=logp,
            sampler_entropy=entropy,
            sampler_key=_sampler_key(self.model, cfg.temperature),
            is_weight=torch.where(sampled_tokens, w, torch.ones_like(w)),
        )

    def gather(self, sampled: Sampled | None, parallel: SingleProcess) -> Sampled:
        """Every process's rollouts, in rank order (its block of groups), on every process.
        Rows whose sampler log-probs were not recorded are scored first, on
        the process that sampled them, so no process scores the whole batch."""
        if parallel.world == 1:
            return sampled
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
        full = parallel.gather(local, self.tokenizer.pad_token_id)
        assert full.ro.sampler_logp is not None
        # Every row's log-probs are the current weights' (the same on every process).
        full.ro.sampler_key = _sampler_key(self.model, self.cfg.temperature)
        return full


def backend_token_weights(
    ro: Rollouts, token_weights: torch.Tensor | None, tis_cap: float
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """The token weights times a backend's truncated importance weights (when a backend
    sampled), and their metrics."""
    metrics: dict[str, float] = {}
    if ro.is_weight is not None:
        token_weights = ro.is_weight if token_weights is None else token_weights * ro.is_weight
        sampled_tokens = ro.completion_mask.bool()
        if sampled_tokens.any():
            w = ro.is_weight[sampled_tokens]
            metrics["tis/weight_mean"] = float(w.mean())
            metrics["tis/capped_frac"] = float((w >= tis_cap).float().mean())
    return token_weights, metrics
