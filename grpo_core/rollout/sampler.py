"""Rollouts from a Hugging Face causal LM, and the token log-probs the loss needs.

Sequences are laid out as [left-padded prompt | completion right-padded], the layout
`generate` returns. Position ids are derived from the attention mask both when sampling and
when scoring, so the trainer's log-probs equal the sampler's.

Guided rollouts (Off-Context GRPO) have the same layout: the completion starts with the guide
prefix, which the sampler was given rather than sampled, and `guide_mask` marks those tokens.

Where the time goes on a small model (profiled with `benchmarks.step_time`): the forward and
backward passes, not Python. So the savings here are in tokens not recomputed:
- a group's G rows share their prompt: sampling runs the prompt once per group and copies its
  KV cache to the group's rows, and scoring does the same, with gradients flowing back through
  the shared prompt (`token_logprobs`);
- sampling keeps each sampled token's log-prob and the entropy of its distribution (no extra
  forward: the logits are there already), and `score_rollouts` returns them when asked for the
  sampling policy's log-probs at the sampling temperature, instead of a forward over the batch.
Both change results only by float rounding (the same sums, computed in other shapes).
"""

from __future__ import annotations

import functools
import inspect
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


@dataclass
class Rollouts:
    input_ids: torch.Tensor  # (B, P + T) prompt (left-padded) then completion
    attention_mask: torch.Tensor  # (B, P + T)
    completion_mask: torch.Tensor  # (B, T) 1 on completion tokens up to and including EOS
    prompt_len: int  # P
    texts: list[str]  # decoded completions, special tokens removed
    truncated: torch.Tensor  # (B,) bool: no EOS within max_new_tokens
    guide_mask: torch.Tensor | None = None  # (B, T) 1 on guide-prefix tokens; None: zeros
    # The sampler's token log-probs and entropies (B, T) at its temperature, and which model,
    # weights and temperature they belong to (`_sampler_key`); None where not recorded.
    sampler_logp: torch.Tensor | None = None
    sampler_entropy: torch.Tensor | None = None
    sampler_key: tuple | None = None
    # Per-token weights correcting for a sampler other than the policy (a vLLM engine):
    # truncated importance weights min(pi_old / q, cap), 1 where not applicable; None: none.
    is_weight: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.guide_mask is None:
            self.guide_mask = torch.zeros_like(self.completion_mask)

    @property
    def completion_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len :]

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1)

    def select(self, rows: torch.Tensor | list[int]) -> Rollouts:
        rows = torch.as_tensor(rows, dtype=torch.long, device=self.input_ids.device)
        recorded = self.sampler_logp is not None
        return Rollouts(
            input_ids=self.input_ids[rows],
            attention_mask=self.attention_mask[rows],
            completion_mask=self.completion_mask[rows],
            prompt_len=self.prompt_len,
            texts=[self.texts[i] for i in rows.tolist()],
            truncated=self.truncated[rows],
            guide_mask=self.guide_mask[rows],
            sampler_logp=self.sampler_logp[rows] if recorded else None,
            sampler_entropy=self.sampler_entropy[rows] if recorded else None,
            sampler_key=self.sampler_key if recorded else None,
            is_weight=None if self.is_weight is None else self.is_weight[rows],
        )


def concat_rollouts(parts: list[Rollouts], pad_id: int) -> Rollouts:
    """Stack rollout batches whose prompt and completion widths differ: prompts are left-padded
    and completions right-padded to the widest. Position ids follow the attention mask, so every
    row's log-probs are unchanged."""
    p_max = max(r.prompt_len for r in parts)
    t_max = max(r.completion_mask.shape[1] for r in parts)
    ids, attn, cmask, gmask = [], [], [], []
    for r in parts:
        left, right = p_max - r.prompt_len, t_max - r.completion_mask.shape[1]
        ids.append(F.pad(r.input_ids, (left, right), value=pad_id))
        attn.append(F.pad(r.attention_mask, (left, right), value=0))
        cmask.append(F.pad(r.completion_mask, (0, right), value=0))
        gmask.append(F.pad(r.guide_mask, (0, right), value=0))
    # The sampler's log-probs carry over when every part was sampled by the same model state.
    key = parts[0].sampler_key
    recorded = key is not None and all(
        r.sampler_logp is not None and r.sampler_key == key for r in parts
    )

    def right_padded(name: str) -> torch.Tensor:
        return torch.cat(
            [F.pad(getattr(r, name), (0, t_max - r.completion_mask.shape[1])) for r in parts]
        )

    return Rollouts(
        input_ids=torch.cat(ids),
        attention_mask=torch.cat(attn),
        completion_mask=torch.cat(cmask),
        prompt_len=p_max,
        texts=[t for r in parts for t in r.texts],
        truncated=torch.cat([r.truncated for r in parts]),
        guide_mask=torch.cat(gmask),
        sampler_logp=right_padded("sampler_logp") if recorded else None,
        sampler_entropy=right_padded("sampler_entropy") if recorded else None,
        sampler_key=key if recorded else None,
        is_weight=right_padded("is_weight")
        if all(r.is_weight is not None for r in parts)
        else None,
    )


def completion_mask_from_ids(completion_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 up to and including the first EOS of each row; all ones where no EOS appears."""
    is_eos = completion_ids == eos_id
    seen_before = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    return (~seen_before).long()


# ---- calling the model ---------------------------------------------------------------------


def _unwrap(model):
    """The transformers model under peft / DDP / DeepSpeed wrappers."""
    while True:
        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
        elif isinstance(getattr(model, "module", None), torch.nn.Module):
            model = model.module
        else:
            return model


@functools.cache
def _forward_params(cls: type) -> frozenset[str]:
    return frozenset(inspect.signature(cls.forward).parameters)


def _forward(model, ids, attn, pos, cache=None, logits_to_keep: int = 0) -> torch.Tensor:
    """`model`'s logits; with `cache`, the KV cache is read and extended. `logits_to_keep` > 0
    computes the LM head on the last that many positions only, where the model supports it."""
    params = _forward_params(type(_unwrap(model)))
    kwargs = {}
    if cache is None:
        kwargs["use_cache"] = False
    else:
        kwargs["use_cache"] = True
        kwargs["cache" if "cache" in params else "past_key_values"] = cache
    if logits_to_keep and "logits_to_keep" in params:
        kwargs["logits_to_keep"] = logits_to_keep
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, **kwargs).logits
    return logits[:, -logits_to_keep:] if logits_to_keep else logits


class _SharedRows:
    """Rows that repeat (a group's prompt): each distinct row is computed once, at `first`
    (its first row), and the results are copied back to every row (`expand`).

    `inverse` maps each row to its distinct row. When the rows come in consecutive groups of
    one size (how rollouts are laid out), the copy is a broadcast (`group` rows each), whose
    backward is a plain sum; otherwise an index, whose backward is a scatter-add."""

    def __init__(self, first: torch.Tensor, inverse: torch.Tensor):
        self.first, self.inverse = first, inverse
        n, rows = len(first), len(inverse)
        self.group = rows // n if rows % n == 0 else None
        if self.group is not None:
            blocks = torch.arange(n, device=inverse.device).repeat_interleave(self.group)
            if not torch.equal(inverse, blocks):
                self.group = None

    @classmethod
    def find(cls, ids: torch.Tensor, attn: torch.Tensor) -> _SharedRows | None:
        """None when there are fewer than two rows per distinct row on average: then sharing
        saves too little to be worth a second pass."""
        if ids.shape[0] < 2:
            return None
        key = ids.masked_fill(attn == 0, -1)  # padding compares equal whatever the pad id
        distinct, inverse = torch.unique(key, dim=0, return_inverse=True)
        n = distinct.shape[0]
        if 2 * n > ids.shape[0]:
            return None
        rows = torch.arange(ids.shape[0], device=ids.device)
        first = torch.full((n,), ids.shape[0], dtype=torch.long, device=ids.device)
        first = first.scatter_reduce(0, inverse, rows, reduce="amin")
        order = torch.argsort(first)  # distinct rows in order of first appearance
        rank = torch.empty_like(order)
        rank[order] = torch.arange(n, device=ids.device)
        return cls(first[order], rank[inverse])

    def expand(self, x: torch.Tensor) -> torch.Tensor:
        """(distinct rows, ...) -> (rows, ...)."""
        if self.group is None:
            return x[self.inverse]
        shape = x.shape[1:]
        return x.unsqueeze(1).expand(-1, self.group, *shape).reshape(-1, *shape)

    def expand_cache(self, cache) -> None:
        layers = getattr(cache, "layers", None)
        if (
            self.group is None
            or not layers
            or not all(isinstance(la, DynamicLayer) for la in layers)
        ):
            cache.batch_select_indices(self.inverse)
            return
        for layer in layers:
            if layer.is_initialized:
                layer.keys, layer.values = self.expand(layer.keys), self.expand(layer.values)


def _can_share(model) -> bool:
    # With gradient checkpointing, transformers turns the cache off in training.
    inner = _unwrap(model)
    flag = getattr(inner, "is_activation_checkpointing", None)
    if flag is None:
        flag = getattr(inner, "is_gradient_checkpointing", False)
    return not flag


def _prefill(model, ids, attn, pos, cache, logits_to_keep: int) -> torch.Tensor:
    """Forward `ids` into `cache`, each distinct row once, then the cache and the logits
    copied back to every row."""
    shared = _SharedRows.find(ids, attn) if _can_share(model) else None
    if shared is None:
        logits = _forward(model, ids, attn, pos, cache, logits_to_keep)
        _check_filled(cache, model)
        return logits
    i = shared.first
    logits = _forward(model, ids[i], attn[i], pos[i], cache, logits_to_keep)
    _check_filled(cache, model)
    shared.expand_cache(cache)
    return shared.expand(logits)


def _check_filled(cache, model) -> None:
    # A model that ignored the cache would leave the next pass without its prompt.
    if cache.get_seq_length() == 0:
        raise RuntimeError(
            f"{type(_unwrap(model)).__name__} did not fill the KV cache it was given"
        )


# ---- sampling ------------------------------------------------------------------------------

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
    """
    b = ids.shape[0]
    if generators is not None and (not generators or b % len(generators)):
        raise ValueError(f"{len(generators)} generators for {b} rows: need whole groups")
    pos = position_ids_from_mask(attn)
    cache = DynamicCache(config=_unwrap(model).config)
    logits = _prefill(model, ids, attn, pos, cache, logits_to_keep=1)[:, -1]
    next_pos = pos[:, -1:]
    unfinished = torch.ones(b, dtype=torch.long, device=ids.device)
    tokens, logps, entropies = [], [], []
    for step in range(max_new_tokens):
        scores = logits.float()
        if not greedy and temperature != 1.0:
            scores = scores / temperature
        logp_all = None if greedy else F.log_softmax(scores, dim=-1)
        if step < min_new_tokens:
            scores = scores.clone()
            scores[:, eos] = -float("inf")
        if greedy:
            token = torch.argmax(scores, dim=-1)
        elif generators is None:
            token = torch.multinomial(F.softmax(scores, dim=-1), num_samples=1).squeeze(1)
        else:
            probs = F.softmax(scores, dim=-1)
            n = b // len(generators)
            token = torch.cat(
                [
                    torch.multinomial(probs[i * n : (i + 1) * n], 1, generator=gen)
                    for i, gen in enumerate(generators)
                ]
            ).squeeze(1)
        token = token * unfinished + pad * (1 - unfinished)
        tokens.append(token)
        if logp_all is not None:
            logps.append(logp_all.gather(1, token[:, None]).squeeze(1))
            entropies.append(-(logp_all.exp() * logp_all).sum(-1))
        unfinished = unfinished & (token != eos).long()
        if step == max_new_tokens - 1 or not unfinished.any():
            break
        attn = torch.cat([attn, attn.new_ones(b, 1)], dim=1)
        next_pos = next_pos + 1
        logits = _forward(model, token[:, None], attn, next_pos, cache)[:, -1]
    if greedy:
        return torch.stack(tokens, 1), None, None
    return torch.stack(tokens, 1), torch.stack(logps, 1), torch.stack(entropies, 1)


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: list[str],
    num_samples: int,
    temperature: float,
    max_new_tokens: int,
    prefixes: list[str] | None = None,
    greedy: bool = False,
    min_new_tokens: int = 0,
    generators: list[torch.Generator] | None = None,
) -> Rollouts:
    """Sample `num_samples` completions per prompt; rows are grouped prompt by prompt.

    With `prefixes` (one per prompt, "" for none), each completion starts with its prompt's
    prefix, given to the sampler, and the completion (prefix included) still has at most
    `max_new_tokens` tokens. `greedy` decodes the most likely token at every step instead
    (temperature is then ignored). `min_new_tokens` > 0 keeps EOS from being sampled before
    that many tokens (its probability is set to 0 and the rest renormalised): with
    `min_new_tokens == max_new_tokens` every completion has exactly that length, which
    benchmarks use to compare trainers at equal lengths. Off (0) in training.

    `generators` (one per prompt) give each prompt's group its own random stream (see
    `_sample`); None samples from torch's global generator, exactly as `model.generate`. A
    model that samples through `model.generate` (`_plain_sampler` false) ignores them.
    """
    if generators is not None and len(generators) != len(prompts):
        raise ValueError(f"{len(generators)} generators for {len(prompts)} prompts")
    if prefixes is not None and any(prefixes):
        if greedy:
            raise ValueError("greedy decoding of guided rollouts is not supported")
        return _generate_guided(
            model,
            tokenizer,
            prompts,
            prefixes,
            num_samples,
            temperature,
            max_new_tokens,
            generators,
        )
    repeated = [p for p in prompts for _ in range(num_samples)]
    enc = tokenizer(repeated, return_tensors="pt", padding=True, add_special_tokens=False)
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
        )
        if not greedy:
            key = _sampler_key(model, temperature)
    else:
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
            eos_token_id=eos,
            min_new_tokens=min_new_tokens or None,
        )
        completion = out[:, enc["input_ids"].shape[1] :]
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


def _generate_guided(
    model, tokenizer, prompts, prefixes, num_samples, temperature, max_new_tokens, generators=None
) -> Rollouts:
    if len(prefixes) != len(prompts):
        raise ValueError(f"{len(prefixes)} prefixes for {len(prompts)} prompts")
    n = num_samples
    p_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    g_ids = tokenizer(prefixes, add_special_tokens=False)["input_ids"]
    g_ids = [g[:max_new_tokens] for g in g_ids]
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    contexts = [p + g for p, g in zip(p_ids, g_ids, strict=True) for _ in range(n)]
    width = max(len(c) for c in contexts)
    ctx = torch.full((len(contexts), width), pad, dtype=torch.long)
    ctx_attn = torch.zeros_like(ctx)
    for i, c in enumerate(contexts):
        ctx[i, width - len(c) :] = torch.tensor(c)
        ctx_attn[i, width - len(c) :] = 1
    budget = max(1, max_new_tokens - min(len(g) for g in g_ids))
    device = model.device
    if _plain_sampler(model):
        out, _, _ = _sample(
            model,
            ctx.to(device),
            ctx_attn.to(device),
            budget,
            temperature,
            greedy=False,
            eos=eos,
            pad=eos if pad is None else pad,
            generators=generators,
        )
        out = out.tolist()
    else:
        out = model.generate(
            input_ids=ctx.to(device),
            attention_mask=ctx_attn.to(device),
            do_sample=True,
            temperature=temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=budget,
            pad_token_id=pad,
            eos_token_id=eos,
        )[:, width:].tolist()

    # Re-lay every row as [left-padded prompt | guide prefix + continuation, right-padded].
    rows, guide_lens, truncated = [], [], []
    for i, cont in enumerate(out):
        g = g_ids[i // n]
        cont = cont[: max_new_tokens - len(g)]
        if eos in cont:
            cont = cont[: cont.index(eos) + 1]
        rows.append(g + cont)
        guide_lens.append(len(g))
        truncated.append(not cont or cont[-1] != eos)
    p_len = max(len(p) for p in p_ids)
    t_len = max(len(r) for r in rows)
    ids = torch.full((len(rows), p_len + t_len), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    cmask = torch.zeros((len(rows), t_len), dtype=torch.long)
    gmask = torch.zeros_like(cmask)
    for i, r in enumerate(rows):
        p = p_ids[i // n]
        ids[i, p_len - len(p) : p_len] = torch.tensor(p)
        ids[i, p_len : p_len + len(r)] = torch.tensor(r)
        attn[i, p_len - len(p) : p_len + len(r)] = 1
        cmask[i, : len(r)] = 1
        gmask[i, : guide_lens[i]] = 1
    return Rollouts(
        input_ids=ids.to(device),
        attention_mask=attn.to(device),
        completion_mask=cmask.to(device),
        prompt_len=p_len,
        texts=tokenizer.batch_decode(ids[:, p_len:], skip_special_tokens=True),
        truncated=torch.tensor(truncated, device=device),
        guide_mask=gmask.to(device),
    )


# ---- scoring -------------------------------------------------------------------------------


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (B, T) of the completion tokens under `model` at `temperature`, and
    optionally the per-token entropy (no gradient). The LM head runs on the positions that
    predict completion tokens only, so nothing of size (B, P + T, V) is ever made.

    Rows with the same prompt (a group) share it: each distinct prompt is run once and its KV
    cache copied to its rows, whose completions then attend to it; the gradient of every row
    flows back into the one prompt pass. The same numbers as one pass over every row, up to
    float rounding, for a fraction of the work (the prompt is often most of a row).
    """
    p, t = prompt_len, input_ids.shape[1] - prompt_len
    pos = position_ids_from_mask(attention_mask)
    shared = (
        _SharedRows.find(input_ids[:, :p], attention_mask[:, :p])
        if t > 1 and _can_share(model)
        else None
    )
    if shared is None:
        logits = _forward(model, input_ids, attention_mask, pos, logits_to_keep=t + 1)[:, :-1]
    else:
        i = shared.first
        cache = DynamicCache(config=_unwrap(model).config)
        head = _forward(model, input_ids[i, :p], attention_mask[i, :p], pos[i, :p], cache, 1)
        _check_filled(cache, model)
        shared.expand_cache(cache)
        rest = _forward(model, input_ids[:, p:-1], attention_mask[:, :-1], pos[:, p:-1], cache)
        logits = torch.cat([shared.expand(head), rest], dim=1)
    logits = logits.float() / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    targets = input_ids[:, prompt_len:].unsqueeze(-1)
    logp = logp_all.gather(-1, targets).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@torch.no_grad()
def score_rollouts(
    model, ro: Rollouts, temperature: float, micro_batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token log-probs and entropies (B, T) of every rollout under `model`, in micro-batches
    and without gradients: the rollout policy's log-probs (pi_old) that the loss, CoDaPO's
    confidence and OC-GRPO's weights all read.

    When `model`, with its weights unchanged since, sampled `ro` at `temperature`, those are
    the log-probs the sampler computed: no forward pass (equal up to float rounding)."""
    if ro.sampler_logp is not None and ro.sampler_key == _sampler_key(model, temperature):
        return ro.sampler_logp, ro.sampler_entropy
    logps, entropies = [], []
    for start in range(0, ro.input_ids.shape[0], micro_batch_size):
        rows = slice(start, start + micro_batch_size)
        logp, entropy = token_logprobs(
            model,
            ro.input_ids[rows],
            ro.attention_mask[rows],
            ro.prompt_len,
            temperature,
            with_entropy=True,
        )
        logps.append(logp)
        entropies.append(entropy)
    return torch.cat(logps), torch.cat(entropies)
