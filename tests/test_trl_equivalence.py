"""grpo-lab's GRPO loss equals TRL's `GRPOTrainer` loss, computed by TRL's own code.

A real `trl.GRPOTrainer` is built around grpo-lab's tiny Llama (random weights, saved to a
temporary folder; no Hub access), and `GRPOTrainer._compute_loss` is called on a hand-built
batch: left-padded prompts, ragged completions, advantages of both signs, and old/reference
log-probs perturbed so that ratios leave the (asymmetric, clip-higher) clip range on both
sides. Our loss is composed from the same inputs exactly as `grpo_core.training.trainer` composes
it:

    per_token = clipped_surrogate(...).per_token + kl_coef * kl_k3(logp, ref_logp)
    loss = agg_loss(per_token, mask, mode, num_tokens=..., num_seqs=..., max_tokens=max_new_tokens)

TRL's loss type -> our `agg_loss` mode: "grpo" -> seq-mean-token-mean, "bnpo" and "dapo" ->
token-mean, "dr_grpo" -> seq-mean-token-sum-norm.

Two comparisons per case:
- on TRL's own per-token log-probs (`_get_per_token_logps_and_entropies`): isolates the loss
  formula and the aggregation; the losses are identical (diff 0.0) and the parameter gradients
  agree to <= 7.5e-9;
- end to end, on our log-probs (`grpo_core.rollout.scoring.token_logprobs`, what our trainer uses):
  TRL's fused LM head computes the log-softmax in float32 whatever the model dtype (and so
  does ours), so this agrees to float32 rounding: loss diff <= 2.1e-8, gradients <= 2.0e-7.

The model and inputs are float64 so that the backbone adds no rounding of its own (with a
float32 model the end-to-end diffs were <= 1.2e-7 for the loss and <= 2.7e-7 for gradients).

Beyond the loss function, the `grpo` preset's whole update (`GRPOTrainer.update` with the params
`algo: grpo` gives) against `_compute_loss` with TRL's default loss_type "dapo", on rollouts
with uniform groups (advantage 0) that TRL counts in its token mean: loss and gradients within
1e-6, with and without KL (`test_grpo_preset_update_matches_trl_with_uniform_groups`); and the
update skipping those rows' forward and backward (kl_coef 0) against running them: bit-identical
(`test_skipping_zero_advantage_rows_changes_no_bit_of_the_update`).

TRL flags that must be off to get the plain GRPO objective (TRL 1.16 defaults in brackets):
`use_bias_correction_kl=False` [True: multiplies the KL term by the ratio pi/pi_old],
`bf16=False` [True], `top_entropy_quantile=1.0`, `entropy_coef=0.0`, `delta=None`,
`off_policy_mask_threshold=None`, `importance_sampling_level="token"`, `use_vllm=False`.
"""

from __future__ import annotations

import copy

import huggingface_hub.constants
import pytest
import torch
from datasets import Dataset
from transformers import LlamaForCausalLM
from trl import GRPOConfig, GRPOTrainer

from grpo_core.algorithms.losses import agg_loss, clipped_surrogate, kl_k3
from grpo_core.config.core import read_yaml
from grpo_core.config.model import TinyModelParams
from grpo_core.config.params import parse_params
from grpo_core.models.tiny import build_tiny_model
from grpo_core.rollout.rollouts import Rollouts
from grpo_core.rollout.scoring import token_logprobs
from grpo_core.training.trainer import GRPOTrainer as OurTrainer

TRL_TO_OURS = {
    "grpo": "seq-mean-token-mean",
    "bnpo": "token-mean",
    "dapo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
}
EPS_LOW, EPS_HIGH = 0.2, 0.28  # clip-higher: epsilon_high != epsilon
TEMPERATURE = 0.7  # TRL divides the logits by the sampling temperature; so do we
NUM_GENERATIONS = 3
BATCH = 6  # two prompts x three generations
PROMPT_LENS = [5, 3, 5, 4, 2, 5]  # left padding
COMPLETION_LENS = [6, 3, 1, 5, 2, 4]  # right padding (ragged)
MAX_COMPLETION_LENGTH = 8  # > the batch's widest completion: dr_grpo divides by this constant
DTYPE = torch.float64

LOSS_TOL = 1e-6  # end to end (measured <= 2.1e-8; losses are O(0.2-0.7))
GRAD_TOL = 1e-6  # max abs diff of any parameter-gradient entry (measured <= 2.0e-7; grads O(1))
SAME_LOGP_LOSS_TOL = 1e-12  # on TRL's own log-probs (measured 0.0)
SAME_LOGP_GRAD_TOL = 1e-7  # measured <= 7.5e-9: TRL's LM-head backward rounds dL/dlogp to float32


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    """Any Hub request fails: everything here is built and loaded locally."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    """grpo-lab's tiny Llama, randomly initialised with a fixed seed, saved locally: TRL builds
    its reference model (beta > 0) by loading the policy's `_name_or_path`."""
    path = tmp_path_factory.mktemp("tiny-llama")
    params = TinyModelParams(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    build_tiny_model(tokenizer, params, seed=0).to(DTYPE).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_trainer(
    model_dir,
    tokenizer,
    tmp_path,
    loss_type: str,
    beta: float,
    accumulation_steps: int = 1,
    batch: int = BATCH,
    epsilon_high: float = EPS_HIGH,
) -> GRPOTrainer:
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        report_to="none",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        seed=0,
        per_device_train_batch_size=batch // accumulation_steps,
        gradient_accumulation_steps=accumulation_steps,  # steps_per_generation defaults to it
        num_generations=NUM_GENERATIONS,
        max_completion_length=MAX_COMPLETION_LENGTH,
        temperature=TEMPERATURE,
        loss_type=loss_type,
        beta=beta,
        epsilon=EPS_LOW,
        epsilon_high=epsilon_high,
        importance_sampling_level="token",
        use_bias_correction_kl=False,
        top_entropy_quantile=1.0,
        entropy_coef=0.0,
        delta=None,
        off_policy_mask_threshold=None,
        use_vllm=False,
    )
    trainer = GRPOTrainer(
        model=LlamaForCausalLM.from_pretrained(model_dir, dtype=DTYPE),
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["1+2=", "3+4="]}),
        processing_class=tokenizer,
    )
    # `Trainer`'s training loop sets this per optimizer step; `_compute_loss` divides by it.
    trainer.current_gradient_accumulation_steps = accumulation_steps
    trainer.model.train()
    return trainer


def trl_batch(prompt_ids, prompt_mask, completion_ids, completion_mask, pad: int) -> dict:
    """The inputs of TRL's `_compute_loss`, padding filled with `pad`."""
    return {
        "prompt_ids": prompt_ids.masked_fill(prompt_mask == 0, pad),
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids.masked_fill(completion_mask == 0, pad),
        "completion_mask": completion_mask,
        # TRL: the generation batch's token count, gathered over processes (dapo's normaliser)
        "num_items_in_batch": completion_mask.sum(),
    }


def make_batch(tokenizer, trainer: GRPOTrainer) -> dict[str, torch.Tensor]:
    """A hand-built batch in the layout `_generate_and_score_completions` hands `_compute_loss`."""
    g = torch.Generator().manual_seed(1234)
    prompt_len = max(PROMPT_LENS)
    width = max(COMPLETION_LENS)
    prompt_mask = torch.arange(prompt_len) >= prompt_len - torch.tensor(PROMPT_LENS)[:, None]
    prompt_mask = prompt_mask.long()
    completion_mask = (torch.arange(width) < torch.tensor(COMPLETION_LENS)[:, None]).long()
    first = len(tokenizer.all_special_tokens)  # no special tokens inside the sequences
    pad = tokenizer.pad_token_id
    prompt_ids = torch.randint(first, len(tokenizer), (BATCH, prompt_len), generator=g)
    completion_ids = torch.randint(first, len(tokenizer), (BATCH, width), generator=g)

    batch = trl_batch(prompt_ids, prompt_mask, completion_ids, completion_mask, pad)
    with torch.no_grad():
        logp, _ = our_logprobs(trainer.model, batch)
    # both signs, and not zero-mean, so that the losses are O(1) and 1e-6 is a tight bound
    batch["advantages"] = torch.tensor([1.3, -0.7, 2.1, -1.1, 0.9, 1.6], dtype=DTYPE)
    # pi_old and pi_ref off pi by ~0.5 nats per token: ratios leave the clip range both ways
    batch["old_per_token_logps"] = logp + 0.5 * torch.randn(BATCH, width, generator=g, dtype=DTYPE)
    batch["ref_per_token_logps"] = logp + 0.5 * torch.randn(BATCH, width, generator=g, dtype=DTYPE)
    return batch


def our_logprobs(model, batch) -> tuple[torch.Tensor, torch.Tensor | None]:
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    return token_logprobs(model, ids, attn, batch["prompt_ids"].shape[1], TEMPERATURE)


def trl_logprobs(trainer: GRPOTrainer, batch) -> torch.Tensor:
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    logp, _, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, ids, attn, batch["completion_ids"].shape[1]
    )
    return logp


def our_loss(logp, batch, mode: str, beta: float, num_tokens=None, num_seqs=None):
    out = clipped_surrogate(
        logp, batch["old_per_token_logps"], batch["advantages"], EPS_LOW, EPS_HIGH, None
    )
    per_token = out.per_token
    if beta:
        per_token = per_token + beta * kl_k3(logp, batch["ref_per_token_logps"])
    loss = agg_loss(
        per_token,
        batch["completion_mask"],
        mode,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        max_tokens=MAX_COMPLETION_LENGTH,
    )
    return loss, out


def grads(loss, params):
    return torch.autograd.grad(loss, params)


def max_diff(a, b) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type", list(TRL_TO_OURS))
def test_loss_and_grads_match_trl(model_dir, tokenizer, tmp_path, loss_type, beta):
    trainer = make_trainer(model_dir, tokenizer, tmp_path, loss_type, beta)
    model = trainer.model
    params = [p for p in model.parameters() if p.requires_grad]
    batch = make_batch(tokenizer, trainer)
    mask = batch["completion_mask"].bool()
    mode = TRL_TO_OURS[loss_type]

    trl_loss = trainer._compute_loss(model, batch)
    trl_grads = grads(trl_loss, params)

    # 1) same log-probs as TRL: the loss formula and the aggregation alone
    ours_same, out = our_loss(trl_logprobs(trainer, batch), batch, mode, beta)
    assert abs(trl_loss.item() - ours_same.item()) < SAME_LOGP_LOSS_TOL
    assert max_diff(trl_grads, grads(ours_same, params)) < SAME_LOGP_GRAD_TOL

    # 2) end to end: our own log-prob path (float32 log-softmax, as TRL's fused head)
    logp, _ = our_logprobs(model, batch)
    ours, _ = our_loss(logp, batch, mode, beta)
    assert abs(trl_loss.item() - ours.item()) < LOSS_TOL
    assert max_diff(trl_grads, grads(ours, params)) < GRAD_TOL

    # the batch exercises both clip bounds, and the clip metrics agree with TRL's
    assert (out.clipped_low & mask).any() and (out.clipped_high & mask).any()
    metrics = trainer._metrics["train"]
    n = mask.sum().item()
    low, high = (out.clipped_low & mask).sum().item(), (out.clipped_high & mask).sum().item()
    assert metrics["clip_ratio/low_mean"][-1] == pytest.approx(low / n)
    assert metrics["clip_ratio/high_mean"][-1] == pytest.approx(high / n)
    if beta:
        kl = kl_k3(logp, batch["ref_per_token_logps"])
        assert metrics["kl"][-1] == pytest.approx(((kl * mask).sum() / n).item(), abs=1e-6)


def _half(batch, rows: slice):
    return {k: v if k == "num_items_in_batch" else v[rows] for k, v in batch.items()}


@pytest.mark.parametrize("loss_type", list(TRL_TO_OURS))
def test_gradient_accumulation_matches_trl(model_dir, tokenizer, tmp_path, loss_type):
    """Two micro-batches of three, accumulated (TRL: gradient_accumulation_steps=2). Our
    `agg_loss` with the whole batch's counts sums to the one-batch loss; so does TRL's for
    "grpo", "dapo" and "dr_grpo" (equal-sized micro-batches). TRL's "bnpo" instead averages
    each micro-batch's own token mean, which is our agg_loss without `num_tokens`, halved."""
    beta = 0.04
    trainer = make_trainer(model_dir, tokenizer, tmp_path, loss_type, beta, accumulation_steps=2)
    batch = make_batch(tokenizer, trainer)
    mode = TRL_TO_OURS[loss_type]
    num_tokens = float(batch["completion_mask"].sum())
    trl_total = ours_total = ours_local = 0.0
    for rows in (slice(0, 3), slice(3, 6)):
        half = _half(batch, rows)
        trl_total += trainer._compute_loss(trainer.model, half).item()
        logp = trl_logprobs(trainer, half)
        ours_total += our_loss(logp, half, mode, beta, num_tokens, float(BATCH))[0].item()
        ours_local += our_loss(logp, half, mode, beta)[0].item() / 2
    whole = our_loss(trl_logprobs(trainer, batch), batch, mode, beta)[0].item()
    assert abs(ours_total - whole) < SAME_LOGP_LOSS_TOL
    if loss_type == "bnpo":
        assert abs(trl_total - ours_local) < SAME_LOGP_LOSS_TOL
        assert abs(trl_total - whole) > 1e-3  # measured 8.7e-3: not the batch's token mean
    else:
        assert abs(trl_total - ours_total) < SAME_LOGP_LOSS_TOL


# ---- the `grpo` preset's whole update --------------------------------------------------------
#
# Not the loss function alone: `GRPOTrainer.update` with the params `algo: grpo` gives (the
# repository's params.yaml, only the batch's shape and the KL weight set here), on fixed
# rollouts of four groups, two of them uniform (all rewards equal: advantage 0). TRL's
# `loss_type="dapo"` (its default) divides by `num_items_in_batch`, every completion token of the
# batch, uniform groups included, and so must the preset. Groups share their prompt, as sampled.

GROUP_REWARDS = [[1.0, 0.0, 1.0], [1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
GROUP_PROMPT_LENS = [5, 3, 4, 2]
# ragged; the widest (6) in the informative groups 0 and 2
GROUP_COMPLETION_LENS = [6, 3, 1, 5, 2, 4, 3, 6, 2, 4, 1, 5]
ALL_UNIFORM = [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
GROUPS = len(GROUP_REWARDS)
ROWS = GROUPS * NUM_GENERATIONS


def trl_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """`GRPOTrainer._generate_and_score_completions`'s advantages (scale_rewards="group", one
    reward function of weight 1), written as TRL computes them, with TRL's own `nanstd`."""
    from trl.trainer.utils import nanstd

    grouped = rewards.view(-1, NUM_GENERATIONS)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(NUM_GENERATIONS)
    std = nanstd(grouped, dim=1).repeat_interleave(NUM_GENERATIONS)
    return torch.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0)


def make_group_batch(tokenizer, model, reference, group_rewards) -> tuple[dict, torch.Tensor]:
    """TRL's `_compute_loss` inputs for GROUPS groups of NUM_GENERATIONS rollouts (one left-padded
    prompt per group, ragged completions), and the rewards they were scored with. pi_old is off
    the policy by ~0.5 nats per token so that ratios leave the clip range; pi_ref is
    `reference`'s log-probs (what our update computes itself)."""
    g = torch.Generator().manual_seed(4321)
    prompt_len, width = max(GROUP_PROMPT_LENS), max(GROUP_COMPLETION_LENS)
    lens = torch.tensor(GROUP_PROMPT_LENS).repeat_interleave(NUM_GENERATIONS)
    prompt_mask = (torch.arange(prompt_len) >= prompt_len - lens[:, None]).long()
    completion_mask = (torch.arange(width) < torch.tensor(GROUP_COMPLETION_LENS)[:, None]).long()
    first, pad = len(tokenizer.all_special_tokens), tokenizer.pad_token_id
    prompts = torch.randint(first, len(tokenizer), (GROUPS, prompt_len), generator=g)
    prompt_ids = prompts.repeat_interleave(NUM_GENERATIONS, dim=0)
    completion_ids = torch.randint(first, len(tokenizer), (ROWS, width), generator=g)
    batch = trl_batch(prompt_ids, prompt_mask, completion_ids, completion_mask, pad)
    rewards = torch.tensor(group_rewards, dtype=torch.float32).flatten()
    batch["advantages"] = trl_advantages(rewards)
    with torch.no_grad():
        logp, _ = our_logprobs(model, batch)
        batch["ref_per_token_logps"] = our_logprobs(reference, batch)[0].to(DTYPE)
    noise = 0.5 * torch.randn(ROWS, width, generator=g, dtype=DTYPE)
    batch["old_per_token_logps"] = logp.to(DTYPE) + noise
    return batch, rewards


def preset_trainer(model, tokenizer, reference=None, micro=ROWS, **train) -> OurTrainer:
    """Our trainer with the `grpo` preset over the repository's params.yaml; the batch shape,
    the sampling temperature and one update per batch (TRL's num_iterations=1) set as TRL's."""
    raw = read_yaml("params.yaml")
    raw["algo"] = "grpo"
    shape = dict(
        group_size=NUM_GENERATIONS,
        prompts_per_step=GROUPS,
        max_new_tokens=MAX_COMPLETION_LENGTH,
        temperature=TEMPERATURE,
        updates_per_batch=1,
        micro_batch_size=micro,
    )
    raw["train"].update({**shape, **train})
    params = parse_params(raw)
    return OurTrainer(model, tokenizer, params.train, reference=reference, reward=params.reward)


def our_update(trainer: OurTrainer, batch, rewards) -> tuple[dict, list[list[torch.Tensor]]]:
    """`trainer.update` on the batch: its metrics and, per optimizer step, the gradients it
    stepped on (before clipping)."""
    model = trainer.model
    steps = []
    step = trainer.parallel.optimizer_step

    def record(*args, **kw):
        steps.append([p.grad.detach().clone() for p in model.parameters() if p.requires_grad])
        return step(*args, **kw)

    trainer.parallel.optimizer_step = record
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    ro = Rollouts(
        input_ids=ids,
        attention_mask=attn,
        completion_mask=batch["completion_mask"],
        prompt_len=batch["prompt_ids"].shape[1],
        texts=[""] * len(ids),
        truncated=torch.zeros(len(ids), dtype=torch.bool),
    )
    old = batch["old_per_token_logps"]
    metrics = trainer.update(ro, rewards, old_logp=old, entropy=torch.zeros_like(old))
    return metrics, steps


def load(model_dir):
    """The policy TRL trains, loaded afresh: a copy of `trainer.model` would share its forward
    (accelerate's wrapper of the original module)."""
    return LlamaForCausalLM.from_pretrained(model_dir, dtype=DTYPE)


def _reference(model_dir):
    """A reference model off the policy (weights perturbed), so that the KL term is not 0."""
    reference = LlamaForCausalLM.from_pretrained(model_dir, dtype=DTYPE)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return reference.eval()


@pytest.mark.parametrize("micro", [ROWS, NUM_GENERATIONS, 5])
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_grpo_preset_update_matches_trl_with_uniform_groups(
    model_dir, tokenizer, tmp_path, beta, micro
):
    """The whole update of `algo: grpo` (advantages from the rewards, uniform groups, micro-
    batches with the whole batch's token count; with beta 0 the uniform groups' rows skipped,
    with beta > 0 run for their KL) gives TRL's loss and gradients within 1e-6."""
    trl = make_trainer(model_dir, tokenizer, tmp_path, "dapo", beta, batch=ROWS, epsilon_high=0.2)
    reference = _reference(model_dir)
    batch, rewards = make_group_batch(tokenizer, trl.model, reference, GROUP_REWARDS)
    assert batch["advantages"][3:6].eq(0).all() and batch["advantages"][9:].eq(0).all()
    params = [p for p in trl.model.parameters() if p.requires_grad]
    trl_loss = trl._compute_loss(trl.model, batch)
    trl_grads = grads(trl_loss, params)

    policy = load(model_dir)
    trainer = preset_trainer(policy, tokenizer, reference if beta else None, micro, kl_coef=beta)
    cfg = trainer.cfg
    assert (cfg.advantage, cfg.loss_agg) == ("grpo", "token-mean")
    assert cfg.clip_low == cfg.clip_high == 0.2
    assert not cfg.filter_zero_std and cfg.dual_clip is None and cfg.adv_epsilon == 1e-4
    metrics, steps = our_update(trainer, batch, rewards)

    assert abs(metrics["loss"] - trl_loss.item()) < LOSS_TOL
    assert len(steps) == 1 and max_diff(trl_grads, steps[0]) < GRAD_TOL
    assert metrics["frac_sequences_trained"] == 1.0  # every row is in the loss
    # beta 0: only the informative groups ran; beta > 0: every row, for its KL
    ran = sorted(trainer.trained_rows)
    assert ran == (list(range(ROWS)) if beta else [0, 1, 2, 6, 7, 8])
    # the clip ratios and the KL over every completion token, as TRL's
    logged = trl._metrics["train"]
    for name in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
        assert metrics[name] == pytest.approx(logged[name][-1], rel=1e-6), name  # TRL: float32
    assert metrics["clip_ratio/low_mean"] > 0 and metrics["clip_ratio/high_mean"] > 0
    if beta:
        assert metrics["kl"] == pytest.approx(logged["kl"][-1], abs=1e-6)

    # Leaving the uniform groups out of the token count (filter_zero_std, the old grpo preset,
    # dr_grpo's) is another objective: the loss doubles here (21 of 42 tokens).
    old = preset_trainer(
        load(model_dir),
        tokenizer,
        reference if beta else None,
        micro,
        kl_coef=beta,
        filter_zero_std=True,
    )
    old_metrics, _ = our_update(old, batch, rewards)
    assert abs(old_metrics["loss"] - trl_loss.item()) > 1e-2
    assert old_metrics["frac_sequences_trained"] == 0.5


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("group_rewards", [GROUP_REWARDS, ALL_UNIFORM], ids=["mixed", "uniform"])
def test_skipping_zero_advantage_rows_changes_no_bit_of_the_update(
    model_dir, tokenizer, group_rewards, dtype
):
    """kl_coef 0 and no entropy bonus (the grpo preset): the rows whose advantage is 0 count in
    the token mean but run no forward or backward. Against running them: the same gradients,
    bit for bit, at both optimizer steps of a batch, and the same metrics and per-row stats.

    Bit-identical because the micro-batches are whole groups and the widest completion is in
    an informative group: every row that runs does so in the same micro-batch at the same width
    either way, and a skipped group's micro-batch would add exact zeros. (With other
    micro-batches the two agree to float rounding: the same sums in other orders.) When every
    group is uniform one row still runs, so that the optimizer steps on zero gradients as it
    does with every row."""
    base = LlamaForCausalLM.from_pretrained(model_dir, dtype=dtype)
    batch, rewards = make_group_batch(tokenizer, base, base, group_rewards)
    runs = []
    for skip in (True, False):
        trainer = preset_trainer(
            copy.deepcopy(base), tokenizer, micro=NUM_GENERATIONS, updates_per_batch=2
        )
        trainer.updater.skip_zero_advantage = skip
        metrics, steps = our_update(trainer, batch, rewards)
        runs.append((metrics, steps, trainer))
    (m_skip, g_skip, t_skip), (m_all, g_all, t_all) = runs
    informative = [0, 1, 2, 6, 7, 8] if group_rewards is GROUP_REWARDS else [0]
    assert sorted(t_skip.trained_rows) == informative
    assert sorted(t_all.trained_rows) == list(range(ROWS))
    assert len(g_skip) == len(g_all) == 2
    for a, b in zip(g_skip, g_all, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    # update_weight/abs_mean sums a float32 per-row vector, 6 rows long or 12 with zeros
    weight_skip, weight_all = (
        m_skip.pop("update_weight/abs_mean"),
        m_all.pop("update_weight/abs_mean"),
    )
    assert weight_skip == pytest.approx(weight_all, rel=1e-6)
    assert m_skip == m_all
    for k, v in t_skip.row_stats.items():
        assert torch.equal(v, t_all.row_stats[k]), k
    for k, v in t_skip.model.state_dict().items():
        assert torch.equal(v, t_all.model.state_dict()[k]), k
    if group_rewards is ALL_UNIFORM:
        assert all(float(x.abs().max()) == 0.0 for x in g_skip[0])
        assert t_skip.optimizer.state  # it stepped
    else:
        assert any(float(x.abs().max()) > 0 for x in g_skip[0])
