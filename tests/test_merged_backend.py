"""`train.rollout_backend=hf_merged`: a LoRA policy samples through a copy of itself with the
adapters merged (grpo_core/rollout/merged.py). The copy samples what the policy samples (same
streams, same tokens), follows it through training, leaves it untouched, and is refused where
it cannot be what it claims."""

import copy

import pytest
import torch
from pydantic import ValidationError

from grpo_core.config.train import LoraParams, TrainParams
from grpo_core.errors import InputError
from grpo_core.rollout import sampler
from grpo_core.rollout.merged import MergedLoRABackend
from grpo_core.training.lora import add_lora
from grpo_core.training.run import run
from grpo_core.training.trainer import GRPOTrainer
from tests.test_trainer import _cfg, starts_with_7  # noqa: F401 (a fixture)

PROMPTS = ["Q: 1+2=?\nA: ", "Q: 33+44=?\nA: ", "Q: 405+17=?\nA: "]
LORA = LoraParams(enabled=True, r=4, alpha=8, target_modules="all-linear")


def _policy(tiny_model, seed: int = 0):
    """The tiny model with LoRA on every linear layer, its B matrices random (LoRA starts at
    B = 0, which would make the merge a copy of the base)."""
    policy = add_lora(copy.deepcopy(tiny_model), LORA)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, q in policy.named_parameters():
            if "lora_B" in name:
                q.copy_(0.2 * torch.randn(q.shape, generator=gen))
    return policy


def _streams(seed: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed + i) for i in range(len(PROMPTS))]


def test_the_merged_copy_samples_the_policys_tokens_from_the_same_streams(tiny_model, tokenizer):
    policy = _policy(tiny_model)
    before = {n: q.clone() for n, q in policy.named_parameters()}
    backend = MergedLoRABackend(policy, tokenizer)
    backend.sync_weights(policy)
    assert not any("lora" in n for n, _ in backend.model.named_parameters())
    want = sampler.generate(policy, tokenizer, PROMPTS, 4, 1.0, 12, generators=_streams(5))
    got = backend.generate(PROMPTS, 4, 1.0, 12, generators=_streams(5))
    assert torch.equal(got.input_ids, want.input_ids)
    m = want.completion_mask.bool()
    torch.testing.assert_close(got.sampler_logp[m], want.sampler_logp[m], atol=1e-5, rtol=0)
    for n, q in policy.named_parameters():
        assert torch.equal(q, before[n]), f"syncing changed the policy's {n}"
    # And other streams give other tokens (the test above is not of a degenerate sampler).
    other = backend.generate(PROMPTS, 4, 1.0, 12, generators=_streams(6))
    assert not torch.equal(other.input_ids, got.input_ids)


def test_a_synced_copy_follows_the_policy_through_training(tiny_model, tokenizer, starts_with_7):  # noqa: F811
    """Three steps of GRPO with the merged copy sampling: the adapters move, the copy's
    importance weights stay 1 (it is synced before every rollout batch), and at the end its
    logits are the policy's; a copy never synced again would not be."""
    policy = add_lora(copy.deepcopy(tiny_model), LORA)
    cfg = _cfg(lr=5e-2, rollout_backend="hf_merged", lora=LORA)
    backend = MergedLoRABackend(policy, tokenizer)
    stale = copy.deepcopy(backend.model)
    trainer = GRPOTrainer(policy, tokenizer, cfg, backend=backend)
    history: list[dict] = []
    run(trainer, starts_with_7, steps=3, seed=0, on_step=lambda s, m, r, h=history: h.append(m))
    assert [abs(m["tis/weight_mean"] - 1) < 1e-4 for m in history] == [True] * 3
    backend.sync_weights(policy)
    ids = tokenizer(PROMPTS[:1], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        want = policy(**ids).logits
        torch.testing.assert_close(backend.model(**ids).logits, want, atol=1e-5, rtol=0)
        assert not torch.allclose(stale(**ids).logits, want, atol=1e-3)


def test_the_copy_keeps_the_policys_dtype(tiny_model, tokenizer):
    """A bf16 base gives a bf16 copy: each merged weight is W + delta rounded once to bf16."""
    policy = _policy(tiny_model.to(torch.bfloat16))
    backend = MergedLoRABackend(policy, tokenizer)
    backend.sync_weights(policy)
    layer = policy.get_base_model().model.layers[0].self_attn.q_proj
    merged = backend.model.model.layers[0].self_attn.q_proj.weight
    assert merged.dtype == torch.bfloat16
    delta = layer.get_delta_weight("default").float()
    want = (layer.base_layer.weight.float() + delta).to(torch.bfloat16)
    assert torch.equal(merged, want)


def test_without_lora_the_backend_and_the_params_say_what_it_needs(tiny_model, tokenizer):
    with pytest.raises(InputError, match="train.lora.enabled"):
        MergedLoRABackend(tiny_model, tokenizer)
    with pytest.raises(ValidationError, match="rollout_backend hf_merged needs lora.enabled"):
        TrainParams(rollout_backend="hf_merged")
    assert TrainParams(rollout_backend="hf_merged", lora=LORA).rollout_backend == "hf_merged"


def test_a_sync_copies_what_changed_and_only_that(tiny_model, tokenizer):
    """After the first sync, a frozen weight is not copied again, unless the policy's tensor
    changed in place (a load); the merged layers are, every time."""
    policy = add_lora(copy.deepcopy(tiny_model), LORA)
    backend = MergedLoRABackend(policy, tokenizer)
    backend.sync_weights(policy)
    copied: list[str] = []
    for name, param in backend._params.items():
        original = param.copy_

        def spy(src, *a, _name=name, _original=original, **kw):
            copied.append(_name)
            return _original(src, *a, **kw)

        param.copy_ = spy
    backend.sync_weights(policy)
    base = policy.get_base_model()
    merged = {f"{n}.weight" for n, m in base.named_modules() if hasattr(m, "lora_A")}
    assert merged and set(copied) == merged
    frozen = next(n for n in backend._params if "embed" in n)
    with torch.no_grad():  # a frozen weight changed in place: copied at the next sync
        dict(policy.named_parameters())[f"base_model.model.{frozen}"].add_(1.0)
    copied.clear()
    backend.sync_weights(policy)
    assert frozen in copied
    torch.testing.assert_close(
        backend._params[frozen], dict(policy.named_parameters())[f"base_model.model.{frozen}"]
    )


def test_held_out_evaluation_decodes_with_the_synced_copy(tiny_model, tokenizer, starts_with_7):  # noqa: F811
    """After a step's update the copy is stale; `eval_model` syncs it and hands it to the
    held-out evaluation, and the next rollout batch does not sync again."""
    policy = add_lora(copy.deepcopy(tiny_model), LORA)
    cfg = _cfg(lr=5e-2, rollout_backend="hf_merged", lora=LORA)
    backend = MergedLoRABackend(policy, tokenizer)
    trainer = GRPOTrainer(policy, tokenizer, cfg, backend=backend)
    run(trainer, starts_with_7, steps=1, seed=0)
    model = trainer.sampler.eval_model(policy)
    assert model is backend.model
    ids = tokenizer(PROMPTS[:1], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        torch.testing.assert_close(model(**ids).logits, policy(**ids).logits, atol=1e-5, rtol=0)
    syncs = []
    backend.sync_weights = lambda m: syncs.append(m)
    trainer.sampler.sync_backend()
    assert syncs == []
    plain = GRPOTrainer(add_lora(copy.deepcopy(tiny_model), LORA), tokenizer, _cfg(lora=LORA))
    assert plain.sampler.eval_model(policy) is policy
