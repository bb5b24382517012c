"""Rollout backends: who samples the completions the trainer learns from.

A backend turns prompts into `Rollouts` (the layout of `grpo_core.rollout.rollouts`: left-padded
prompt | right-padded completion, rows grouped prompt by prompt) with `sampler_logp` filled: the
log-prob the *sampler* gave each completion token. After every optimizer step the trainer calls
`sync_weights(policy)` so that the next rollouts come from the updated policy.

- `HFBackend` samples with the live training model (`grpo_core.rollout.sampler.generate`); sync
  is a no-op, and the sampler's log-probs are the trainer's, up to float rounding.
- `MergedLoRABackend` (`grpo_core.rollout.merged`) samples with a copy of a LoRA policy whose
  adapters are merged into its weights (half the generation time of unmerged adapters on a
  CPU), synced after every optimizer step; corrected as vLLM's, below.
- `VLLMBackend` (`grpo_core.rollout.vllm`) samples with a vLLM engine colocated in the training
  process (as TRL's `vllm_mode="colocate"`): its own copy of the weights in bf16, its own
  kernels. Its log-probs differ from the trainer's a little even right after a sync (the
  rollout-vs-trainer mismatch), which `truncated_is_weights` corrects.

`check_rollouts` is the contract both backends' outputs must pass; `scripts/gpu_check.sh` runs it
on vLLM output, `tests/test_backends.py` on the HF backend's.

Sampler log-probs, row by row: on sampled tokens, log q(y_t | x, y_<t) at the sampling
temperature (the distribution actually sampled from, after temperature scaling); for greedy
decoding, the model's log-probs at temperature 1 (informational: nothing was sampled).
Outside `completion_mask` the values mean nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NoReturn, Protocol, runtime_checkable

import torch

from grpo_core.rollout import sampler, scoring
from grpo_core.rollout.rollouts import Rollouts, completion_mask_from_ids


@runtime_checkable
class RolloutBackend(Protocol):
    """What the trainer needs from a sampler."""

    def generate(
        self,
        prompts: list[str],
        num_samples: int,
        temperature: float,
        max_new_tokens: int,
        greedy: bool = False,
        generators: list[torch.Generator] | None = None,
    ) -> Rollouts:
        """`num_samples` completions per prompt, rows grouped prompt by prompt, each of at most
        `max_new_tokens` tokens, with `sampler_logp` filled (see the module docstring).
        `generators`: one random stream per prompt, for a backend whose sampler takes them (the
        HF sampler's per-group streams); vLLM seeds its requests itself and ignores them."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the sampler's weights the policy's (called after every optimizer step)."""
        ...


# ---- the rollout-vs-trainer mismatch correction ---------------------------------------------


def truncated_is_weights(
    trainer_logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    mask: torch.Tensor,
    cap: float,
) -> torch.Tensor:
    """Per-token truncated importance weights (B, T) for rollouts sampled by another engine:

        w_t = min(exp(log pi_old(y_t) - log q(y_t)), cap)   on tokens where mask = 1, else 0,

    where pi_old is the policy as the *trainer* computes it for the rollout batch (the old
    log-probs of the clipped ratio) and q the sampler (vLLM) that actually drew y_t. The
    per-token policy loss is multiplied by w_t (no gradient through w):

        L_t = -w_t * min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A),
        rho_t = pi_theta(y_t) / pi_old(y_t).

    The ratio corrects the gradient for sampling from q instead of pi_old; the cap bounds its
    variance at the price of a small bias where q under-samples a token. This is TRL's
    `GRPOConfig(vllm_importance_sampling_correction=True, vllm_importance_sampling_cap=C)`
    (token level; the ratio clamped above only) and verl's truncated importance sampling
    (`actor_rollout_ref.actor.tis_imp_ratio_cap`; Yao et al., 2025, "Your Efficient RL
    Framework Secretly Brings You Off-Policy RL Training"), where C = 2 is the usual value.
    """
    if cap <= 0:
        raise ValueError(f"the importance-weight cap must be > 0, got {cap}")
    on = mask.bool()
    # Masked positions may hold -inf or garbage: take the difference where it is defined only.
    diff = torch.where(on, trainer_logp.detach().float() - sampler_logp.detach().float(), 0.0)
    w = torch.exp(diff).clamp(max=cap)
    return torch.where(on, w, torch.zeros_like(w))


# ---- the contract -----------------------------------------------------------------------------


def check_rollouts(
    ro: Rollouts,
    tokenizer,
    prompts: Sequence[str] | None = None,
    num_samples: int | None = None,
    max_new_tokens: int | None = None,
    greedy: bool = False,
) -> None:
    """Raise AssertionError (with what is wrong) unless `ro` is laid out as the trainer expects.

    Checked: shapes; rows grouped prompt by prompt (with `prompts` / `num_samples`); left-padded
    prompts and right-padded completions (`attention_mask` = 0..0 1..1 | `completion_mask`);
    each completion stops at its first EOS, and `truncated` means no EOS (then, with
    `max_new_tokens`, the full budget was used); no completion longer than `max_new_tokens`,
    and no all-padding column at the end; `texts` are the decoded completion tokens; each row
    holds its prompt's tokens (with `prompts`); `sampler_logp` is there, finite and <= 0 on
    completion tokens; with `greedy`, the rows of a prompt are identical.
    """
    _check_shapes(ro, prompts, num_samples)
    p = ro.prompt_len
    cmask_l = ro.completion_mask.long().cpu()
    attn_l = ro.attention_mask.long().cpu()
    ids_c = ro.input_ids.cpu()
    lengths = _check_padding(attn_l, cmask_l, p, max_new_tokens)
    comp = ids_c[:, p:]
    _check_eos(comp, cmask_l, lengths, ro.truncated, tokenizer.eos_token_id, max_new_tokens)
    _check_texts(ro.texts, comp, lengths, tokenizer)
    if prompts is not None:
        _check_prompts(ids_c, attn_l, p, tokenizer, prompts, num_samples)
    _check_sampler_logp(ro.sampler_logp, cmask_l)
    if greedy and prompts is not None:
        n = num_samples or 1
        for i in range(ids_c.shape[0]):
            if not torch.equal(ids_c[i], ids_c[(i // n) * n]):
                _fail(f"greedy rows of prompt {i // n} differ")


def _fail(msg: str) -> NoReturn:
    raise AssertionError(f"rollouts break the backend contract: {msg}")


def _check_shapes(ro: Rollouts, prompts: Sequence[str] | None, num_samples: int | None) -> None:
    """Every tensor's shape, one text per row, and rows for every prompt's samples."""
    ids, attn, cmask = ro.input_ids, ro.attention_mask, ro.completion_mask
    b = ids.shape[0]
    p = ro.prompt_len
    t = cmask.shape[1]
    if ids.ndim != 2 or attn.shape != ids.shape:
        _fail(f"input_ids {tuple(ids.shape)} and attention_mask {tuple(attn.shape)} differ")
    if ids.shape[1] != p + t:
        _fail(f"width {ids.shape[1]} != prompt_len {p} + completion width {t}")
    for name, x, shape in (
        ("completion_mask", cmask, (b, t)),
        ("truncated", ro.truncated, (b,)),
    ):
        if tuple(x.shape) != shape:
            _fail(f"{name} has shape {tuple(x.shape)}, expected {shape}")
    if len(ro.texts) != b:
        _fail(f"{len(ro.texts)} texts for {b} rows")
    if ro.sampler_logp is None:
        _fail("sampler_logp is None")
    if tuple(ro.sampler_logp.shape) != (b, t):
        _fail(f"sampler_logp has shape {tuple(ro.sampler_logp.shape)}, expected {(b, t)}")
    if prompts is not None:
        n = num_samples or 1
        if b != len(prompts) * n:
            _fail(f"{b} rows for {len(prompts)} prompts x {n} samples")


def _check_padding(
    attn_l: torch.Tensor, cmask_l: torch.Tensor, p: int, max_new_tokens: int | None
) -> torch.Tensor:
    """Left-padded prompts, right-padded completions attended where `completion_mask` is 1, no
    all-padding column at the end; returns the completion lengths."""
    t = cmask_l.shape[1]
    # Left-padded prompts: 0..0 then 1..1, at least one prompt token.
    pa = attn_l[:, :p]
    if p == 0 or (pa[:, 1:] < pa[:, :-1]).any() or (pa.sum(1) == 0).any():
        _fail("prompts are not left-padded (attention 0..0 1..1, at least one token)")
    # Right-padded completions, attended exactly where completion_mask is 1.
    if (cmask_l[:, 1:] > cmask_l[:, :-1]).any():
        _fail("completion_mask is not 1..1 0..0 (right padding)")
    if not torch.equal(attn_l[:, p:], cmask_l):
        _fail("attention_mask over the completion differs from completion_mask")
    lengths = cmask_l.sum(1)
    if t and int(lengths.max()) != t:
        _fail(f"completion width {t} but the longest completion has {int(lengths.max())} tokens")
    if max_new_tokens is not None and t > max_new_tokens:
        _fail(f"a completion is longer than max_new_tokens={max_new_tokens}")
    return lengths


def _check_eos(
    comp: torch.Tensor,
    cmask_l: torch.Tensor,
    lengths: torch.Tensor,
    truncated: torch.Tensor,
    eos: int,
    max_new_tokens: int | None,
) -> None:
    """Each completion stops at its first EOS; `truncated` means no EOS (then, with
    `max_new_tokens`, the full budget was used)."""
    has_eos = ((comp == eos) & cmask_l.bool()).any(1)
    # The mask runs up to and including the first EOS (or over the whole completion).
    expected = completion_mask_from_ids(torch.where(cmask_l.bool(), comp, -1), eos) * cmask_l
    if not torch.equal(expected, cmask_l):
        _fail("a completion goes on after its first EOS")
    last = comp.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    if ((last == eos) != has_eos).any():
        _fail("a completion that has an EOS does not end with it")
    if not torch.equal(truncated.cpu().bool(), ~has_eos):
        _fail("truncated is not 'no EOS in the completion'")
    if max_new_tokens is not None and (lengths[~has_eos] != max_new_tokens).any():
        _fail(f"a truncated completion is shorter than max_new_tokens={max_new_tokens}")


def _check_texts(texts: list[str], comp: torch.Tensor, lengths: torch.Tensor, tokenizer) -> None:
    """Texts: the completion tokens decoded, special tokens removed."""
    b = comp.shape[0]
    decoded = [
        tokenizer.decode(comp[i, : int(lengths[i])].tolist(), skip_special_tokens=True)
        for i in range(b)
    ]
    if list(texts) != decoded:
        bad = next(i for i in range(b) if texts[i] != decoded[i])
        _fail(f"texts[{bad}] = {texts[bad]!r} is not its tokens decoded: {decoded[bad]!r}")


def _check_prompts(
    ids_c: torch.Tensor,
    attn_l: torch.Tensor,
    p: int,
    tokenizer,
    prompts: Sequence[str],
    num_samples: int | None,
) -> None:
    """Each row holds its prompt's tokens, left-padded."""
    n = num_samples or 1
    pa = attn_l[:, :p]
    for i in range(ids_c.shape[0]):
        want = tokenizer(prompts[i // n], add_special_tokens=False)["input_ids"]
        got = ids_c[i, p - int(pa[i].sum()) : p].tolist()
        if got != want:
            _fail(f"row {i} does not hold prompt {i // n} ({prompts[i // n]!r})")


def _check_sampler_logp(sampler_logp: torch.Tensor, cmask_l: torch.Tensor) -> None:
    """Finite and <= 0 on completion tokens."""
    logp = sampler_logp.detach().float().cpu()
    on = cmask_l.bool()
    if not torch.isfinite(logp[on]).all():
        _fail("sampler_logp is not finite on completion tokens")
    if (logp[on] > 1e-4).any():
        _fail("sampler_logp is > 0 on a completion token")


# ---- Hugging Face: the live policy samples -------------------------------------------------


class HFBackend:
    """Samples with the training model itself (`grpo_core.rollout.sampler.generate`).

    `sampler_logp` comes from the sampler where it recorded it (sampling with the plain sampler:
    no extra forward); otherwise (greedy rows, a model that samples through `model.generate`)
    it is computed by one scoring pass over the sampled rows.
    """

    def __init__(self, model, tokenizer, micro_batch_size: int = 16):
        self.model = model
        self.tokenizer = tokenizer
        self.micro_batch_size = micro_batch_size

    def generate(
        self,
        prompts: list[str],
        num_samples: int,
        temperature: float,
        max_new_tokens: int,
        greedy: bool = False,
        generators: list[torch.Generator] | None = None,
        min_new_tokens: int = 0,
    ) -> Rollouts:
        ro = sampler.generate(
            self.model,
            self.tokenizer,
            prompts,
            num_samples,
            temperature,
            max_new_tokens,
            greedy=greedy,
            min_new_tokens=min_new_tokens,
            generators=generators,
        )
        if ro.sampler_logp is None:
            self._fill_sampler_logp(ro, 1.0 if greedy else temperature)
        return ro

    @torch.no_grad()
    def _fill_sampler_logp(self, ro: Rollouts, temperature: float) -> None:
        unrecorded = dataclasses.replace(ro, sampler_logp=None, sampler_key=None)
        logp, entropy = scoring.score_rollouts(
            self.model, unrecorded, temperature, self.micro_batch_size
        )
        on = ro.completion_mask.to(torch.float32)
        ro.sampler_logp = logp.float() * on
        ro.sampler_entropy = entropy.float() * on
        ro.sampler_key = None  # not recorded while sampling: the trainer scores pi_old itself

    def sync_weights(self, model) -> None:
        """Nothing to do: the sampler is the live model."""
