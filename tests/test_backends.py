"""The rollout-backend contract, on the HF backend and a tiny local model; the vLLM backend's
output assembly on vLLM-shaped outputs; the truncated importance weights by hand."""

import copy
import dataclasses
import importlib.util
import math
from types import SimpleNamespace

import pytest
import torch

from grpo_core.rollout.backends import (
    HFBackend,
    RolloutBackend,
    check_rollouts,
    truncated_is_weights,
)
from grpo_core.rollout.scoring import score_rollouts
from grpo_core.rollout.vllm import VLLMBackend, policy_weights, rollouts_from_vllm

PROMPTS = ["Q: 1+2=?\nA: ", "Q: 33+44=?\nA: ", "Q: 405+17=?\nA: "]


@pytest.fixture
def backend(tiny_model, tokenizer):
    return HFBackend(tiny_model, tokenizer, micro_batch_size=4)


def test_hf_backend_is_a_rollout_backend(backend):
    assert isinstance(backend, RolloutBackend)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_hf_rollouts_pass_the_contract_and_log_probs_match_the_trainers(
    backend, tokenizer, tiny_model, temperature
):
    torch.manual_seed(0)
    ro = backend.generate(PROMPTS, 4, temperature, max_new_tokens=8)
    check_rollouts(ro, tokenizer, PROMPTS, 4, max_new_tokens=8)
    assert ro.input_ids.shape[0] == 12 and ro.completion_mask.shape[1] <= 8
    # The trainer's log-probs of the same rows, recomputed (not taken from the sampler).
    trainer_logp, _ = score_rollouts(
        tiny_model, dataclasses.replace(ro, sampler_key=None), temperature, micro_batch_size=5
    )
    m = ro.completion_mask.bool()
    torch.testing.assert_close(ro.sampler_logp[m], trainer_logp[m], atol=1e-5, rtol=0)
    # ... so the mismatch correction is 1 on every completion token.
    w = truncated_is_weights(trainer_logp, ro.sampler_logp, ro.completion_mask, cap=2.0)
    torch.testing.assert_close(w[m], torch.ones_like(w[m]), atol=1e-4, rtol=0)
    assert (w[~m] == 0).all()


def test_texts_decode_the_completion_tokens(backend, tokenizer):
    torch.manual_seed(1)
    ro = backend.generate(PROMPTS[:2], 3, 1.0, max_new_tokens=10)
    for i, text in enumerate(ro.texts):
        tokens = ro.completion_ids[i][ro.completion_mask[i].bool()].tolist()
        assert text == tokenizer.decode(tokens, skip_special_tokens=True)


def test_greedy_rows_of_a_prompt_are_identical(backend, tokenizer):
    ro = backend.generate(PROMPTS, 3, 1.0, max_new_tokens=6, greedy=True)
    check_rollouts(ro, tokenizer, PROMPTS, 3, max_new_tokens=6, greedy=True)
    again = backend.generate(PROMPTS, 3, 1.0, max_new_tokens=6, greedy=True)
    assert torch.equal(ro.input_ids, again.input_ids)


def test_the_contract_catches_a_broken_layout(backend, tokenizer):
    torch.manual_seed(3)
    ro = backend.generate(PROMPTS[:2], 2, 1.0, max_new_tokens=6)
    broken = dataclasses.replace(ro, texts=list(reversed(ro.texts)))
    if broken.texts != ro.texts:
        with pytest.raises(AssertionError, match="texts"):
            check_rollouts(broken, tokenizer, PROMPTS[:2], 2, max_new_tokens=6)
    with pytest.raises(AssertionError, match="rows"):
        check_rollouts(ro, tokenizer, PROMPTS, 2, max_new_tokens=6)
    with pytest.raises(AssertionError, match="does not hold prompt"):
        check_rollouts(ro, tokenizer, PROMPTS[1::-1], 2, max_new_tokens=6)
    flipped = dataclasses.replace(ro, truncated=~ro.truncated)
    with pytest.raises(AssertionError, match="truncated"):
        check_rollouts(flipped, tokenizer, PROMPTS[:2], 2, max_new_tokens=6)
    with pytest.raises(AssertionError, match="sampler_logp"):
        check_rollouts(dataclasses.replace(ro, sampler_logp=None), tokenizer)


def _as_vllm_outputs(ro, prompt_ids, n):
    """What vLLM returns for the rollouts `ro`: per prompt a RequestOutput whose samples hold
    the sampled tokens up to EOS, with log-probs."""
    outputs = []
    for k in range(len(prompt_ids)):
        samples = []
        for j in range(n):
            i = k * n + j
            length = int(ro.completion_mask[i].sum())
            tokens = ro.completion_ids[i, :length].tolist()
            logps = ro.sampler_logp[i, :length].tolist()
            steps = [
                {t: SimpleNamespace(logprob=v, rank=1)} for t, v in zip(tokens, logps, strict=True)
            ]
            samples.append(SimpleNamespace(index=j, token_ids=tokens, logprobs=steps))
        outputs.append(SimpleNamespace(outputs=list(reversed(samples))))  # any order
    return outputs


def test_vllm_outputs_are_laid_out_as_the_hf_backends(backend, tokenizer):
    torch.manual_seed(4)
    n, budget = 3, 9
    ro = backend.generate(PROMPTS, n, 1.0, max_new_tokens=budget)
    prompt_ids = tokenizer(PROMPTS, add_special_tokens=False)["input_ids"]
    outputs = _as_vllm_outputs(ro, prompt_ids, n)
    got = rollouts_from_vllm(outputs, prompt_ids, n, budget, tokenizer)
    check_rollouts(got, tokenizer, PROMPTS, n, max_new_tokens=budget)
    assert got.prompt_len == ro.prompt_len and got.texts == ro.texts
    m = ro.completion_mask.bool()
    for name in ("attention_mask", "completion_mask", "truncated"):
        assert torch.equal(getattr(got, name).long(), getattr(ro, name).long()), name
    assert torch.equal(got.input_ids[:, : ro.prompt_len], ro.input_ids[:, : ro.prompt_len])
    assert torch.equal(got.completion_ids[m], ro.completion_ids[m])
    torch.testing.assert_close(got.sampler_logp[m], ro.sampler_logp[m].float())
    assert got.sampler_key is None  # the trainer always recomputes pi_old for vLLM rollouts
    sub = got.select([4, 0])  # the trainer's row selection works on these rollouts
    assert sub.texts == [got.texts[4], got.texts[0]]


def test_vllm_outputs_are_cut_at_the_budget_and_the_first_eos(tokenizer):
    eos = tokenizer.eos_token_id
    a, b = tokenizer("12", add_special_tokens=False)["input_ids"]
    prompt = [tokenizer("Q", add_special_tokens=False)["input_ids"]]

    def sample(index, tokens):
        steps = [{t: SimpleNamespace(logprob=-0.5)} for t in tokens]
        return SimpleNamespace(index=index, token_ids=tokens, logprobs=steps)

    out = SimpleNamespace(outputs=[sample(0, [a, eos]), sample(1, [a, b, a, b]), sample(2, [b])])
    ro = rollouts_from_vllm([out], prompt, 3, max_new_tokens=3, tokenizer=tokenizer)
    assert ro.lengths.tolist() == [2, 3, 1]
    assert ro.truncated.tolist() == [False, True, True]
    assert ro.sampler_logp[1].tolist() == [-0.5, -0.5, -0.5]
    # A greedy request returns one sample, repeated over the prompt's rows.
    greedy = SimpleNamespace(outputs=[sample(0, [a, b, eos])])
    ro = rollouts_from_vllm([greedy], prompt, 2, max_new_tokens=5, tokenizer=tokenizer)
    assert torch.equal(ro.input_ids[0], ro.input_ids[1]) and not ro.truncated.any()


def test_truncated_is_weights_by_hand():
    trainer = torch.tensor([[-1.0, -2.0, -0.3, 5.0], [-0.1, -3.0, 0.0, 0.0]])
    sampler = torch.tensor([[-1.5, -1.0, -0.3, -float("inf")], [-0.1, -5.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    w = truncated_is_weights(trainer, sampler, mask, cap=1.5)
    # exp(0.5) = 1.6487 > 1.5: capped; exp(-1) = 0.3679; equal log-probs: 1; masked: 0 (even
    # where the masked log-prob is -inf); exp(2) = 7.39: capped.
    expected = torch.tensor([[1.5, math.exp(-1.0), 1.0, 0.0], [1.0, 1.5, 0.0, 0.0]])
    torch.testing.assert_close(w, expected)
    assert math.exp(0.5) > 1.5
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(trainer, sampler, mask, cap=0.0)


def test_truncated_is_weights_carry_no_gradient():
    trainer = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    w = truncated_is_weights(trainer, torch.tensor([[-1.0, -1.0]]), torch.ones(1, 2), cap=2.0)
    assert not w.requires_grad


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_backend_without_vllm_says_how_to_install_it(tokenizer):
    with pytest.raises(ImportError, match=r"pip install \.\[vllm\]"):
        VLLMBackend("models/base", tokenizer)


def test_policy_weights_of_a_plain_model_are_its_checkpoint(tiny_model):
    names = [n for n, _ in policy_weights(tiny_model)]
    assert names == [n for n, _ in tiny_model.named_parameters()]


def test_policy_weights_merge_lora_without_touching_the_model(tiny_model, tokenizer):
    from peft import LoraConfig, get_peft_model

    base_copy = copy.deepcopy(tiny_model)
    policy = get_peft_model(
        tiny_model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)
    )
    torch.manual_seed(0)
    with torch.no_grad():  # LoRA starts with B = 0: give the adapters something to merge
        for name, q in policy.named_parameters():
            if "lora_B" in name:
                q.normal_(std=0.1)
    before = {n: q.clone() for n, q in policy.named_parameters()}
    merged = dict(policy_weights(policy))
    assert not any("lora" in n or "base_layer" in n for n in merged)
    for n, q in policy.named_parameters():
        assert torch.equal(q, before[n]), f"{n} changed"
    missing, unexpected = base_copy.load_state_dict(merged, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied to the embeddings
    ids = tokenizer(["Q: 12+34=?\nA: "], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        want = policy(**ids).logits
        got = base_copy(**ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    with torch.no_grad(), policy.disable_adapter():
        assert not torch.allclose(policy(**ids).logits, want, atol=1e-3)  # the merge did something
