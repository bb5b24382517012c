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

TRL flags that must be off to get the plain GRPO objective (TRL 1.16 defaults in brackets):
`use_bias_correction_kl=False` [True: multiplies the KL term by the ratio pi/pi_old],
`bf16=False` [True], `top_entropy_quantile=1.0`, `entropy_coef=0.0`, `delta=None`,
`off_policy_mask_threshold=None`, `importance_sampling_level="token"`, `use_vllm=False`.
"""

from __future__ import annotations

import huggingface_hub.constants
import pytest
import torch
from datasets import Dataset
from transformers import LlamaForCausalLM
from trl import GRPOConfig, GRPOTrainer

from grpo_core.algorithms.losses import agg_loss, clipped_surrogate, kl_k3
from grpo_core.config.model import TinyModelParams
from grpo_core.models.tiny import build_tiny_model
from grpo_core.rollout.scoring import token_logprobs

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
    model_dir, tokenizer, tmp_path, loss_type: str, beta: float, accumulation_steps: int = 1
) -> GRPOTrainer:
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        report_to="none",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        seed=0,
        per_device_train_batch_size=BATCH // accumulation_steps,
        gradient_accumulation_steps=accumulation_steps,  # steps_per_generation defaults to it
        num_generations=NUM_GENERATIONS,
        max_completion_length=MAX_COMPLETION_LENGTH,
        temperature=TEMPERATURE,
        loss_type=loss_type,
        beta=beta,
        epsilon=EPS_LOW,
        epsilon_high=EPS_HIGH,
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

    batch = {
        "prompt_ids": prompt_ids.masked_fill(prompt_mask == 0, pad),
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids.masked_fill(completion_mask == 0, pad),
        "completion_mask": completion_mask,
        # TRL: the generation batch's token count, gathered over processes (dapo's normaliser)
        "num_items_in_batch": completion_mask.sum(),
    }
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
