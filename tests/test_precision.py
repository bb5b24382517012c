"""How a stage computes and samples (`dtype`, `draw`): bfloat16 parameters with float32 LoRA
adapters and a float32 saved policy (grpo_core/models/precision.py, stages/train.py), and the
inverse-CDF token draw (grpo_core/rollout/sampler.py), on hand-computed cases; and the warning
for bf16 on a CPU without bf16 units."""

import math

import pytest
import torch

from grpo_core.config.core import ParamsError
from grpo_core.config.params import parse_params
from grpo_core.models.precision import set_dtype
from grpo_core.rollout.sampler import _next_token, inverse_cdf_draw

PROBS = [0.1, 0.0, 0.6, 0.3]  # cumulative: 0.1, 0.1, 0.7, 1.0


@pytest.mark.parametrize(
    ("u", "token"),
    [(0.0, 0), (0.05, 0), (0.15, 2), (0.69, 2), (0.71, 3), (0.99, 3)],
)
def test_inverse_cdf_draws_the_token_whose_interval_holds_u(u, token):
    """Token i owns [cdf[i-1], cdf[i]): 0.05 falls in token 0's [0, 0.1), 0.15 in token 2's
    [0.1, 0.7) (token 1's interval [0.1, 0.1) is empty), 0.71 in token 3's [0.7, 1)."""
    drawn = inverse_cdf_draw(torch.tensor([PROBS]), torch.tensor([u]))
    assert drawn.tolist() == [token]


def test_a_token_of_probability_zero_is_never_drawn_even_at_the_ends():
    """u = 0 skips a leading zero; u * total rounding up to the total (u = 1.0 here) gives the
    last token whose interval is not empty, not the zero-probability token after it."""
    probs = torch.tensor([[0.0, 0.3, 0.7], [0.5, 0.5, 0.0], [0.0, 1.0, 0.0]])
    assert inverse_cdf_draw(probs, torch.tensor([0.0, 1.0, 1.0])).tolist() == [1, 1, 1]
    assert inverse_cdf_draw(probs, torch.tensor([0.0, 0.0, 0.0])).tolist() == [1, 0, 1]


def test_only_rows_past_the_end_are_sent_back_to_their_last_non_zero_token():
    """Rows of one batch: u inside the total keeps its interval's token (zero-probability
    tails never reached), u * total rounded up to the total (u = 1) falls back to the last
    token of non-zero probability of its own row, whichever other rows do; and a whole
    random batch draws what the reference (a search, then the last non-zero token for rows
    past the end) draws."""
    probs = torch.tensor([[0.2, 0.8, 0.0, 0.0], [0.5, 0.0, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]])
    u = torch.tensor([1.0, 0.4, 1.0], dtype=torch.float64)
    assert inverse_cdf_draw(probs, u).tolist() == [1, 0, 3]
    assert inverse_cdf_draw(probs, torch.tensor([0.9, 0.99, 0.5])).tolist() == [1, 2, 2]
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(64, 500) * 4, -1)
    probs[:, 400:] = 0.0  # a zero tail, as a masked vocabulary
    u = torch.rand(64, dtype=torch.float64)
    u[:8] = 1.0
    cdf = probs.double().cumsum(-1)
    ref = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1), right=True).squeeze(1)
    last = 499 - (probs.flip(1) > 0).int().argmax(dim=1)
    assert torch.equal(inverse_cdf_draw(probs, u), torch.minimum(ref, last))


def test_inverse_cdf_samples_the_softmax_distribution():
    """20,000 draws of one row's distribution (logits log(PROBS), EOS-style -inf for token 1):
    each token's frequency within 4 standard errors of its probability, token 1 never."""
    n = 20_000
    scores = torch.log(torch.tensor(PROBS)).expand(n, -1)
    gens = [torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)]
    drawn = _next_token(scores, greedy=False, generators=gens, draw="inverse_cdf")
    freq = torch.bincount(drawn, minlength=4).double() / n
    for p, f in zip(PROBS, freq.tolist(), strict=True):
        assert abs(f - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-12
    assert freq[1] == 0


def test_the_default_draw_is_torch_multinomial():
    """`draw="multinomial"` (the default) takes torch's global stream as torch.multinomial does
    (the random numbers of `model.generate`)."""
    scores = torch.randn(6, 11)
    torch.manual_seed(3)
    expected = torch.multinomial(torch.softmax(scores, -1), 1).squeeze(1)
    torch.manual_seed(3)
    assert torch.equal(_next_token(scores, greedy=False, generators=None), expected)
    with pytest.raises(ValueError, match="draw='gumbel'"):
        _next_token(scores, greedy=False, generators=None, draw="gumbel")


@pytest.mark.parametrize("draw", ["multinomial", "inverse_cdf", "greedy"])
@pytest.mark.parametrize("streams", ["global", "per group"])
def test_rows_that_left_the_batch_still_draw_so_the_others_keep_their_tokens(draw, streams):
    """`_next_token` given the scores of rows 0, 2, 3 and 5 of 6 (rows 1 and 4 have left the
    batch): the random numbers of all 6 rows are drawn, so each row there gets the token it
    gets when every row is there, and the rows that left get 0."""
    scores = torch.randn(6, 40) * 3
    rows = torch.tensor([0, 2, 3, 5])

    def run(s, **kw):
        torch.manual_seed(7)
        gens = None
        if streams == "per group":
            gens = [torch.Generator().manual_seed(i) for i in range(3)]
        if draw == "greedy":
            return _next_token(s, greedy=True, generators=gens, **kw)
        return _next_token(s, greedy=False, generators=gens, draw=draw, **kw)

    every = run(scores)
    some = run(scores[rows], rows=rows, total=6)
    assert torch.equal(some[rows], every[rows])
    assert some[[1, 4]].tolist() == [0, 0]
    assert len(set(every.tolist())) > 1  # the draws are not all one token


def test_bfloat16_casts_the_parameters_and_keeps_the_buffers(tiny_model):
    """Every parameter bf16; buffers (the rotary inverse frequencies) as they were; the logits'
    softmax still in float32 in the sampler. float32 leaves the model alone."""
    buffers = {n: b.dtype for n, b in tiny_model.named_buffers()}
    assert set_dtype(tiny_model, "float32") is tiny_model
    assert all(p.dtype == torch.float32 for p in tiny_model.parameters())
    set_dtype(tiny_model, "bfloat16")
    assert all(p.dtype == torch.bfloat16 for p in tiny_model.parameters())
    assert {n: b.dtype for n, b in tiny_model.named_buffers()} == buffers
    assert any(d == torch.float32 for d in buffers.values())  # inv_freq
    with pytest.raises(ValueError, match="dtype='float16'"):
        set_dtype(tiny_model, "float16")


def test_bfloat16_training_needs_lora_and_names_the_key():
    with pytest.raises(ParamsError, match="dtype bfloat16 needs lora.enabled: true"):
        parse_params({"train": {"dtype": "bfloat16"}})
    with pytest.raises(ParamsError, match=r"train.draw: got 'gumbel'"):
        parse_params({"train": {"draw": "gumbel"}})
    with pytest.raises(ParamsError, match=r"eval.dtype: got 'float16'"):
        parse_params({"eval": {"dtype": "float16"}})
    params = parse_params({"train": {"dtype": "bfloat16", "lora": {"enabled": True}}})
    assert params.train.dtype == "bfloat16" and params.eval.dtype == "float32"
    assert params.train.draw == params.profile.draw == "multinomial"


def test_a_bfloat16_lora_policy_is_merged_and_saved_in_float32(
    tiny_model, tokenizer, tmp_path, monkeypatch
):
    """stages.train.save_policy on a bf16 run: the float32 adapters are merged into the
    float32 base (`float32_policy`), exactly as a float32 run with the same adapters; merged
    into the bf16 weights instead, the update would be rounded away in part."""
    from grpo_core.models.loading import load_model
    from grpo_core.training.lora import add_lora
    from stages.train import float32_policy

    base = tmp_path / "models/base"
    tiny_model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    params = parse_params(
        {"train": {"dtype": "bfloat16", "lora": {"enabled": True, "r": 2, "alpha": 2}}}
    )
    monkeypatch.chdir(tmp_path)  # float32_policy reads models/base
    policy = add_lora(set_dtype(load_model(base)[0], "bfloat16"), params.train.lora)
    adapters = {n: p for n, p in policy.named_parameters() if p.requires_grad}
    assert adapters and all(p.dtype == torch.float32 for p in adapters.values())
    torch.manual_seed(0)
    with torch.no_grad():
        for p in adapters.values():
            p.copy_(torch.randn_like(p) * 1e-3)
    saved = float32_policy(policy, params).merge_and_unload()
    reference = add_lora(load_model(base)[0], params.train.lora)
    reference.load_state_dict(
        {n: p for n, p in policy.state_dict().items() if "lora_" in n}, strict=False
    )
    reference = reference.merge_and_unload()
    rounded = policy.merge_and_unload()
    for (name, w), r in zip(
        saved.state_dict().items(), reference.state_dict().values(), strict=True
    ):
        assert w.dtype == torch.float32, name
        assert torch.equal(w, r), name
    q = "model.layers.0.self_attn.q_proj.weight"
    original = tiny_model.state_dict()[q]
    kept = saved.state_dict()[q] - original
    lost = rounded.state_dict()[q].float() - original
    assert kept.abs().max() > 0 and not torch.allclose(kept, lost, atol=1e-6)


def test_a_bfloat16_models_rollouts_are_rescored_by_the_forward(tiny_model, tokenizer):
    """A float32 model's rollouts carry the sampler's key, so pi_old is the sampler's own
    log-probs; a bf16 model's carry none (its cached decoding and its forward round apart),
    so pi_old is the forward's and the first update's ratio is exactly 1."""
    from grpo_core.rollout.sampler import generate
    from grpo_core.rollout.scoring import score_rollouts, token_logprobs

    prompts = ["Q: 47+38=?\nA: ", "Q: 3+5=?\nA: "]
    torch.manual_seed(0)
    ro = generate(tiny_model, tokenizer, prompts, 3, 1.0, 12)
    assert ro.sampler_key is not None
    assert score_rollouts(tiny_model, ro, 1.0, 64)[0] is ro.sampler_logp
    bf16 = set_dtype(tiny_model, "bfloat16")
    torch.manual_seed(0)
    ro = generate(bf16, tokenizer, prompts, 3, 1.0, 12, draw="inverse_cdf")
    assert ro.sampler_key is None and ro.sampler_logp is not None
    old, _ = score_rollouts(bf16, ro, 1.0, 64)
    with torch.no_grad():
        forward, _ = token_logprobs(bf16, ro.input_ids, ro.attention_mask, ro.prompt_len)
    mask = ro.completion_mask.bool()
    assert torch.equal(old[mask], forward[mask])


@pytest.mark.parametrize("native", [True, False])
def test_bfloat16_on_a_cpu_without_bf16_units_warns(tiny_model, monkeypatch, caplog, native):
    """On an AVX2-only CPU torch multiplies bf16 with fallbacks (8-140x slower than float32:
    benchmarks/results/cpu-matmul-avx2.md): `set_dtype` says so, naming the CPU, and
    still casts (the run is valid, only slow); float32 never warns."""
    import copy
    import logging

    from grpo_core.models import precision

    monkeypatch.setattr(precision, "bf16_is_native", lambda: native)
    with caplog.at_level(logging.WARNING, logger=precision.__name__):
        assert precision.set_dtype(tiny_model, "float32") is tiny_model
        assert caplog.records == []
        model = precision.set_dtype(copy.deepcopy(tiny_model), "bfloat16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    warned = [r.getMessage() for r in caplog.records]
    assert bool(warned) is not native
    if warned:
        assert precision.cpu_name() in warned[0] and "float32" in warned[0]


def test_bf16_support_follows_the_cpus_flags():
    """A CPU with AMX or AVX512-BF16 multiplies bf16 in hardware; one without AVX-512 does
    not (the flags as Linux lists them; other CPUs are not asserted on)."""
    from pathlib import Path

    from grpo_core.models import precision

    info = Path("/proc/cpuinfo")
    if not info.exists():
        pytest.skip("no /proc/cpuinfo")
    flags = next(
        (line.split(":", 1)[1].split() for line in info.read_text().splitlines()
         if line.startswith("flags")), [],
    )  # fmt: skip
    if "amx_bf16" in flags or "avx512_bf16" in flags:
        assert precision.bf16_is_native() is True
    elif "avx512f" not in flags:
        assert precision.bf16_is_native() is False
    assert precision.cpu_name() != "unknown CPU"
