"""`train` stage params: the `train` section (the RL loop; its `codapo`, `oc_grpo` and `lora`
subsections), with the `algo` preset applied, plus `reward` and `launch`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from grpo_core.algorithms.presets import ALGOS, apply_preset, apply_reward_preset
from grpo_core.config.core import (
    Draw,
    Dtype,
    Fractions,
    PositiveFloat,
    PositiveInt,
    Section,
    Seed,
    StageParams,
)
from grpo_core.config.launch import Launch
from grpo_core.config.reward import RewardParams
from grpo_core.config.runtime import Numerics, Threads
from grpo_core.config.selection import TrainSelection


class HeldoutParams(Section):
    """Held-out accuracy during training (TRL's `eval_steps`, verl's `test_freq`): a fixed
    sample of the eval split, answered greedily by the policy, logged beside the reward."""

    every: Annotated[int, Field(ge=0)] = Field(
        0,
        description="Every this many steps, and after the last, the policy answers the sample "
        "greedily (one completion each, up to train.max_new_tokens) and the step logs "
        "heldout/accuracy (the verifier's, or reward.function's, mean) and heldout/level<k>; "
        "0: never. It draws no random numbers, so the run trains as it would without it.",
    )
    questions: PositiveInt = Field(
        64,
        description="Size of the sample: the eval split's first questions of each source and "
        "level in turn, the same at every evaluation and in every run on that split.",
    )


class LoraParams(Section):
    """Optional LoRA adapters (peft). The KL reference is then the model with adapters off."""

    enabled: bool = Field(False, description="Train adapters instead of every weight.")
    r: PositiveInt = Field(8, description="Rank of each adapter.")
    alpha: PositiveFloat = Field(16.0, description="Scale: the update is alpha / r x B A.")
    dropout: Annotated[float, Field(ge=0, lt=1)] = Field(
        0.0, description="Dropout on the adapters' input."
    )
    target_modules: (
        Literal["all-linear", "attention", "mlp"] | Annotated[list[str], Field(min_length=1)]
    ) = Field(
        "all-linear",
        description="Which linear layers get adapters: all-linear (every linear layer but the "
        "output head), attention (q/k/v/o projections), mlp (gate/up/down projections), or a "
        "list of module names (e.g. [q_proj, v_proj]).",
    )
    layers: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)] | None = Field(
        None,
        description="Decoder layers that get adapters, as a list ([0, 2]) or an inclusive "
        "range '0-1'; null: every layer.",
    )

    @field_validator("layers", mode="before")
    @classmethod
    def _layer_range(cls, value: object) -> object:
        if isinstance(value, str):
            first, sep, last = value.partition("-")
            if not (sep and first.strip().isdigit() and last.strip().isdigit()):
                raise ValueError(f"{value!r}: expected a list of layer indices or a range 'a-b'")
            if int(first) > int(last):
                raise ValueError(f"{value!r}: the range is empty")
            return list(range(int(first), int(last) + 1))
        if isinstance(value, int):
            return [value]
        return value


class CodapoParams(Section):
    """CoDaPO: a per-question value from rollout confidence and empirical difficulty scales
    the question's advantages, and steps alternate: an even step (0, 2, ...) trains a fresh
    batch and selects its high-value questions, the odd step after it trains a batch made only
    of them (the reference, tmlr-group/CoDaPO). The guards below change that rule; all off by
    default."""

    enabled: bool = Field(False, description="Set by `algo: codapo`; null in params.yaml.")
    value: Literal["confidence_difficulty", "difficulty", "confidence"] = Field(
        "confidence_difficulty",
        description="Value function (grpo_core.algorithms.codapo.VALUE_FUNCTIONS): "
        "confidence_difficulty = c * 4d(1-d) + offset (CoDaPO); difficulty = 4d(1-d) + "
        "offset; confidence = c + offset. c = exp(mean token log-prob of the group), "
        "d = 1 - group accuracy.",
    )
    offset: Annotated[float, Field(ge=0)] = Field(
        0.1, description="Added to every value, so no question's advantages vanish entirely."
    )
    reweight: bool = Field(
        True, description="Multiply each question's advantages by its value (every step)."
    )
    resample: bool = Field(
        True,
        description="The alternating schedule: after each even step's update select questions, "
        "and train the odd step on a batch of them. false: every step a fresh batch (the "
        "value weighting alone).",
    )
    quantile: Annotated[float, Field(ge=0, le=1)] = Field(
        0.75,
        description="An even step selects the questions whose value is at or above this "
        "quantile of the batch's values (linear interpolation), in batch order, whatever their "
        "difficulty: when most of the batch is always solved the quantile is the offset and "
        "those are selected too; when all values are equal, all are.",
    )
    copies: PositiveInt = Field(
        4,
        description="The odd batch cycles through the selected questions in blocks of this "
        "many groups (fresh rollouts each) until prompts_per_step: 4 selected of 16 give 4 "
        "each, 2 give 8 each, and beyond prompts_per_step / copies selected the last get none "
        "(the reference's repeat_count). With fresh_fill: the groups per selected question.",
    )
    learnable_only: bool = Field(
        False,
        description="Guard: select only learnable questions (0 < group accuracy < 1); an "
        "always- or never-solved group carries no gradient, whatever its value.",
    )
    skip_uniform: bool = Field(
        False,
        description="Guard: select nothing when all of the batch's values are equal (no "
        "question stands out); the odd step then trains a fresh batch.",
    )
    best_first: bool = Field(
        False,
        description="Guard: order the selected questions by value, highest first, instead of "
        "batch order, so a full odd batch holds the best ones rather than the first ones.",
    )
    fresh_fill: bool = Field(
        False,
        description="Guard: the odd batch gives each selected question `copies` groups once "
        "(no cycling) and fills the rest of prompts_per_step with fresh questions, so the run "
        "keeps seeing new questions on odd steps.",
    )


class OffContextParams(Section):
    """Off-Context GRPO (Agrawal et al.; reference AgPriyank/OC-GRPO): rollouts sampled with a
    prefix of the reference solution in the prompt, trained on the prompt without it
    (grpo_core.training.guidance)."""

    mode: Literal["off", "adaptive", "fixed"] = Field(
        "off",
        description="Set by `algo: oc_grpo` (fixed); null in params.yaml. fixed: every question "
        "the guide stage unlocked (data/guides.parquet) has a guided twin in the pool, sampled "
        "from its hinted prompt at that fraction as a group of its own; adaptive: a group whose "
        "rollouts all fail is re-rolled at each of `fractions` in turn, and the first fraction "
        "with a correct rollout replaces it.",
    )
    fractions: Fractions = Field(
        default=[0.2, 0.4, 0.6, 0.8, 1.0],
        description="Hint fractions the adaptive mode tries in order (of the solution's "
        "characters, cut back to a word boundary).",
    )
    guided_rollouts: PositiveInt | None = Field(
        None,
        description="Adaptive mode: how many of a failed group's G rollouts the guided ones "
        "replace; null replaces all G (the reference). Fewer keep unguided failures in the "
        "group, so a hint that makes every guided rollout correct still leaves a reward "
        "contrast (our option).",
    )
    correction: Literal["importance", "none", "hinted", "prefix_rl"] = Field(
        "importance",
        description="How guided rows are trained. importance (the paper): under the unguided "
        "prompt, each token's advantage weighted by clamp(exp(gamma (log pi_old(y_t|x) - "
        "log pi_old(y_t|x~))), floor, cap); none: under the unguided prompt, unweighted; "
        "hinted: under the hinted prompt itself, unweighted; prefix_rl: the prefix placed after "
        "the prompt (the assistant turn), only the continuation trained, prefix + continuation "
        "rewarded.",
    )
    gamma: Annotated[float, Field(ge=0)] = Field(
        1.0, description="Exponent on the weight (gamma in exp(-diff)^gamma)."
    )
    floor: Annotated[float, Field(ge=0)] = Field(
        0.01, description="Lower clamp of the weight (0.01 in all the reference's runs)."
    )
    cap: PositiveFloat = Field(1.0, description="Upper clamp of the weight.")

    @model_validator(mode="after")
    def _consistent(self) -> OffContextParams:
        if self.floor > self.cap:
            raise ValueError(f"floor ({self.floor}) must not exceed cap ({self.cap})")
        if self.guided_rollouts is not None and self.mode == "fixed":
            raise ValueError(
                "guided_rollouts applies to mode adaptive; fixed mode's guided rows are whole "
                "groups of their own"
            )
        return self


class TrainParams(TrainSelection):
    """`train` stage: the RL loop."""

    seed: Seed | None = Field(
        None,
        description="Seed of the training run alone: question order, rollout sampling, LoRA "
        "and other initialisation; null: the top-level `seed`. A sweep over it (dvc exp run "
        "--queue -S train.seed=0,1,2) retrains from the same data, base, profile and guides, "
        "all taken from the cache.",
    )
    curriculum: Literal["all", "learnable", "easy", "hard", "unsolved"] = Field(
        "all",
        description="Which of those questions to train on, by the base model's pass rate p in "
        "data/profile.parquet: all; learnable (0 < p < 1); easy (0.5 <= p < 1); hard "
        "(0 < p < 0.5); unsolved (p = 0). Anything but `all` uses profiled questions only.",
    )
    steps: PositiveInt = Field(40, description="RL steps (one rollout batch each).")
    max_rollouts: PositiveInt | None = Field(
        None,
        description="Stop after the step at which the rollouts sampled so far (every "
        "completion, resampled and guided ones included) reach this many; `steps` stays the "
        "most steps. Compares methods whose steps cost different numbers of rollouts (dynamic "
        "sampling, OC-GRPO's adaptive cascade) at an equal budget; null: run all `steps`.",
    )
    prompts_per_step: PositiveInt = Field(64, description="Questions per rollout batch.")
    group_size: Annotated[int, Field(ge=2)] = Field(
        8, description="Completions per question (G); group statistics need at least 2."
    )
    temperature: PositiveFloat = Field(1.0, description="Sampling temperature of rollouts.")
    max_new_tokens: PositiveInt = Field(
        72,
        description="Most tokens of a rollout; one cut there scores 0 unless a shaping term "
        "says otherwise (DAPO's overlong penalty), and counts in completions/clipped_ratio.",
    )
    lr: PositiveFloat = Field(7e-5, description="AdamW's learning rate, after the warmup.")
    warmup_steps: Annotated[int, Field(ge=0)] = Field(
        5,
        description="Linear learning-rate warmup, in optimizer steps; constant afterwards. "
        "Adam's first steps are sign-like, so a short warmup keeps them from jolting the policy.",
    )
    weight_decay: Annotated[float, Field(ge=0)] = Field(0.0, description="AdamW's weight decay.")
    max_grad_norm: PositiveFloat = Field(
        1.0, description="Clip the gradient's global norm to this before each optimizer step."
    )
    dtype: Dtype = "float32"
    draw: Draw = "multinomial"
    compact: bool = Field(
        False,
        description="Finished completions leave the rollout batch (and the held-out "
        "evaluation's) instead of being decoded to the longest one's end: faster where "
        "lengths vary. The same random numbers, but each row's logits move by float rounding "
        "(computed beside fewer rows): other completions from the same distribution, as "
        "`eval.compact` says. Off by default.",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute each block's activations in the backward pass instead of "
        "keeping them: less memory for real models at about a third more compute.",
    )
    rollout_backend: Literal["hf", "hf_merged", "vllm"] = Field(
        "hf",
        description="Who samples the rollouts: hf (the training model itself, with a KV cache), "
        "hf_merged (with LoRA: a copy of the policy with its adapters merged into its weights, "
        "synced after every optimizer step; a fifth less generation time on SmolLM2 on a CPU) "
        "or vllm (a vLLM engine colocated in each training process, weights synced from the "
        "policy before every rollout batch; needs `pip install .[vllm]` and a GPU).",
    )
    vllm_gpu_memory_utilization: Annotated[float, Field(gt=0, lt=1)] = Field(
        0.3, description="With rollout_backend=vllm: the share of GPU memory the engine takes."
    )
    tis_cap: PositiveFloat = Field(
        2.0,
        description="With rollout_backend=vllm or hf_merged: truncated importance sampling for "
        "the sampler/trainer mismatch; each token's advantage is weighted by "
        "min(pi_old / q_sampler, tis_cap) (TRL's vllm_importance_sampling_cap, verl's TIS).",
    )
    updates_per_batch: PositiveInt = Field(
        2,
        description="Optimizer steps on each rollout batch (TRL's num_iterations). Above 1 the "
        "importance ratio against the rollout policy's stored log-probs matters.",
    )
    micro_batch_size: PositiveInt = Field(
        256,
        description="Sequences per forward/backward of the loss, and per scoring forward "
        "(pi_old, OC-GRPO's guided rows); gradients accumulate to the full batch. Not the "
        "rollouts: a rollout batch (prompts_per_step x group_size sequences, this process's "
        "share of them) is sampled in one generate call.",
    )
    clip_low: Annotated[float, Field(ge=0, lt=1)] = Field(
        0.2, description="Ratio clip below: 1 - clip_low."
    )
    clip_high: Annotated[float, Field(ge=0)] = Field(
        0.2, description="Ratio clip above: 1 + clip_high (DAPO's clip-higher raises this)."
    )
    dual_clip: Annotated[float, Field(gt=1)] | None = Field(
        None,
        description="Dual clip c > 1: bound negative-advantage token losses by -c*A; null: "
        "none. A preset knob: codapo sets 3.0 (verl's clip_ratio_c).",
    )
    advantage: Literal["grpo", "dr_grpo", "batch_norm", "rloo"] = Field(
        "grpo",
        description="Advantage estimator: grpo (group mean and std), dr_grpo (group mean "
        "only), batch_norm (group mean, batch std), rloo (leave-one-out mean).",
    )
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = Field(
        "token-mean",
        description="How token losses become one number (see "
        "grpo_core.algorithms.losses.agg_loss); seq-mean-token-sum-norm divides by "
        "max_new_tokens (Dr. GRPO).",
    )
    kl_estimator: Literal["k1", "k2", "k3"] = Field(
        "k3", description="Per-token KL estimator used when kl_coef > 0."
    )
    kl_coef: Annotated[float, Field(ge=0)] = Field(
        0.0, description="Weight of the k3 KL to the reference model; 0 skips the reference."
    )
    entropy_coef: Annotated[float, Field(ge=0)] = Field(
        0.0,
        description="Entropy bonus: the loss subtracts entropy_coef x the current policy's "
        "per-token entropy at the sampling temperature, aggregated as the policy loss "
        "(verl's entropy_coeff; 0: not computed). A preset knob: codapo sets 0.001.",
    )
    filter_zero_std: bool = Field(
        False,
        description="Leave groups whose rewards are all equal (advantage 0) out of the loss "
        "entirely: out of its denominator (the token count of token-mean, the sequence count "
        "of the seq-mean modes), of the KL and entropy terms, of frac_sequences_trained and of "
        "the clip ratios' token count; DAPO's dynamic sampling without refill. A preset knob: "
        "true for dr_grpo only. false (TRL, verl): they count like every other sequence; their "
        "forward and backward are still skipped where that cannot change the update (kl_coef "
        "and entropy_coef 0), and they count as trained.",
    )
    dynamic_sampling: bool = Field(
        False,
        description="DAPO dynamic sampling: drop groups whose rewards are all equal and draw "
        "more questions until prompts_per_step informative groups are found, for at most "
        "max_sampling_rounds rollout rounds per step.",
    )
    max_sampling_rounds: PositiveInt = Field(
        3, description="Bound on rollout rounds per step with dynamic_sampling."
    )
    overlong_filter: bool = Field(
        False,
        description="DAPO overlong filtering: completions cut at max_new_tokens (no EOS) are "
        "left out of the loss, so truncation is not punished as a wrong answer.",
    )
    adv_epsilon: PositiveFloat = Field(1e-4, description="Added to the group std (GRPO).")
    checkpoint_every: PositiveInt = Field(
        10,
        description="Save the policy's weights (the adapters with LoRA) to checkpoints/ every "
        "this many steps and at the last step: what the `dynamics` stage reads.",
    )
    codapo: CodapoParams = CodapoParams()
    oc_grpo: OffContextParams = OffContextParams()
    lora: LoraParams = LoraParams()
    heldout: HeldoutParams = HeldoutParams()

    @model_validator(mode="after")
    def _merged_needs_lora(self) -> TrainParams:
        if self.rollout_backend == "hf_merged" and not self.lora.enabled:
            raise ValueError(
                "rollout_backend hf_merged needs lora.enabled: true (it samples from a copy "
                "with the adapters merged; without LoRA, hf samples from the policy itself)"
            )
        return self

    @model_validator(mode="after")
    def _bf16_needs_lora(self) -> TrainParams:
        if self.dtype == "bfloat16" and not self.lora.enabled:
            raise ValueError(
                "dtype bfloat16 needs lora.enabled: true (LoRA's adapters train in float32 on a "
                "bf16 base; full fine-tuning of bf16 weights would lose every update smaller "
                "than 2^-8 of a weight)"
            )
        return self


Algo = Annotated[
    Literal[ALGOS],  # type: ignore[valid-type]
    Field(
        description="Algorithm preset (grpo_core.algorithms.presets): fills the null train "
        "knobs and reward.weights.overlong."
    ),
]


def _budget(train: dict) -> int:
    """`train.max_new_tokens` of a raw (not yet validated) `train` section, or its default
    when missing or invalid (validation then reports it)."""
    budget = train.get("max_new_tokens")
    if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0:
        return budget
    return TrainParams.model_fields["max_new_tokens"].default


class TrainChecks(StageParams):
    """What a view holding `algo`, `train` and `reward` checks across them: the `algo` preset
    fills the null `train` knobs and the null `reward` shaping knobs (`reward.weights.overlong`,
    and `reward.overlong_cache` from `train.max_new_tokens`) before validation, and the
    overlong punishment's cache fits in the generation budget."""

    @model_validator(mode="after")
    def _overlong_cache_within_budget(self):
        cache, budget = self.reward.overlong_cache, self.train.max_new_tokens
        if self.reward.weights.overlong and cache > budget:
            raise ValueError(
                f"reward.overlong_cache ({cache}) must not exceed train.max_new_tokens ({budget})"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _apply_algo_preset(cls, raw: object) -> object:
        if isinstance(raw, dict) and isinstance(raw.get("train", {}), dict):
            algo = raw.get("algo", "grpo")
            train = apply_preset(algo, raw.get("train") or {})
            raw = {**raw, "train": train}
            if isinstance(raw.get("reward", {}), dict):
                reward = raw.get("reward") or {}
                raw["reward"] = apply_reward_preset(algo, reward, _budget(train))
        return raw


class TrainStage(TrainChecks):
    """What `train` reads."""

    numerics: Numerics = "portable"
    threads: Threads = 2
    seed: Seed = 0
    algo: Algo = "grpo"
    train: TrainParams = TrainParams()
    reward: RewardParams = RewardParams()
    launch: Launch = "cpu"

    @property
    def run_seed(self) -> int:
        """The training run's seed: `train.seed`, or the top-level `seed` when it is null."""
        return self.seed if self.train.seed is None else self.train.seed
