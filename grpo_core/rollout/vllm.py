"""The vLLM rollout backend: a vLLM engine colocated in the training process (as TRL's
`vllm_mode="colocate"`), sampling with its own copy of the weights (`VLLMBackend`), the policy's
weights as vLLM loads them, LoRA merged (`policy_weights`), and `Rollouts` assembled from vLLM's
outputs (`rollouts_from_vllm`). The contract its rollouts must pass, and the truncated
importance weights that correct its log-probs, are in `grpo_core.rollout.backends`.

This module imports without vLLM; `VLLMBackend` imports it when built.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
from collections.abc import Iterator
from typing import Any

import torch

from grpo_core.rollout.rollouts import Rollouts

VLLM_INSTALL_HINT = (
    "the vLLM rollout backend needs vllm, which is not installed; install the optional extra: "
    "pip install .[vllm]   (Linux with an NVIDIA GPU; or set train.rollout_backend=hf)"
)

# ---- vLLM's outputs laid out as Rollouts -----------------------------------------------------


def _lay_out(
    prompt_ids: list[list[int]],
    rows: list[list[int]],
    logps: list[list[float]],
    truncated: list[bool],
    tokenizer,
    device: torch.device | str,
) -> Rollouts:
    """Rollouts from per-row token lists: [left-padded prompt | completion, right-padded].
    `rows[i]` is the completion of row i, `logps[i]` its sampler
    log-probs (same length), `prompt_ids[i]` its prompt."""
    pad = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    b = len(rows)
    p_len = max(len(p) for p in prompt_ids)
    t_len = max(len(r) for r in rows)
    ids = torch.full((b, p_len + t_len), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    cmask = torch.zeros((b, t_len), dtype=torch.long)
    logp = torch.zeros((b, t_len), dtype=torch.float32)
    for i, (prompt, row) in enumerate(zip(prompt_ids, rows, strict=True)):
        ids[i, p_len - len(prompt) : p_len] = torch.tensor(prompt, dtype=torch.long)
        ids[i, p_len : p_len + len(row)] = torch.tensor(row, dtype=torch.long)
        attn[i, p_len - len(prompt) : p_len + len(row)] = 1
        cmask[i, : len(row)] = 1
        logp[i, : len(row)] = torch.tensor(logps[i], dtype=torch.float32)
    texts = [tokenizer.decode(r, skip_special_tokens=True) for r in rows]
    return Rollouts(
        input_ids=ids.to(device),
        attention_mask=attn.to(device),
        completion_mask=cmask.to(device),
        prompt_len=p_len,
        texts=texts,
        truncated=torch.tensor(truncated, dtype=torch.bool, device=device),
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
                # Summed in float32 and rounded once: a bf16 base with float32 adapters gets the
                # nearest bf16 weight, not the delta rounded and then the sum rounded again.
                merged = weight.float()
                for a in adapters:
                    merged = merged + layer.get_delta_weight(a).float()
                weight = merged.to(param.dtype)
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
    tokenized here (no special tokens added, as the HF path) and handed to vLLM as token ids.

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
        greedy: bool = False,
        generators: list[torch.Generator] | None = None,
        min_new_tokens: int = 0,
    ) -> Rollouts:
        del generators  # vLLM seeds its requests itself (see the class doc)
        tok = self.tokenizer
        p_ids = tok(list(prompts), add_special_tokens=False)["input_ids"]
        n = 1 if greedy else num_samples  # greedy rows of a prompt are all the same
        seed = None
        if self.seeded_requests and not greedy:
            seed = int(torch.randint(0, 2**31 - len(prompts) - 1, ()).item())
        params = [
            self._params(
                n,
                temperature,
                max_new_tokens,
                greedy,
                min_new_tokens,
                None if seed is None else seed + i,
            )
            for i in range(len(p_ids))
        ]
        requests = [{"prompt_token_ids": p} for p in p_ids]
        outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        return rollouts_from_vllm(outputs, p_ids, num_samples, max_new_tokens, tok, self.device)

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
    num_samples: int,
    max_new_tokens: int,
    tokenizer,
    device: torch.device | str = "cpu",
) -> Rollouts:
    """`Rollouts` from vLLM's `RequestOutput`s, one per prompt (its `outputs` hold the samples,
    each with `index`, `token_ids` and `logprobs`: per token a {token_id: Logprob} dict). A
    request holding a single sample (greedy) fills all `num_samples` rows of its prompt."""
    eos = tokenizer.eos_token_id
    rows, logps, prompts_per_row, truncated = [], [], [], []
    for out, prompt in zip(outputs, prompt_ids, strict=True):
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
            cont, lp, trunc = _cut_completion(tokens, lp, max_new_tokens, eos)
            rows.append(cont)
            logps.append(lp)
            prompts_per_row.append(prompt)
            truncated.append(trunc)
    return _lay_out(prompts_per_row, rows, logps, truncated, tokenizer, device)
