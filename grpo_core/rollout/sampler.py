"""Sampling completions from a Hugging Face causal LM with a KV cache (`generate`), in the
padded layout of `grpo_core.rollout.rollouts`.

Where the time goes on a small model (profiled with `benchmarks.step_time`): the forward and
backward passes, not Python. So the savings here are in tokens not recomputed:
- a group's G rows share their prompt: sampling runs the prompt once per group and copies its
  KV cache to the group's rows (`grpo_core.rollout.forward`);
- sampling keeps each sampled token's log-prob and the entropy of its distribution (no extra
  forward: the logits are there already), with the model state and temperature they belong to
  (`_sampler_key`), and `grpo_core.rollout.scoring.score_rollouts` returns them when asked for
  the sampling policy's log-probs at the sampling temperature, instead of a forward over the
  batch; not for a bf16 model (`computes_in_float32`).
Both change results only by float rounding (the same sums, computed in other shapes).

A token is drawn with `torch.multinomial` by default, as `model.generate` draws it: the same
random numbers, so the same completions. It draws one exponential per vocabulary entry, a
third of the time of a CPU generation at SmolLM2's 49,152 tokens; `draw="inverse_cdf"` takes
one uniform per row instead (`inverse_cdf_draw`): the same distribution, other samples.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from grpo_core.rollout.forward import forward, prefill, unwrap
from grpo_core.rollout.kvcache import growing_cache
from grpo_core.rollout.rollouts import Rollouts, completion_mask_from_ids, position_ids_from_mask

# Generation-config fields that make `model.generate` change the logits beyond temperature
# (value: the setting that does nothing). A model whose config sets one samples through
# `generate` itself, so that it keeps sampling exactly as it did.
_NEUTRAL = {
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "sequence_bias": None,
    "min_length": 0,
    "min_new_tokens": 0,
    "min_p": None,
    "top_h": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "renormalize_logits": False,
    "remove_invalid_values": False,
    "watermarking_config": None,
}


def _plain_sampler(model) -> bool:
    """Whether `_sample` reproduces `model.generate` for this model: a decoder-only model
    whose generation config adds no logits processor of its own."""
    if getattr(model.config, "is_encoder_decoder", False):
        return False
    config = getattr(model, "generation_config", None)
    return config is None or all(getattr(config, k, None) in (None, v) for k, v in _NEUTRAL.items())


def computes_in_float32(model) -> bool:
    """Whether the sampler's log-probs stand for a forward's: in float32 they agree to 1e-6,
    but a bf16 model's cached decoding and its forward round apart by hundredths of a nat, so
    its rollouts carry no key and pi_old is scored by the forward the update runs (as verl
    recomputes it): the first update's importance ratio is then exactly 1."""
    return unwrap(model).get_input_embeddings().weight.dtype == torch.float32


def _sampler_key(model, temperature: float) -> tuple:
    """Identifies a model's weights at one moment: parameters' version counters move with
    every in-place update (optimizer steps, load_state_dict)."""
    return (weakref.ref(model), float(temperature), tuple(p._version for p in model.parameters()))


@torch.no_grad()
def _sample(
    model,
    ids: torch.Tensor,
    attn: torch.Tensor,
    max_new_tokens: int,
    temperature: float,
    greedy: bool,
    eos: int,
    pad: int,
    min_new_tokens: int = 0,
    generators: list[torch.Generator] | None = None,
    draw: str = "multinomial",
    record: str = "entropy",
    compact: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Decode up to `max_new_tokens` after the left-padded contexts `ids`, with a KV cache.

    The same steps as `model.generate(do_sample=not greedy, temperature, top_k=0, top_p=1,
    min_new_tokens)`: logits in float32, divided by the temperature, EOS masked while fewer
    than `min_new_tokens` tokens were generated, softmax, one `torch.multinomial` over all rows
    per step (so the same random numbers), finished rows padded, stop when every row has
    emitted EOS. Returns the new tokens (B, T), their log-probs under the model at
    `temperature` (before EOS masking) and the entropies of those distributions (both None
    when greedy: no temperature was sampled at).

    `generators` (one per group of consecutive rows, the rows split evenly among them) draw
    each group's tokens from its own random stream instead of one `torch.multinomial` over
    every row: a group then samples the same tokens whichever other groups share the batch
    (how data-parallel ranks split a step's groups), up to float rounding of the logits.

    `record` (`RECORDS`) says what is kept beside the tokens: "entropy", the log-probs and the
    entropies; "logp", the log-probs, with NaN entropies (a backend's rollouts, whose
    entropies the trainer recomputes); "none", neither (returned as None: an evaluation's
    rollouts). The tokens are the same whichever: only the work differs (the entropy is an
    exp over the whole vocabulary at every step).

    `compact`: rows that have emitted EOS leave the batch (and the KV cache) once a quarter of
    the rows decoded are done, instead of being decoded to the longest row's end. The random
    numbers drawn stay those of every row (`_next_token`), so each row's tokens are the same
    as without, provided the model computes a row's logits the same whatever the other rows.
    They move by float rounding: in float32 a draw at a near tie flips now and then
    (`tests/test_rollout.py` bounds how often); in bf16, where ties are common, most rows
    of SmolLM2 diverge after a few tokens (`tests/test_packaged_model.py`): other completions
    from the same distribution. The log-probs and entropies of a row that left (masked: after
    its EOS) are 0.
    """
    if record not in RECORDS:
        raise ValueError(f"record={record!r}: allowed values are {RECORDS}")
    b = ids.shape[0]
    if generators is not None and (not generators or b % len(generators)):
        raise ValueError(f"{len(generators)} generators for {b} rows: need whole groups")
    pos = position_ids_from_mask(attn)
    cache = growing_cache(unwrap(model).config, reserve=max_new_tokens)
    logits = prefill(model, ids, attn, pos, cache, logits_to_keep=1)[:, -1]
    next_pos = pos[:, -1:]
    unfinished = torch.ones(b, dtype=torch.long, device=ids.device)
    active = None  # the rows still in the batch, when some have left it (`compact`)
    tokens, logps, entropies = [], [], []
    for step in range(max_new_tokens):
        # The logits are not read again: dividing and flooring in place is safe, once they
        # own their memory (a group's rows share one prompt's logits when one prompt is all).
        scores = logits.float().contiguous()  # the rows in the batch
        if not greedy and temperature != 1.0:
            scores = scores.div_(temperature)
        logp_all = None
        if not greedy:
            # The draw's scores floored (`floored`): the same tokens, and the same log-probs
            # of them; the entropies are taken before, so that they too stay as they were.
            exact = scores if record == "entropy" else None
            scores = floored(scores, inplace=exact is None)
            if record != "none":
                logp_all = F.log_softmax(scores if exact is None else exact, dim=-1)
        if step < min_new_tokens:  # scores are this step's own (.float() or the division)
            scores[:, eos] = -float("inf")
        token = _next_token(scores, greedy, generators, draw, active, b)
        token = token * unfinished + pad * (1 - unfinished)
        tokens.append(token)
        if logp_all is not None:
            mine = token if active is None else token[active]
            logps.append(_all_rows(logp_all.gather(1, mine[:, None]).squeeze(1), active, b))
            if record == "entropy":
                entropy = -logp_all.exp().mul_(logp_all).sum(-1)
                entropies.append(_all_rows(entropy, active, b))
        unfinished = unfinished & (token != eos).long()
        if step == max_new_tokens - 1 or not unfinished.any():
            break
        if compact:
            rows = torch.arange(b, device=ids.device) if active is None else active
            done = unfinished[rows] == 0
            if int(done.sum()) * 4 >= len(rows):
                keep = (~done).nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                active, attn, next_pos = rows[keep], attn[keep], next_pos[keep]
        attn = torch.cat([attn, attn.new_ones(attn.shape[0], 1)], dim=1)
        next_pos = next_pos + 1
        step_ids = (token if active is None else token[active])[:, None]
        logits = forward(model, step_ids, attn, next_pos, cache)[:, -1]
    completion = torch.stack(tokens, 1)
    if greedy or record == "none":
        return completion, None, None
    logp = torch.stack(logps, 1)
    if record == "logp":
        return completion, logp, torch.full_like(logp, float("nan"))
    return completion, logp, torch.stack(entropies, 1)


def _all_rows(x: torch.Tensor, rows: torch.Tensor | None, total: int) -> torch.Tensor:
    """`x`, one entry per row in the batch (`rows` of `total`; None: all), as `total` entries,
    0 at the rows that left the batch."""
    if rows is None:
        return x
    return x.new_zeros(total, *x.shape[1:]).index_copy_(0, rows, x)


def _next_token(
    scores: torch.Tensor,
    greedy: bool,
    generators: list[torch.Generator] | None,
    draw: str = "multinomial",
    rows: torch.Tensor | None = None,
    total: int | None = None,
) -> torch.Tensor:
    """One token per row from `scores` (B, V): the argmax, or a draw over every row from
    torch's global generator, or one per group of rows from that group's generator. The draw
    is `torch.multinomial` or, with `draw="inverse_cdf"`, `inverse_cdf_draw`.

    `rows`: the scores are those of these rows of `total` (the rest left the batch); the
    random numbers drawn are still those of all `total` rows, so each row's draw is the one it
    would have had, and the rows not there get token 0."""
    if greedy:
        return _all_rows(torch.argmax(scores, dim=-1), rows, total)
    if draw not in DRAWS:
        raise ValueError(f"draw={draw!r}: allowed values are {DRAWS}")
    probs = F.softmax(scores, dim=-1)
    size = probs.shape[0] if rows is None else total
    parts = [(size, None)]
    if generators is not None:
        parts = [(size // len(generators), gen) for gen in generators]
    if draw == "multinomial":
        if rows is not None:  # it draws for every row it is given: give it every row
            probs = probs.new_ones(total, probs.shape[1]).index_copy_(0, rows, probs)
        drawn, first = [], 0
        for n, gen in parts:
            drawn.append(torch.multinomial(probs[first : first + n], 1, generator=gen))
            first += n
        token = torch.cat(drawn).squeeze(1)
        return token if rows is None else _all_rows(token[rows], rows, total)
    u = torch.cat(
        [torch.rand(n, dtype=torch.float64, device=probs.device, generator=gen) for n, gen in parts]
    )
    if rows is not None:
        u = u[rows]
    return _all_rows(inverse_cdf_draw(probs, u), rows, total)


# e^-87 = 1.6e-38, the smallest float32 exp that is not subnormal (see `floored`).
SCORE_FLOOR = 87.0


def floored(scores: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """`scores` (B, V) raised to at least each row's maximum less `SCORE_FLOOR`.

    softmax and log_softmax take exp(score - max); below -87.3 that exp is subnormal or 0, and
    torch's vectorised exp then takes a slow path: at a temperature of 0.2 most of a real
    vocabulary is there, and the two softmaxes were a fifth of a SmolLM2 generation. Floored,
    those entries weigh e^-87 / total instead of a subnormal or 0, which no float32 sum that
    holds the row's maximum (e^0 = 1) can see: every other probability, each log-prob of a
    token that is not floored, and so every draw, are the same bit for bit. (A floored token
    could be drawn only by a uniform of exactly 0, probability 2^-53 per draw, where
    `inverse_cdf_draw` takes the first token whose interval is not empty.) An entropy does
    see them (-p log p summed over tens of thousands of them: up to 1e-31 nats), which is why
    the sampler takes its entropies before flooring."""
    floor = scores.amax(dim=-1, keepdim=True).sub_(SCORE_FLOOR)
    return scores.clamp_(min=floor) if inplace else scores.clamp(min=floor)


DRAWS = ("multinomial", "inverse_cdf")
RECORDS = ("entropy", "logp", "none")


def inverse_cdf_draw(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The token of each row of `probs` (B, V) whose cumulative-probability interval holds
    `u` (B,), uniform in [0, 1): the first index i with u * total < cdf[i], cumulated in
    float64. A token of probability 0 has an empty interval, so it is never drawn; where
    u * total rounds up to the total, the last token whose interval is not empty is."""
    cdf = probs.cumsum(dim=-1, dtype=torch.float64)
    target = (u.double() * cdf[:, -1]).unsqueeze(1)
    index = torch.searchsorted(cdf, target, right=True).squeeze(1)
    # Rows past the end (u * total rounded up to the total) take the first token at which the
    # cumulative reaches the total: its interval is not empty, so its probability is not 0.
    # Any index inside the vocabulary is at most that one (cdf[index] > target), so the
    # minimum changes nothing else, and costs one search a row, with no host sync on a GPU.
    full = torch.searchsorted(cdf, cdf[:, -1:].contiguous(), right=False).squeeze(1)
    return torch.minimum(index, full)


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: list[str],
    num_samples: int,
    temperature: float,
    max_new_tokens: int,
    greedy: bool = False,
    min_new_tokens: int = 0,
    generators: list[torch.Generator] | None = None,
    draw: str = "multinomial",
    record: str = "entropy",
    compact: bool = False,
) -> Rollouts:
    """Sample `num_samples` completions per prompt; rows are grouped prompt by prompt.

    Each completion has at most `max_new_tokens` tokens. `greedy` decodes the most likely
    token at every step instead (temperature is then ignored). `min_new_tokens` > 0 keeps EOS
    from being sampled before that many tokens (its probability is set to 0 and the rest
    renormalised): with `min_new_tokens == max_new_tokens` every completion has exactly that
    length, which benchmarks use to compare trainers at equal lengths. Off (0) in training.

    `generators` (one per prompt) give each prompt's group its own random stream (see
    `_sample`); None samples from torch's global generator, exactly as `model.generate`. A
    model that samples through `model.generate` (`_plain_sampler` false) ignores them, and
    `draw` ("multinomial", as `model.generate`, or "inverse_cdf": see the module's doc).

    `record` ("entropy", "logp" or "none", see `_sample`): what the rollouts carry beside the
    tokens. Rollouts without entropies carry no `sampler_key`, so the trainer never takes
    their log-probs and entropies for a forward's. `compact`: finished rows leave the batch
    (see `_sample`).
    """
    if generators is not None and len(generators) != len(prompts):
        raise ValueError(f"{len(generators)} generators for {len(prompts)} prompts")
    repeated = [p for p in prompts for _ in range(num_samples)]
    # Left padding whatever the tokenizer's own setting (Qwen's pads on the right).
    enc = tokenizer(
        repeated, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
    )
    enc = {k: v.to(model.device) for k, v in enc.items()}
    eos = tokenizer.eos_token_id
    pad = eos if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    logp = entropy = key = None
    if _plain_sampler(model):
        completion, logp, entropy = _sample(
            model,
            enc["input_ids"],
            enc["attention_mask"],
            max_new_tokens,
            temperature,
            greedy,
            eos,
            pad,
            min_new_tokens,
            generators=generators,
            draw=draw,
            record=record,
            compact=compact,
        )
        if not greedy and record == "entropy" and computes_in_float32(model):
            key = _sampler_key(model, temperature)
    else:
        completion = _generate_hf(
            model, tokenizer, enc, temperature, max_new_tokens, greedy, min_new_tokens
        )
    return _rollouts(enc, completion, tokenizer, logp, entropy, key)


def _rollouts(
    enc: dict,
    completion: torch.Tensor,
    tokenizer,
    logp: torch.Tensor | None,
    entropy: torch.Tensor | None,
    key: tuple | None,
) -> Rollouts:
    """The encoded (left-padded) prompts followed by their sampled completions, each masked up
    to and including its first EOS."""
    eos = tokenizer.eos_token_id
    cmask = completion_mask_from_ids(completion, eos)
    truncated = ~(completion == eos).any(dim=1)
    return Rollouts(
        input_ids=torch.cat([enc["input_ids"], completion], dim=1),
        attention_mask=torch.cat([enc["attention_mask"], cmask], dim=1),
        completion_mask=cmask,
        prompt_len=enc["input_ids"].shape[1],
        texts=tokenizer.batch_decode(completion, skip_special_tokens=True),
        truncated=truncated,
        sampler_logp=logp,
        sampler_entropy=entropy,
        sampler_key=key,
    )


def _generate_hf(
    model, tokenizer, enc: dict, temperature, max_new_tokens, greedy, min_new_tokens
) -> torch.Tensor:
    """The completion tokens (B, T) of `model.generate` itself, for a model whose generation
    config `_sample` does not reproduce."""
    decoding = (
        {"do_sample": False}
        if greedy
        else {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    )
    out = model.generate(
        **enc,
        **decoding,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        min_new_tokens=min_new_tokens or None,
    )
    return out[:, enc["input_ids"].shape[1] :]
