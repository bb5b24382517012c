import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import grpo_core.rollout.sampler as sampler_module
from grpo_core.config.model import TinyModelParams
from grpo_core.models.tiny import build_tiny_model
from grpo_core.rollout.rollouts import completion_mask_from_ids
from grpo_core.rollout.sampler import generate
from grpo_core.rollout.scoring import token_logprobs


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
    from grpo_core.rollout.rollouts import concat_rollouts

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


# ---- the sampler: model.generate's tokens, with its log-probs; shared prompts ---------------

PROMPTS = ["Q: 4+3=?\nA: ", "Q: 147+38=?\nA: ", "Q: 12+9=?\nA: "]


def raise_eos(model, tokenizer, by: float):
    """Raise EOS's logit by `by` (a hook on the LM head, so `model.generate` and ours see the
    same logits): rows then end at different steps, within the budget. Returns the handle."""
    boost = torch.zeros(len(tokenizer))
    boost[tokenizer.eos_token_id] = by
    return model.lm_head.register_forward_hook(lambda mod, args, out: out + boost)


@pytest.fixture
def eos_likely(tiny_model, tokenizer):
    handle = raise_eos(tiny_model, tokenizer, 1.0)
    yield tiny_model
    handle.remove()


@pytest.mark.parametrize(
    "decoding",
    [
        {"temperature": 1.0},
        {"temperature": 0.7},
        {"temperature": 0.7, "min_new_tokens": 5},
        {"greedy": True, "eos_boost": 0.5},  # 1.0 makes EOS the argmax at once
    ],
)
def test_generate_samples_the_tokens_model_generate_samples(tokenizer, tiny_model, decoding):
    """Same seed, same tokens, same random numbers consumed: our sampling loop (shared prompt
    prefill, KV cache) is `model.generate` with top_k=0, top_p=1 and the same stopping."""
    model, n, budget = tiny_model, 4, 40
    raise_eos(model, tokenizer, decoding.get("eos_boost", 1.0))
    greedy = decoding.get("greedy", False)
    temperature = decoding.get("temperature", 1.0)
    min_new = decoding.get("min_new_tokens", 0)
    torch.manual_seed(0)
    ro = generate(
        model, tokenizer, PROMPTS, n, temperature, budget, greedy=greedy, min_new_tokens=min_new
    )
    after_ours = torch.rand(3)
    enc = tokenizer(
        [p for p in PROMPTS for _ in range(n)],
        return_tensors="pt",
        padding=True,
        add_special_tokens=False,
    )
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    torch.manual_seed(0)
    out = model.generate(
        **enc,
        **({"do_sample": False} if greedy else sampling),
        max_new_tokens=budget,
        min_new_tokens=min_new or None,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    assert torch.equal(ro.input_ids, out)
    assert torch.equal(torch.rand(3), after_ours)
    lengths = ro.lengths
    assert ro.input_ids.shape[1] - ro.prompt_len < budget  # every row ended: stopped early
    assert lengths.min() < lengths.max() and lengths.min() >= max(min_new, 1)


def test_exact_length_with_min_new_tokens(tokenizer, eos_likely):
    torch.manual_seed(0)
    ro = generate(eos_likely, tokenizer, PROMPTS, 3, 1.0, 7, min_new_tokens=7)
    assert ro.lengths.tolist() == [7] * 9 and ro.truncated.all()


def test_sampler_log_probs_are_the_scores_and_stand_in_for_them(tokenizer, eos_likely):
    """The sampler's log-probs and entropies equal a scoring pass (float rounding); scoring
    returns them while the weights are those that sampled at that temperature, and scores
    anew after a weight update or at another temperature."""
    from grpo_core.rollout.rollouts import concat_rollouts
    from grpo_core.rollout.scoring import score_rollouts

    model = eos_likely
    torch.manual_seed(0)
    ro = generate(model, tokenizer, PROMPTS, 4, 0.8, 20)
    mask = ro.completion_mask.bool()
    logp, entropy = token_logprobs(
        model, ro.input_ids, ro.attention_mask, ro.prompt_len, 0.8, with_entropy=True
    )
    torch.testing.assert_close(ro.sampler_logp[mask], logp[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(ro.sampler_entropy[mask], entropy[mask], atol=1e-5, rtol=0)
    assert score_rollouts(model, ro, 0.8, 5)[0] is ro.sampler_logp
    # carried through select and concat (same sampler); rescored at another temperature
    sub = concat_rollouts([ro.select([2, 0]), ro.select([5])], tokenizer.pad_token_id)
    assert torch.equal(score_rollouts(model, sub, 0.8, 5)[0], ro.sampler_logp[[2, 0, 5]])
    assert score_rollouts(model, ro, 1.0, 5)[0] is not ro.sampler_logp
    with torch.no_grad():
        model.model.norm.weight.mul_(1.5)  # an in-place update, as an optimizer step
    rescored, _ = score_rollouts(model, ro, 0.8, 5)
    assert not torch.allclose(rescored[mask], ro.sampler_logp[mask], atol=1e-3)
    fresh, _ = token_logprobs(model, ro.input_ids, ro.attention_mask, ro.prompt_len, 0.8)
    torch.testing.assert_close(rescored, fresh, atol=1e-6, rtol=0)


@pytest.mark.parametrize("draw", ["multinomial", "inverse_cdf"])
def test_what_the_sampler_records_changes_the_work_not_the_tokens(tokenizer, eos_likely, draw):
    """`record="logp"` keeps the same tokens and log-probs with NaN entropies, "none" the
    same tokens with neither; neither carries a sampler key, so scoring runs a forward; a
    name not in RECORDS is refused."""
    from grpo_core.rollout.scoring import score_rollouts

    runs = {}
    for record in ("entropy", "logp", "none"):
        torch.manual_seed(0)
        runs[record] = generate(
            eos_likely, tokenizer, PROMPTS, 4, 0.8, 20, draw=draw, record=record
        )
    full, logp_only, bare = runs["entropy"], runs["logp"], runs["none"]
    assert torch.equal(full.input_ids, logp_only.input_ids)
    assert torch.equal(full.input_ids, bare.input_ids)
    assert torch.equal(full.sampler_logp, logp_only.sampler_logp)
    assert logp_only.sampler_entropy.isnan().all() and not full.sampler_entropy.isnan().any()
    assert bare.sampler_logp is None and bare.sampler_entropy is None
    assert full.sampler_key is not None
    assert logp_only.sampler_key is None and bare.sampler_key is None
    assert score_rollouts(eos_likely, logp_only, 0.8, 5)[0] is not logp_only.sampler_logp
    with pytest.raises(ValueError, match="record='entropies'"):
        generate(eos_likely, tokenizer, PROMPTS, 1, 0.8, 5, record="entropies")


@pytest.mark.parametrize("draw", ["multinomial", "inverse_cdf"])
def test_finished_rows_leave_the_batch_once_a_quarter_are_done(tokenizer, eos_likely, draw):
    """`compact`: a generation's forwards shrink from 12 rows as rows end (never before a
    quarter of those decoded are done), and the draws are the ones every row would have had:
    the same tokens, log-probs and entropies within float rounding (a draw at a near tie may
    flip: at most one row in eight)."""
    from tests.sampler_reference import assert_compaction_keeps_draws

    smallest, _ = assert_compaction_keeps_draws(eos_likely, tokenizer, PROMPTS, 0.8, 20, 1e-5)
    assert smallest < 12

    sizes = []
    forward = sampler_module.forward

    def spy(model, ids, *args, **kw):
        sizes.append(ids.shape[0])
        return forward(model, ids, *args, **kw)

    torch.manual_seed(0)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sampler_module, "forward", spy)
        ro = generate(eos_likely, tokenizer, PROMPTS, 4, 0.8, 20, draw=draw, compact=True)
    ended = (ro.input_ids[:, ro.prompt_len :] == tokenizer.eos_token_id).cumsum(1) > 0
    current, expected = set(range(12)), []
    for step in range(len(sizes)):  # the forward after each drawn token (the prompt's: not spied)
        done = {r for r in current if ended[r, step]}
        if 4 * len(done) >= len(current):
            current -= done
        expected.append(len(current))
    assert sizes == expected and expected[-1] < 12


def test_shared_prompts_give_the_log_probs_and_gradients_of_one_pass_per_row(tokenizer):
    """Groups of rows with one prompt: `token_logprobs` runs each prompt once and lets its
    rows attend to the copied KV cache. Against the definition (one forward over every row,
    the logits at the positions before each completion token), in float64: equal values,
    gradients equal to float32 rounding (the log-softmax is float32)."""
    params = TinyModelParams(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    model = build_tiny_model(tokenizer, params, seed=0).double().train()
    torch.manual_seed(0)
    ro = generate(model.eval(), tokenizer, PROMPTS, 4, 1.0, 9)
    model.train()
    ids, attn, p = ro.input_ids, ro.attention_mask, ro.prompt_len
    weights = torch.linspace(-1, 1, len(ids), dtype=torch.float64)[:, None] * ro.completion_mask

    logp, entropy = token_logprobs(model, ids, attn, p, 0.7, with_entropy=True)
    grads = torch.autograd.grad((logp * weights).sum(), list(model.parameters()))

    pos = (attn.cumsum(1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits
    ref_all = (logits[:, p - 1 : -1].float() / 0.7).log_softmax(-1)
    ref = ref_all.gather(-1, ids[:, p:, None]).squeeze(-1)
    ref_grads = torch.autograd.grad((ref * weights).sum(), list(model.parameters()))
    mask = ro.completion_mask.bool()
    torch.testing.assert_close(logp[mask], ref[mask], atol=1e-6, rtol=0)
    ref_entropy = -(ref_all.exp() * ref_all).sum(-1)
    torch.testing.assert_close(entropy[mask], ref_entropy[mask].detach(), atol=1e-6, rtol=0)
    scale = max(g.abs().max().item() for g in ref_grads)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, atol=1e-6 * scale, rtol=0)


@pytest.mark.parametrize("draw", ["multinomial", "inverse_cdf"])
def test_per_group_generators_sample_a_group_alike_whatever_shares_its_batch(
    tokenizer, eos_likely, draw
):
    """With one generator per prompt, a group's tokens depend on its generator only, not on
    which other groups are sampled beside it (how data-parallel processes split a step), and
    the global generator is left alone, whichever way a token is drawn."""

    def gens(seeds):
        return [torch.Generator().manual_seed(s) for s in seeds]

    def sample(prompts, seeds):
        return generate(
            eos_likely, tokenizer, prompts, 4, 1.0, 20, generators=gens(seeds), draw=draw
        )

    torch.manual_seed(0)
    before = torch.get_rng_state()
    whole = sample(PROMPTS, [1, 2, 3])
    assert torch.equal(torch.get_rng_state(), before)
    parts = [sample(PROMPTS[:1], [1]), sample(PROMPTS[1:], [2, 3])]
    texts = [t for part in parts for t in part.texts]
    assert texts == whole.texts and len(set(texts)) > 3
    other = sample(PROMPTS, [1, 2, 4])
    assert other.texts[:8] == whole.texts[:8] and other.texts[8:] != whole.texts[8:]
    with pytest.raises(ValueError, match="2 generators for 3 prompts"):
        generate(eos_likely, tokenizer, PROMPTS, 4, 1.0, 20, generators=gens([1, 2]))


def test_one_prompt_sampled_many_times_at_temperature_one(tiny_model, tokenizer):
    """One prompt's group shares one prompt pass, whose logits every row then views (no copy
    of its own): the sampler's in-place division and floor must not write through that view
    (it raised "more than one element of the written-to tensor refers to a single memory
    location" once the floor was in place)."""
    from grpo_core.rollout.sampler import DRAWS, RECORDS, generate

    for draw in DRAWS:
        for record in RECORDS:
            ro = generate(tiny_model, tokenizer, ["Q: 1+1=?"], 4, 1.0, 5, draw=draw, record=record)
            assert ro.input_ids.shape[0] == 4
