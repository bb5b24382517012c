import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_core.rollout import completion_mask_from_ids, generate, token_logprobs


def test_completion_mask_stops_after_first_eos():
    ids = torch.tensor([[5, 1, 0, 0], [5, 6, 7, 8], [1, 1, 0, 0]])
    assert completion_mask_from_ids(ids, eos_id=1).tolist() == [
        [1, 1, 0, 0],
        [1, 1, 1, 1],
        [1, 0, 0, 0],
    ]


def test_char_tokenizer_and_model_round_trip_through_auto_classes(tokenizer, tiny_model, tmp_path):
    tiny_model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    text = "Q: 47+38=?\nA: 7+8=15\n\\boxed{85}"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)  # one token per character, whitespace included
    assert tok.decode(ids) == text
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for p in tiny_model.parameters()
    )


def test_trainer_log_probs_equal_the_samplers(tokenizer, tiny_model):
    """Left-padded prompts of different lengths: scoring must see the same positions."""
    torch.manual_seed(0)
    prompts = ["Q: 4+3=?\nA: ", "Q: 147+38=?\nA: "]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = tiny_model.generate(
        **enc,
        do_sample=True,
        top_k=0,
        max_new_tokens=12,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        output_logits=True,
        return_dict_in_generate=True,
    )
    p = enc["input_ids"].shape[1]
    completion = out.sequences[:, p:]
    mask = completion_mask_from_ids(completion, tokenizer.eos_token_id)
    attn = torch.cat([enc["attention_mask"], mask], dim=1)
    logp, entropy = token_logprobs(tiny_model, out.sequences, attn, p, with_entropy=True)
    sampler = (
        torch.stack(out.logits, 1).log_softmax(-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
    )
    torch.testing.assert_close(logp * mask, sampler * mask, atol=1e-5, rtol=0)
    assert entropy.shape == logp.shape and (entropy >= 0).all()


def test_generate_groups_rows_by_prompt(tokenizer, tiny_model):
    torch.manual_seed(0)
    ro = generate(
        tiny_model,
        tokenizer,
        ["Q: 1+2=?\nA: ", "Q: 33+44=?\nA: "],
        num_samples=3,
        temperature=1.0,
        max_new_tokens=5,
    )
    assert ro.input_ids.shape[0] == 6 and len(ro.texts) == 6
    prompts = tokenizer.batch_decode(ro.input_ids[:, : ro.prompt_len], skip_special_tokens=True)
    assert prompts[:3] == ["Q: 1+2=?\nA: "] * 3 and prompts[3:] == ["Q: 33+44=?\nA: "] * 3
    assert ro.completion_mask.shape[1] <= 5
    has_eos = (ro.completion_ids == tokenizer.eos_token_id).any(dim=1)
    assert ro.truncated.tolist() == (~has_eos).tolist()


def test_concatenated_rollouts_keep_every_rows_log_probs(tokenizer, tiny_model):
    from grpo_core.rollout import concat_rollouts

    torch.manual_seed(0)
    a = generate(tiny_model, tokenizer, ["Q: 1+2=?\nA: "], 2, 1.0, max_new_tokens=3)
    b = generate(tiny_model, tokenizer, ["Q: 123+456=?\nA: "], 2, 1.0, max_new_tokens=7)
    both = concat_rollouts([a, b], tokenizer.pad_token_id)
    assert both.prompt_len == b.prompt_len and both.texts == a.texts + b.texts
    logp_both, _ = token_logprobs(tiny_model, both.input_ids, both.attention_mask, both.prompt_len)
    for part, rows in ((a, slice(0, 2)), (b, slice(2, 4))):
        logp, _ = token_logprobs(tiny_model, part.input_ids, part.attention_mask, part.prompt_len)
        width = part.completion_mask.shape[1]
        got = logp_both[rows, :width] * part.completion_mask
        torch.testing.assert_close(got, logp * part.completion_mask, atol=1e-5, rtol=0)
        assert both.completion_mask[rows, width:].sum() == 0
    sub = both.select([3, 0])
    assert sub.texts == [both.texts[3], both.texts[0]]


def test_guided_rollouts_start_with_the_prefix_and_score_as_sampled(tokenizer, tiny_model):
    """A guided completion is prefix + continuation within max_new_tokens; guide_mask marks
    the prefix; scoring it under the unguided prompt sees the same tokens and positions, so
    the continuation's log-probs equal those of plain scoring of the guided context."""
    from grpo_core.rollout import score_rollouts

    torch.manual_seed(0)
    prompts, prefixes = ["Q: 1+2=?\nA: ", "Q: 33+44=?\nA: "], ["3+", ""]
    ro = generate(tiny_model, tokenizer, prompts, 3, 1.0, max_new_tokens=6, prefixes=prefixes)
    assert all(t.startswith("3+") for t in ro.texts[:3])
    assert ro.guide_mask[:3, :2].sum() == 6 and ro.guide_mask[:3, 2:].sum() == 0
    assert ro.guide_mask[3:].sum() == 0
    assert (ro.lengths <= 6).all()
    has_eos = (ro.completion_ids * ro.completion_mask == tokenizer.eos_token_id).any(dim=1)
    assert ro.truncated.tolist() == (~has_eos).tolist()
    logp, entropy = score_rollouts(tiny_model, ro, 1.0, micro_batch_size=4)
    row = ro.select([0])
    p = row.prompt_len
    direct, _ = token_logprobs(tiny_model, row.input_ids, row.attention_mask, p)
    width = direct.shape[1]
    torch.testing.assert_close(
        logp[:1, :width] * row.completion_mask, direct * row.completion_mask, atol=1e-5, rtol=0
    )
    assert entropy.shape == logp.shape
