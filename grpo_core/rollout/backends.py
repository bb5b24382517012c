"""Rollout backends: who samples the completions the trainer learns from.

A backend turns prompts into `Rollouts` (the layout of `grpo_core.rollout.sampler`: left-padded
prompt
| right-padded completion, rows grouped prompt by prompt) with `sampler_logp` filled: the
log-prob the *sampler* gave each completion token. After every optimizer step the trainer calls
`sync_weights(policy)` so that the next rollouts come from the updated policy.

- `HFBackend` samples with the live training model (`grpo_core.rollout.sampler.generate`); sync is a
  no-op, and on unguided rows the sampler's log-probs are the trainer's, up to float rounding.
- `VLLMBackend` samples with a vLLM engine colocated in the training process (as TRL's
  `vllm_mode="colocate"`): its own copy of the weights in bf16, its own kernels. Its log-probs
  differ from the trainer's a little even right after a sync (the rollout-vs-trainer mismatch),
  which `truncated_is_weights` corrects.

`check_rollouts` is the contract both backends' outputs must pass; `scripts/gpu_check.sh` runs it
on vLLM output, `tests/test_backends.py` on the HF backend's.

Sampler log-probs, row by row: on sampled tokens, log q(y_t | x, y_<t) at the sampling
temperature (the distribution actually sampled from, after temperature scaling); on the tokens
of a guide prefix (Off-Context GRPO), 0: the guided sampler was given them, with probability 1;
for greedy decoding, the model's log-probs at temperature 1 (informational: nothing was sampled).
Outside `completion_mask` the values mean nothing.

This module imports without vLLM; `VLLMBackend` imports it when built.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from grpo_core.rollout import sampler as rollout
from grpo_core.rollout.sampler import Rollouts, completion_mask_from_ids

VLLM_INSTALL_HINT = (
    "the vLLM rollout backend needs vllm, which is not installed; install the optional extra: "
    "pip install .[vllm]   (Linux with an NVIDIA GPU; or set train.rollout_backend=hf)"
)


@runtime_checkable
class RolloutBackend(Protocol):
    """What the trainer needs from a sampler."""

    def generate(
        self,
        prompts: list[str],
        num_samples: int,
        temperature: float,
        max_new_tokens: int,
        prefixes: list[str] | None = None,
        greedy: bool = False,
    ) -> Rollouts:
        """`num_samples` completions per prompt, rows grouped prompt by prompt, with
        `sampler_logp` filled (see the module docstring). `prefixes` (one per prompt, "" for
        none) start each completion with a guide prefix given to the sampler and marked in
        `guide_mask`; the completion, prefix included, has at most `max_new_tokens` tokens."""
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

    Guide-prefix tokens have log q = 0 (the sampler was given them), so there w_t would be
    min(pi_old(y_t), cap): Off-Context GRPO already weights those tokens (`offcontext`), so a
    caller should pass `mask = completion_mask & ~guide_mask` to correct sampled tokens only.
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
    prefixes: Sequence[str] | None = None,
    greedy: bool = False,
) -> None:
    """Raise AssertionError (with what is wrong) unless `ro` is laid out as the trainer expects.

    Checked: shapes; rows grouped prompt by prompt (with `prompts` / `num_samples`); left-padded
    prompts and right-padded completions (`attention_mask` = 0..0 1..1 | `completion_mask`);
    each completion stops at its first EOS, and `truncated` means no EOS (then, with
    `max_new_tokens`, the full budget was used); no completion longer than `max_new_tokens`,
    and no all-padding column at the end; `texts` are the decoded completion tokens; `guide_mask`
    marks a leading part of the completion, equal to the tokenized prefix (with `prefixes`);
    `sampler_logp` is there, finite and <= 0 on completion tokens, 0 on guide tokens; with
    `greedy`, the rows of a prompt are identical.
    """
    ids, attn, cmask, gmask = ro.input_ids, ro.attention_mask, ro.completion_mask, ro.guide_mask
    b = ids.shape[0]
    p = ro.prompt_len
    t = cmask.shape[1]
    eos = tokenizer.eos_token_id

    def fail(msg: str) -> None:
        raise AssertionError(f"rollouts break the backend contract: {msg}")

    if ids.ndim != 2 or attn.shape != ids.shape:
        fail(f"input_ids {tuple(ids.shape)} and attention_mask {tuple(attn.shape)} differ")
    if ids.shape[1] != p + t:
        fail(f"width {ids.shape[1]} != prompt_len {p} + completion width {t}")
    for name, x, shape in (
        ("completion_mask", cmask, (b, t)),
        ("guide_mask", gmask, (b, t)),
        ("truncated", ro.truncated, (b,)),
    ):
        if tuple(x.shape) != shape:
            fail(f"{name} has shape {tuple(x.shape)}, expected {shape}")
    if len(ro.texts) != b:
        fail(f"{len(ro.texts)} texts for {b} rows")
    if ro.sampler_logp is None:
        fail("sampler_logp is None")
    if tuple(ro.sampler_logp.shape) != (b, t):
        fail(f"sampler_logp has shape {tuple(ro.sampler_logp.shape)}, expected {(b, t)}")
    if prompts is not None:
        n = num_samples or 1
        if b != len(prompts) * n:
            fail(f"{b} rows for {len(prompts)} prompts x {n} samples")

    cmask_l, gmask_l, attn_l = cmask.long().cpu(), gmask.long().cpu(), attn.long().cpu()
    ids_c = ids.cpu()
    # Left-padded prompts: 0..0 then 1..1, at least one prompt token.
    pa = attn_l[:, :p]
    if p == 0 or (pa[:, 1:] < pa[:, :-1]).any() or (pa.sum(1) == 0).any():
        fail("prompts are not left-padded (attention 0..0 1..1, at least one token)")
    # Right-padded completions, attended exactly where completion_mask is 1.
    if (cmask_l[:, 1:] > cmask_l[:, :-1]).any():
        fail("completion_mask is not 1..1 0..0 (right padding)")
    if not torch.equal(attn_l[:, p:], cmask_l):
        fail("attention_mask over the completion differs from completion_mask")
    lengths = cmask_l.sum(1)
    if t and int(lengths.max()) != t:
        fail(f"completion width {t} but the longest completion has {int(lengths.max())} tokens")
    if max_new_tokens is not None and t > max_new_tokens:
        fail(f"a completion is longer than max_new_tokens={max_new_tokens}")
    comp = ids_c[:, p:]
    has_eos = ((comp == eos) & cmask_l.bool()).any(1)
    # The mask runs up to and including the first EOS (or over the whole completion).
    expected = completion_mask_from_ids(torch.where(cmask_l.bool(), comp, -1), eos) * cmask_l
    if not torch.equal(expected, cmask_l):
        fail("a completion goes on after its first EOS")
    last = comp.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    if ((last == eos) != has_eos).any():
        fail("a completion that has an EOS does not end with it")
    if not torch.equal(ro.truncated.cpu().bool(), ~has_eos):
        fail("truncated is not 'no EOS in the completion'")
    if max_new_tokens is not None and (lengths[~has_eos] != max_new_tokens).any():
        fail(f"a truncated completion is shorter than max_new_tokens={max_new_tokens}")
    # Texts: the completion tokens decoded, special tokens removed.
    decoded = [
        tokenizer.decode(comp[i, : int(lengths[i])].tolist(), skip_special_tokens=True)
        for i in range(b)
    ]
    if list(ro.texts) != decoded:
        bad = next(i for i in range(b) if ro.texts[i] != decoded[i])
        fail(f"texts[{bad}] = {ro.texts[bad]!r} is not its tokens decoded: {decoded[bad]!r}")
    # Guide prefixes: a leading part of the completion.
    if (gmask_l > cmask_l).any() or (gmask_l[:, 1:] > gmask_l[:, :-1]).any():
        fail("guide_mask is not a leading part of the completion")
    if prompts is not None:
        n = num_samples or 1
        for i in range(b):
            want = tokenizer(prompts[i // n], add_special_tokens=False)["input_ids"]
            got = ids_c[i, p - int(pa[i].sum()) : p].tolist()
            if got != want:
                fail(f"row {i} does not hold prompt {i // n} ({prompts[i // n]!r})")
            g = []
            if prefixes is not None and prefixes[i // n]:
                g = tokenizer(prefixes[i // n], add_special_tokens=False)["input_ids"]
                g = g[: max_new_tokens or len(g)]
            if int(gmask_l[i].sum()) != len(g) or comp[i, : len(g)].tolist() != g:
                fail(f"row {i}: guide_mask / guide tokens do not match its prefix")
    # Sampler log-probs.
    logp = ro.sampler_logp.detach().float().cpu()
    on = cmask_l.bool()
    if not torch.isfinite(logp[on]).all():
        fail("sampler_logp is not finite on completion tokens")
    if (logp[on] > 1e-4).any():
        fail("sampler_logp is > 0 on a completion token")
    if (logp[gmask_l.bool()] != 0).any():
        fail("sampler_logp is not 0 on guide tokens")
    if greedy and prompts is not None:
        n = num_samples or 1
        for i in range(b):
            if not torch.equal(ids_c[i], ids_c[(i // n) * n]):
                fail(f"greedy rows of prompt {i // n} differ")


# ---- layout shared by the backends ----------------------------------------------------------


def _lay_out(
    prompt_ids: list[list[int]],
    rows: list[list[int]],
    logps: list[list[float]],
    guide_lens: list[int],
    truncated: list[bool],
    tokenizer,
    device: torch.device | str,
) -> Rollouts:
    """Rollouts from per-row token lists: [left-padded prompt | completion, right-padded].
    `rows[i]` is the completion of row i (guide prefix included), `logps[i]` its sampler
    log-probs (same length), `prompt_ids[i]` its prompt."""
    pad = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    b = len(rows)
    p_len = max(len(p) for p in prompt_ids)
    t_len = max(len(r) for r in rows)
    ids = torch.full((b, p_len + t_len), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    cmask = torch.zeros((b, t_len), dtype=torch.long)
    gmask = torch.zeros_like(cmask)
    logp = torch.zeros((b, t_len), dtype=torch.float32)
    for i, (prompt, row) in enumerate(zip(prompt_ids, rows, strict=True)):
        ids[i, p_len - len(prompt) : p_len] = torch.tensor(prompt, dtype=torch.long)
        ids[i, p_len : p_len + len(row)] = torch.tensor(row, dtype=torch.long)
        attn[i, p_len - len(prompt) : p_len + len(row)] = 1
        cmask[i, : len(row)] = 1
        gmask[i, : guide_lens[i]] = 1
        logp[i, : len(row)] = torch.tensor(logps[i], dtype=torch.float32)
    texts = [tokenizer.decode(r, skip_special_tokens=True) for r in rows]
    return Rollouts(
        input_ids=ids.to(device),
        attention_mask=attn.to(device),
        completion_mask=cmask.to(device),
        prompt_len=p_len,
        texts=texts,
        truncated=torch.tensor(truncated, dtype=torch.bool, device=device),
        guide_mask=gmask.to(device),
        sampler_logp=logp.to(device),
        # No entropies from a sampler that returns the sampled token's log-prob only. NaN,
        # not None: `Rollouts.select` copies the entropies whenever log-probs are recorded.
        sampler_entropy=torch.full((b, t_len), float("nan"), device=device),
        sampler_key=None,  # never the trainer's own: score_rollouts always recomputes pi_old
    )


def _cut_completion(tokens: list[int], logps: list[float], room: int, eos: int):
    """The first `room` sampled tokens, stopped after the first EOS; and whether no EOS came."""
    tokens, logps = tokens[:room], logps[:room]
    if eos in tokens:
        end = tokens.index(eos) + 1
        tokens, logps = tokens[:end], logps[:end]
    return tokens, logps, not tokens or tokens[-1] != eos


# ---- Hugging Face: the live policy samples -------------------------------------------------


class HFBackend:
    """Samples with the training model itself (`grpo_core.rollout.sampler.generate`).

    `sampler_logp` comes from the sampler where it recorded it (unguided sampling with the
    plain sampler: no extra forward); otherwise (guided or greedy rows, a model that samples
    through `model.generate`) it is computed by one scoring pass over the sampled rows under the
    context they were sampled in: prompt, then guide prefix, then the continuation.
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
        prefixes: list[str] | None = None,
        greedy: bool = False,
        min_new_tokens: int = 0,
    ) -> Rollouts:
        ro = rollout.generate(
            self.model,
            self.tokenizer,
            prompts,
            num_samples,
            temperature,
            max_new_tokens,
            prefixes=prefixes,
            greedy=greedy,
            min_new_tokens=min_new_tokens,
        )
        if ro.sampler_logp is None:
            self._fill_sampler_logp(ro, 1.0 if greedy else temperature)
        return ro

    @torch.no_grad()
    def _fill_sampler_logp(self, ro: Rollouts, temperature: float) -> None:
        unrecorded = dataclasses.replace(ro, sampler_logp=None, sampler_key=None)
        logp, entropy = rollout.score_rollouts(
            self.model, unrecorded, temperature, self.micro_batch_size
        )
        sampled = (ro.completion_mask.bool() & ~ro.guide_mask.bool()).to(torch.float32)
        ro.sampler_logp = logp.float() * sampled
        ro.sampler_entropy = entropy.float() * sampled
        ro.sampler_key = None  # differs from the trainer's pi_old on guide tokens

    def sync_weights(self, model) -> None:
        """Nothing to do: the sampler is the live model."""


# ---- vLLM: a colocated engine ---------------------------------------------------------------


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(VLLM_INSTALL_HINT) from e
    return vllm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _single_process_dist_env() -> None:
    """`distributed_executor_backend="external_launcher"` reads torch.distributed's variables;
    a launcher (accelerate, torchrun) sets them, a plain `python` run does not."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))


def _zero3_gather(params: list[torch.nn.Parameter]):
    """DeepSpeed ZeRO-3 keeps each rank's shard only: gather full tensors while reading them."""
    if any(hasattr(q, "ds_id") for q in params):
        import deepspeed

        return deepspeed.zero.GatheredParameters(params)
    return contextlib.nullcontext()


def _unwrap_for_weights(model):
    """Under DDP / DeepSpeed wrappers; stops at a peft model (its LoRA layers are needed)."""
    while isinstance(getattr(model, "module", None), torch.nn.Module):
        model = model.module
    return model


def policy_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights as a Hugging Face checkpoint names them (`model.layers.0.mlp...`),
    one tensor at a time, with LoRA adapters merged: for every LoRA layer the base weight plus
    its active adapters' delta (scale * B @ A), computed into a new tensor; the model itself is
    not modified (no merge/unmerge round trip, which is not exact in bf16). Adapter tensors
    themselves are not yielded, nor tied weights twice. This is what `load_weights` of a vLLM
    model (or `load_state_dict` of the base model, strict=False) takes."""
    model = _unwrap_for_weights(model)
    is_peft = hasattr(model, "peft_config") and hasattr(model, "get_base_model")
    if not is_peft:
        for name, param in model.named_parameters():
            with _zero3_gather([param]):
                yield name, param.detach()
        return

    base = model.get_base_model()
    lora_layers = {
        name: module
        for name, module in base.named_modules()
        if hasattr(module, "lora_A") and hasattr(module, "base_layer")
    }
    adapter_parts = ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_magnitude")
    for name, param in base.named_parameters():
        parts = name.split(".")
        if any(part in adapter_parts for part in parts):
            continue  # merged into the base weight below
        if "original_module" in parts:
            continue  # modules_to_save: the trained copy is exported instead
        out_name = name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")
        owner = name.rsplit(".", 2)[0] if ".base_layer." in name else None
        layer = lora_layers.get(owner) if owner else None
        if layer is None or parts[-1] != "weight":
            with _zero3_gather([param]):
                yield out_name, param.detach()
            continue
        adapters = [
            a
            for a in layer.active_adapters
            if a in layer.lora_A and not getattr(layer, "merged", False)
        ]
        if getattr(layer, "disable_adapters", False):
            adapters = []
        group = [param] + [
            q for a in adapters for q in (layer.lora_A[a].weight, layer.lora_B[a].weight)
        ]
        with _zero3_gather(group):
            weight = param.detach()
            if adapters:
                weight = weight.clone()
                for a in adapters:
                    weight += layer.get_delta_weight(a).to(weight.dtype)
            yield out_name, weight


def _engine_model(llm):
    """The torch model inside a colocated, in-process vLLM engine (the object whose
    `load_weights` TRL's colocate mode and verl call)."""
    engine = llm.llm_engine
    executor = getattr(engine, "model_executor", None)
    if executor is None:
        raise RuntimeError(
            "this vLLM engine runs in another process (no llm_engine.model_executor): build it "
            "with distributed_executor_backend='external_launcher' (VLLMBackend does)"
        )
    worker = executor.driver_worker
    worker = getattr(worker, "worker", worker)  # V1 wraps the worker in a WorkerWrapperBase
    return worker.model_runner.model


class VLLMBackend:
    """A vLLM engine in the training process, on the training GPU (TRL's colocate mode).

    `model_dir`: a Hugging Face model directory (the base model; `sync_weights` overwrites its
    weights with the policy's before the first rollout). `gpu_memory_utilization`: the fraction
    of the GPU's memory the engine may take for its weights, activations and KV cache; the
    trainer gets the rest. Sampling: temperature as given, no top-k / top-p / min-p or
    penalties, EOS = the tokenizer's EOS only (generation-config EOS ids ignored, as in the HF
    path), and `logprobs_mode="processed_logprobs"` so the returned log-prob of each sampled token
    is after temperature scaling (vLLM's default, raw_logprobs, is before it). Prompts are
    tokenized here (no special tokens added, as the HF path) and handed to vLLM as token ids;
    a guide prefix's tokens are appended to its prompt's and marked in `guide_mask`.

    Each call draws a seed from torch's generator and gives request i the seed + i, so a seeded
    training step samples the same completions again (on the same GPU and vLLM version).
    """

    def __init__(
        self,
        model_dir,
        tokenizer,
        gpu_memory_utilization: float = 0.3,
        dtype: str = "bfloat16",
        max_model_len: int | None = None,
        seed: int = 0,
        device: torch.device | str | None = None,
        enforce_eager: bool = False,
        seeded_requests: bool = True,
        **llm_kwargs: Any,
    ):
        vllm = _import_vllm()
        fields = {f.name for f in dataclasses.fields(vllm.EngineArgs)}
        if "logprobs_mode" not in fields:
            raise ImportError(
                f"vllm {vllm.__version__} has no logprobs_mode (needed for log-probs after "
                "temperature scaling); install a newer one: pip install -U .[vllm]"
            )
        _single_process_dist_env()
        self.tokenizer = tokenizer
        self.seeded_requests = seeded_requests
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=str(model_dir),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=seed,
            enforce_eager=enforce_eager,
            distributed_executor_backend="external_launcher",  # in this process: weights reachable
            logprobs_mode="processed_logprobs",
            **llm_kwargs,
        )
        self._top_k_off = vllm.SamplingParams().top_k  # "disabled" is -1 in old vLLM, 0 in new

    def _params(
        self,
        n: int,
        temperature: float,
        max_tokens: int,
        greedy: bool,
        min_tokens: int,
        seed: int | None,
    ):
        return self._vllm.SamplingParams(
            n=n,
            seed=seed,
            temperature=0.0 if greedy else temperature,
            top_p=1.0,
            top_k=self._top_k_off,
            min_p=0.0,
            max_tokens=max(1, max_tokens),
            min_tokens=min(min_tokens, max(1, max_tokens)),
            logprobs=0,  # the sampled token's log-prob only
            ignore_eos=True,  # stop on the tokenizer's EOS alone (stop_token_ids), as HF does
            stop_token_ids=[self.tokenizer.eos_token_id],
            detokenize=False,  # texts are decoded here, with the trainer's tokenizer
        )

    def generate(
        self,
        prompts: list[str],
        num_samples: int,
        temperature: float,
        max_new_tokens: int,
        prefixes: list[str] | None = None,
        greedy: bool = False,
        min_new_tokens: int = 0,
    ) -> Rollouts:
        tok = self.tokenizer
        if prefixes is not None and len(prefixes) != len(prompts):
            raise ValueError(f"{len(prefixes)} prefixes for {len(prompts)} prompts")
        if prefixes is not None and any(prefixes) and greedy:
            raise ValueError("greedy decoding of guided rollouts is not supported")
        p_ids = tok(list(prompts), add_special_tokens=False)["input_ids"]
        if prefixes is not None and any(prefixes):
            g_ids = tok(list(prefixes), add_special_tokens=False)["input_ids"]
            g_ids = [
                g[:max_new_tokens] if pre else [] for g, pre in zip(g_ids, prefixes, strict=True)
            ]
            min_new_tokens = 0  # as the HF path: no minimum for guided rollouts
        else:
            g_ids = [[] for _ in prompts]
        n = 1 if greedy else num_samples  # greedy rows of a prompt are all the same
        seed = None
        if self.seeded_requests and not greedy:
            seed = int(torch.randint(0, 2**31 - len(prompts) - 1, ()).item())
        params = [
            self._params(
                n,
                temperature,
                max_new_tokens - len(g),
                greedy,
                min_new_tokens,
                None if seed is None else seed + i,
            )
            for i, g in enumerate(g_ids)
        ]
        requests = [{"prompt_token_ids": p + g} for p, g in zip(p_ids, g_ids, strict=True)]
        outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        return rollouts_from_vllm(
            outputs, p_ids, g_ids, num_samples, max_new_tokens, tok, self.device
        )

    @torch.no_grad()
    def sync_weights(self, model) -> None:
        """Load the policy's weights (LoRA merged, see `policy_weights`) into the engine, tensor
        by tensor, and drop its prefix cache (cached KV blocks were computed with the old
        weights). Under ZeRO-3 each parameter is gathered while it is copied."""
        _engine_model(self.llm).load_weights(policy_weights(model))
        self.llm.reset_prefix_cache()


def rollouts_from_vllm(
    outputs,
    prompt_ids: list[list[int]],
    guide_ids: list[list[int]],
    num_samples: int,
    max_new_tokens: int,
    tokenizer,
    device: torch.device | str = "cpu",
) -> Rollouts:
    """`Rollouts` from vLLM's `RequestOutput`s, one per prompt (its `outputs` hold the samples,
    each with `index`, `token_ids` and `logprobs`: per token a {token_id: Logprob} dict). A
    request holding a single sample (greedy) fills all `num_samples` rows of its prompt."""
    eos = tokenizer.eos_token_id
    rows, logps, prompts_per_row, guide_lens, truncated = [], [], [], [], []
    for out, prompt, guide in zip(outputs, prompt_ids, guide_ids, strict=True):
        samples = sorted(out.outputs, key=lambda c: c.index)
        if len(samples) == 1 and num_samples > 1:
            samples = samples * num_samples
        if len(samples) != num_samples:
            raise RuntimeError(f"vLLM returned {len(samples)} samples, expected {num_samples}")
        for c in samples:
            tokens = list(c.token_ids)
            if c.logprobs is None:
                raise RuntimeError("vLLM returned no log-probs: SamplingParams(logprobs=0) lost")
            lp = [float(step[tok].logprob) for step, tok in zip(c.logprobs, tokens, strict=True)]
            cont, lp, trunc = _cut_completion(tokens, lp, max_new_tokens - len(guide), eos)
            rows.append(list(guide) + cont)
            logps.append([0.0] * len(guide) + lp)
            prompts_per_row.append(prompt)
            guide_lens.append(len(guide))
            truncated.append(trunc)
    return _lay_out(prompts_per_row, rows, logps, guide_lens, truncated, tokenizer, device)
