"""Typed, validated parameters: one pydantic model per `params.yaml` section.

Every knob is documented where it is declared (the TRL `GRPOConfig` habit). Stages call
`load_params()` before doing any work, so a typo or a bad value fails at once with a message
that names the key and what is allowed, and nothing is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from grpo_core.algos import ALGOS, apply_preset
from grpo_core.errors import InputError

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]


def _increasing(fractions: list[float]) -> list[float]:
    if fractions != sorted(set(fractions)):
        raise ValueError(f"fractions {fractions} must be increasing and distinct")
    return fractions


# Reference-solution prefix fractions, tried in order (OC-GRPO guidance).
Fractions = Annotated[list[Fraction], Field(min_length=1), AfterValidator(_increasing)]
TinyLevel = Annotated[int, Field(ge=1, le=5)]
Level = Annotated[int, Field(ge=0, le=5)]  # 0: a real dataset without difficulty levels


class Section(BaseModel):
    # extra="forbid": an unknown key is an error, not silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetSpec(Section):
    """A real dataset, mapped to the problem schema by an adapter (grpo_core.adapters)."""

    name: str = Field(
        description="Adapter name: gsm8k, math_train, math500, aime24, aime25, amc23, "
        "minerva_math, olympiadbench, gpqa_diamond, arc_challenge, mmlu_stem, humaneval, mbpp."
    )
    path: str | None = Field(
        None,
        description="A local file in the dataset's own column layout (parquet, json, jsonl, "
        "csv), e.g. under data/raw/ (a dependency of `prepare`); null loads the adapter's hub "
        "id through `datasets` (needs the network or a warm HF cache).",
    )
    split: str | None = Field(None, description="Dataset split; null: the adapter's default.")
    limit: PositiveInt | None = Field(None, description="At most this many problems (first ones).")


def _dataset_spec(value: object) -> object:
    # `- math500` is shorthand for `- {name: math500}`.
    return {"name": value} if isinstance(value, str) else value


DatasetList = list[Annotated[DatasetSpec, BeforeValidator(_dataset_spec)]]


class DataParams(Section):
    """`prepare` stage: which problems exist and how the splits are drawn."""

    domains: list[Literal["arith", "mcq", "code"]] = Field(
        default=["arith"],
        description="Tiny-world generators: arith (math: L-digit addition), mcq (multiple "
        "choice), code (a small Python function, checked in the sandbox); [] for none.",
    )
    levels: list[TinyLevel] = Field(
        default=[1, 2, 3, 4, 5], min_length=1, description="Difficulty levels (1 = easiest)."
    )
    train_per_level: PositiveInt = Field(2000, description="Training problems per level.")
    eval_per_level: PositiveInt = Field(
        300,
        description="Held-out problems per level. With 4 samples each, 300 keep the paired "
        "standard error of a level's base-vs-policy difference under 2 points (measured by "
        "benchmarks/repro.py on the default run).",
    )
    train: DatasetList = Field(
        default=[],
        description="Real datasets added to the train split, e.g. [gsm8k, math_train]. Their "
        "problems have level 0 unless the dataset grades difficulty (MATH: 1-5), so include 0 "
        "in train.levels to train on them.",
    )
    eval: DatasetList = Field(
        default=[],
        description="Real benchmarks added to the eval split, e.g. [math500, aime24, "
        "gpqa_diamond, humaneval]; each is reported on its own in metrics/eval.json.",
    )

    @model_validator(mode="after")
    def _some_problems(self) -> DataParams:
        if not self.domains and not (self.train and self.eval):
            raise ValueError("no problems: give data.domains, or both data.train and data.eval")
        return self


class TinyModelParams(Section):
    """Architecture of the tiny-world decoder (a standard Qwen2 config)."""

    hidden_size: PositiveInt = 128
    num_layers: PositiveInt = 3
    num_heads: PositiveInt = 4
    intermediate_size: PositiveInt = 512
    max_position_embeddings: PositiveInt = 256

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> TinyModelParams:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by "
                f"num_heads ({self.num_heads})"
            )
        return self


class SFTParams(Section):
    """Warm start of the tiny model on reference solutions (before any RL)."""

    steps: Annotated[int, Field(ge=0)] = Field(
        500, description="Optimizer steps. Fewer leaves more of the ladder for RL to learn."
    )
    batch_size: PositiveInt = 64
    lr: PositiveFloat = 3e-3
    warmup_steps: Annotated[int, Field(ge=0)] = 20
    level_weights: list[Annotated[float, Field(ge=0)]] = Field(
        default=[1.0, 1.0, 1.0, 0.5, 0.15],
        description="Sampling weight of each level (level 1 first) in the SFT mixture; "
        "low weights on hard levels leave them unsolved, which is what RL studies need.",
    )


class ModelParams(Section):
    """`base` stage: which model RL starts from."""

    name: str = Field(
        "tiny",
        description="'tiny' builds and warm-starts the tiny-world model; anything else is a "
        "Hugging Face hub id (e.g. Qwen/Qwen2.5-Math-1.5B) or a local model directory.",
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit).")
    chat: bool = Field(
        False,
        description="Wrap every prompt in the tokenizer's chat template as one user message "
        "(instruct models). Base models, the tiny one included, take plain prompts.",
    )
    tiny: TinyModelParams = TinyModelParams()
    sft: SFTParams = SFTParams()


class LoraParams(Section):
    """Optional LoRA adapters (peft). The KL reference is then the model with adapters off."""

    enabled: bool = False
    r: PositiveInt = 8
    alpha: PositiveFloat = 16.0
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
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
    the question's advantages, and high-value, learnable questions are resampled."""

    enabled: bool = Field(False, description="Set by `algo: codapo`; null in params.yaml.")
    value: Literal["confidence_difficulty", "difficulty", "confidence"] = Field(
        "confidence_difficulty",
        description="Value function (grpo_core.codapo.VALUE_FUNCTIONS): confidence_difficulty "
        "= c * 4d(1-d) + offset (CoDaPO); difficulty = 4d(1-d) + offset; confidence = "
        "c + offset. c = exp(mean token log-prob of the group), d = 1 - group accuracy.",
    )
    offset: Annotated[float, Field(ge=0)] = Field(
        0.1, description="Added to every value, so no question's advantages vanish entirely."
    )
    reweight: bool = Field(True, description="Multiply each question's advantages by its value.")
    resample: bool = Field(
        True, description="Repeat high-value, learnable questions in the next mini-batch."
    )
    quantile: Annotated[float, Field(ge=0, le=1)] = Field(
        0.75,
        description="Questions whose value is at or above this quantile of the batch's "
        "values (and that are learnable: 0 < accuracy < 1) are resampled.",
    )
    copies: PositiveInt = Field(
        4, description="Groups (fresh rollouts each) per resampled question in the next batch."
    )
    alternate: bool = Field(
        True,
        description="A batch made of resampled questions does not itself trigger resampling, "
        "so resampled and fresh batches alternate and the run keeps seeing new questions.",
    )


class OffContextParams(Section):
    """Off-Context GRPO: guided re-rolls for groups whose rollouts all fail."""

    mode: Literal["off", "adaptive", "fixed"] = Field(
        "off",
        description="Set by `algo: oc_grpo` (fixed); null in params.yaml. adaptive: re-roll a "
        "failed group with reference-solution prefixes of increasing `fractions` until one "
        "rollout is correct; fixed: re-roll once with the fraction data/guides.parquet found, "
        "and a question it has no fraction for (not profiled, or not unlocked) as adaptive.",
    )
    fractions: Fractions = Field(
        default=[0.2, 0.4, 0.6, 0.8, 1.0],
        description="Guidance fractions tried in order by the adaptive mode.",
    )
    guided_rollouts: PositiveInt | None = Field(
        None,
        description="How many of a failed group's G rollouts are replaced by guided ones; null "
        "replaces all G. Fewer keep unguided failures in the group, so a guide that makes every "
        "guided rollout correct still leaves a reward contrast (and a gradient) in the group.",
    )
    correction: Literal["importance", "none"] = Field(
        "importance",
        description="importance: weight each token's advantage by the clipped ratio of the "
        "unguided to the guided rollout policy (OC-GRPO); none: the uncorrected guided baseline.",
    )
    gamma: Annotated[float, Field(ge=0)] = Field(
        1.0, description="Exponent on the log-ratio in the importance weight."
    )
    c_min: Annotated[float, Field(ge=0)] = Field(0.01, description="Lower clip of the weight.")
    c_max: PositiveFloat = Field(1.0, description="Upper clip of the weight.")

    @model_validator(mode="after")
    def _clip_order(self) -> OffContextParams:
        if self.c_min > self.c_max:
            raise ValueError(f"c_min ({self.c_min}) must not exceed c_max ({self.c_max})")
        return self


class TrainParams(Section):
    """`train` stage: the RL loop."""

    levels: list[Level] = Field(
        default=[3, 4],
        min_length=1,
        description="Levels to train on: the learnable band (solved sometimes, not always); "
        "0 is the level of real datasets that grade no difficulty.",
    )
    domains: list[Literal["math", "mcq", "code"]] | None = Field(
        None,
        description="Domains to train on; null: every domain of the train split. Mixing "
        "domains in one run is a choice: on the tiny world, training on all three eroded the "
        "arith levels it did not train on (README).",
    )
    curriculum: Literal["all", "learnable", "easy", "hard", "unsolved"] = Field(
        "all",
        description="Which of those questions to train on, by the base model's pass rate p in "
        "data/profile.parquet: all; learnable (0 < p < 1); easy (0.5 <= p < 1); hard "
        "(0 < p < 0.5); unsolved (p = 0). Anything but `all` uses profiled questions only.",
    )
    steps: PositiveInt = Field(40, description="RL steps (one rollout batch each).")
    prompts_per_step: PositiveInt = Field(64, description="Questions per rollout batch.")
    group_size: Annotated[int, Field(ge=2)] = Field(
        8, description="Completions per question (G); group statistics need at least 2."
    )
    temperature: PositiveFloat = Field(1.0, description="Sampling temperature of rollouts.")
    max_new_tokens: PositiveInt = 72
    lr: PositiveFloat = 7e-5
    warmup_steps: Annotated[int, Field(ge=0)] = Field(
        5,
        description="Linear learning-rate warmup, in optimizer steps; constant afterwards. "
        "Adam's first steps are sign-like, so a short warmup keeps them from jolting the policy.",
    )
    weight_decay: Annotated[float, Field(ge=0)] = 0.0
    max_grad_norm: PositiveFloat = 1.0
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute each block's activations in the backward pass instead of "
        "keeping them: less memory for real models at about a third more compute.",
    )
    rollout_backend: Literal["hf", "vllm"] = Field(
        "hf",
        description="Who samples the rollouts: hf (the training model itself, with a KV cache) "
        "or vllm (a vLLM engine colocated in each training process, weights synced from the "
        "policy before every rollout batch; needs `pip install .[vllm]` and a GPU).",
    )
    vllm_gpu_memory_utilization: Annotated[float, Field(gt=0, lt=1)] = Field(
        0.3, description="With rollout_backend=vllm: the share of GPU memory the engine takes."
    )
    tis_cap: PositiveFloat = Field(
        2.0,
        description="With rollout_backend=vllm: truncated importance sampling for the "
        "sampler/trainer mismatch; each token's advantage is weighted by "
        "min(pi_old / q_vllm, tis_cap) (TRL's vllm_importance_sampling_cap, verl's TIS).",
    )
    updates_per_batch: PositiveInt = Field(
        2,
        description="Optimizer steps on each rollout batch (TRL's num_iterations). Above 1 the "
        "importance ratio against the rollout policy's stored log-probs matters.",
    )
    micro_batch_size: PositiveInt = Field(
        256, description="Sequences per forward/backward; gradients accumulate to the full batch."
    )
    clip_low: Annotated[float, Field(ge=0, lt=1)] = Field(
        0.2, description="Ratio clip below: 1 - clip_low."
    )
    clip_high: Annotated[float, Field(ge=0)] = Field(
        0.2, description="Ratio clip above: 1 + clip_high (DAPO's clip-higher raises this)."
    )
    dual_clip: Annotated[float, Field(gt=1)] | None = Field(
        None, description="Dual clip c > 1: bound negative-advantage token losses by -c*A."
    )
    advantage: Literal["grpo", "dr_grpo", "batch_norm", "rloo"] = Field(
        "grpo",
        description="Advantage estimator: grpo (group mean and std), dr_grpo (group mean "
        "only), batch_norm (group mean, batch std), rloo (leave-one-out mean).",
    )
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = Field(
        "token-mean",
        description="How token losses become one number (see grpo_core.losses.agg_loss); "
        "seq-mean-token-sum-norm divides by max_new_tokens (Dr. GRPO).",
    )
    kl_estimator: Literal["k1", "k2", "k3"] = Field(
        "k3", description="Per-token KL estimator used when kl_coef > 0."
    )
    kl_coef: Annotated[float, Field(ge=0)] = Field(
        0.0, description="Weight of the k3 KL to the reference model; 0 skips the reference."
    )
    filter_zero_std: bool = Field(
        True,
        description="Leave groups whose rewards are all equal out of the loss. Their advantage "
        "is 0, so they only dilute the token-mean; DAPO's dynamic sampling without refill.",
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


class SamplingParams(Section):
    """How a stage samples completions from a fixed model."""

    samples: PositiveInt = Field(8, description="Completions per question.")
    temperature: PositiveFloat = Field(1.0, description="Sampling temperature.")
    max_new_tokens: PositiveInt = 72
    batch_size: PositiveInt = Field(512, description="Sequences per generate call.")


class ProfileParams(SamplingParams):
    """`profile` stage: the base model's pass rate and confidence on the training questions
    (of `train.levels`)."""

    max_per_level: PositiveInt = Field(
        500,
        description="Questions profiled per level and source (the first ones of the train "
        "split). "
        "A curriculum other than `all` trains on profiled questions only.",
    )


class GuideParams(SamplingParams):
    """`guide` stage: for profiled questions the base never solved, the smallest prefix of
    the reference solution that unlocks them (OC-GRPO's fixed guidance)."""

    fractions: Fractions = Field(
        default=[0.2, 0.4, 0.6, 0.8, 1.0],
        description="Prefix fractions tried in order; a question keeps the first one with at "
        "least one correct completion among `samples`.",
    )


class EvalParams(SamplingParams):
    """`evaluate` stage: how base and policy are scored on the held-out split."""

    samples: PositiveInt = Field(4, description="k samples per question (avg@k, pass@k).")
    temperature: PositiveFloat = Field(1.0, description="Sampling temperature, as papers report.")
    pass_at: list[PositiveInt] = Field(default=[4], description="k values reported as pass@k.")
    greedy: bool = Field(
        True, description="Also decode each question once greedily and report `greedy`."
    )

    @model_validator(mode="after")
    def _pass_at_within_samples(self) -> EvalParams:
        too_big = [k for k in self.pass_at if k > self.samples]
        if too_big:
            raise ValueError(f"pass_at values {too_big} exceed samples ({self.samples})")
        return self


class DynamicsParams(Section):
    """`dynamics` stage: what training changed in the weights (per tensor and checkpoint,
    grpo_core.dynamics) and in the tokens (from the rollout log, grpo_core.token_dynamics)."""

    tolerance: PositiveFloat = Field(
        2**-8,
        description="An entry counts as changed when |W_t - W_0| > tolerance * |W_0|; the "
        "default 2^-8 is bf16's unit roundoff: a smaller change would not survive storing "
        "the weights in bf16.",
    )
    svd: Literal["auto", "exact", "randomized"] = Field(
        "auto",
        description="Singular values of each update: exact, randomized (the top svd_rank, "
        "torch.svd_lowrank), or auto (exact up to svd_exact_max rows or columns).",
    )
    svd_rank: PositiveInt = Field(64, description="Singular values a randomized SVD estimates.")
    svd_exact_max: PositiveInt = Field(
        1024, description="auto: an exact SVD when min(rows, cols) is at most this."
    )
    svd_niter: Annotated[int, Field(ge=0)] = Field(
        4, description="Power iterations of the randomized SVD (more: sharper, slower)."
    )


class CodeRewardParams(Section):
    """The sandbox that runs completions' programs against the problem's tests
    (grpo_core.sandbox). Limits apply to each program."""

    workers: PositiveInt = Field(2, description="Programs checked in parallel.")
    timeout_s: PositiveFloat = Field(5.0, description="Wall-clock limit, seconds.")
    cpu_time_s: PositiveInt = Field(5, description="CPU-time limit, seconds (RLIMIT_CPU).")
    memory_mb: PositiveInt = Field(512, description="Address-space limit, MiB (RLIMIT_AS).")
    max_output_bytes: PositiveInt = Field(
        1 << 20, description="Output cap: a program printing more is killed (reward 0)."
    )
    max_processes: PositiveInt = Field(16, description="Processes a program may run at once.")
    binary: bool = Field(
        False, description="Reward 1 only when every test passes; else the fraction passed."
    )


class RewardWeights(Section):
    """Weights of the training reward's components (TRL's reward_weights)."""

    correct: float = Field(1.0, description="The verifier's reward (1 = solved).")
    format: float = Field(
        0.0,
        description="Format reward: 1 when the answer is in the expected form (a closed "
        "\\boxed{}, one 'Answer: X' letter, a program defining the entry point).",
    )
    overlong: float = Field(
        0.0,
        description="DAPO's soft overlong punishment (0 down to -1 over the last "
        "`reward.overlong_cache` tokens of the budget); DAPO uses 1.",
    )


class RewardParams(Section):
    """Verifiers (every stage that scores completions) and shaping (`train` only)."""

    code: CodeRewardParams = CodeRewardParams()
    weights: RewardWeights = RewardWeights()
    overlong_cache: PositiveInt = Field(
        16,
        description="L_cache of the overlong punishment: completions longer than "
        "max_new_tokens - overlong_cache tokens are penalised linearly.",
    )


# accelerate launch configs, by the name `launch` gives: configs/accelerate in the repository
# that holds this code (stages run from its root; tests run stages from elsewhere).
REPO_ROOT = Path(__file__).resolve().parents[1]
LAUNCH_CONFIGS = Path("configs/accelerate")


def launch_config(name: str) -> Path:
    """The accelerate config file `launch: name` names (absolute)."""
    return REPO_ROOT / LAUNCH_CONFIGS / f"{name}.yaml"


class Params(Section):
    """The whole `params.yaml`."""

    seed: Annotated[int, Field(ge=0)] = 0
    algo: Literal[ALGOS] = Field(  # type: ignore[valid-type]
        "grpo", description="Algorithm preset (grpo_core.algos): fills the null train knobs."
    )
    data: DataParams = DataParams()
    model: ModelParams = ModelParams()
    profile: ProfileParams = ProfileParams()
    guide: GuideParams = GuideParams()
    train: TrainParams = TrainParams()
    dynamics: DynamicsParams = DynamicsParams()
    eval: EvalParams = EvalParams()
    reward: RewardParams = RewardParams()
    launch: str = Field(
        "cpu",
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="How `train` runs: the accelerate config configs/accelerate/<launch>.yaml. "
        "cpu: one process, in-process; ddp_cpu2: 2 CPU processes, DDP over gloo; zero2_cpu2: 2 "
        "CPU processes, DeepSpeed ZeRO-2 over gloo, fp32; zero2_8gpu / "
        "zero3_8gpu: DeepSpeed ZeRO-2/3 on 8 GPUs, bf16 (multi-node: see the file). With more "
        "than one process the stage relaunches itself through `accelerate launch`, and N "
        "processes train as one process with the same global batch (train.prompts_per_step) "
        "and seed would, up to float rounding.",
    )

    @field_validator("launch")
    @classmethod
    def _launch_config_exists(cls, name: str) -> str:
        if not launch_config(name).is_file():
            known = sorted(p.stem for p in (REPO_ROOT / LAUNCH_CONFIGS).glob("*.yaml"))
            path = LAUNCH_CONFIGS / f"{name}.yaml"
            raise ValueError(f"{path}: no such accelerate config (known: {known})")
        return name

    @model_validator(mode="after")
    def _overlong_cache_within_budget(self) -> Params:
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
            train = apply_preset(raw.get("algo", "grpo"), raw.get("train") or {})
            return {**raw, "train": train}
        return raw


class ParamsError(InputError):
    """params.yaml is missing, unreadable or invalid; the message says where and why."""


def _describe(err: dict) -> str:
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{key}: unknown key"
    if kind == "literal_error":
        allowed = err.get("ctx", {}).get("expected", "")
        return f"{key}: got {err.get('input')!r}; allowed values: {allowed}"
    return f"{key}: {err['msg']} (got {err.get('input')!r})"


def _allowed_keys(loc: tuple) -> str:
    model: type[BaseModel] = Params
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        ann = getattr(field, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return ""
        model = ann
    return ", ".join(model.model_fields)


def parse_params(raw: object, source: str = "params.yaml") -> Params:
    """Validate a parsed YAML mapping; raise ParamsError naming every bad key."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ParamsError(
            f"{source}: expected a mapping at the top level, got {type(raw).__name__}"
        )
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            line = _describe(err)
            if err["type"] == "extra_forbidden":
                line += f" (allowed keys here: {_allowed_keys(err['loc'])})"
            lines.append("  " + line)
        raise ParamsError(f"{source} is invalid:\n" + "\n".join(lines)) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path}: not found (run from the repository root)")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from None
    return parse_params(raw, str(path))
