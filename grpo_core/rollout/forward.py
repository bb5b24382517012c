"""Calling a causal LM the way sampling and scoring both do: through its peft / DDP /
DeepSpeed wrappers, with or without a KV cache, and with the rows that share a prompt (a
group's G rows) computed once, the prompt's KV cache then copied to every row of the group.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref

import torch
from transformers.cache_utils import DynamicLayer


def unwrap(model):
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


def forward(
    model, ids, attn, pos, cache=None, logits_to_keep: int = 0, hidden: bool = False
) -> torch.Tensor:
    """`model`'s logits; with `cache`, the KV cache is read and extended. `logits_to_keep` > 0
    computes the LM head on the last that many positions only, where the model supports it.

    `hidden`: the LM head's input at those positions (the final hidden states, (B, T, H))
    instead of its output, the head given no position to compute: the caller applies it
    (`unwrap(model).get_output_embeddings()`) in pieces of its choosing. The model is still
    called through its wrappers (DDP's forward, DeepSpeed's hooks), with gradients flowing
    through the returned states."""
    params = _forward_params(type(unwrap(model)))
    kwargs = {}
    if cache is None:
        kwargs["use_cache"] = False
    else:
        kwargs["use_cache"] = True
        kwargs["cache" if "cache" in params else "past_key_values"] = cache
    if logits_to_keep and "logits_to_keep" in params:
        kwargs["logits_to_keep"] = logits_to_keep
    with lora_in_bf16(model):
        if hidden:
            with head_inputs(model) as captured:
                model(input_ids=ids, attention_mask=attn, position_ids=pos, **kwargs)
            out = captured[0]
        else:
            out = model(input_ids=ids, attention_mask=attn, position_ids=pos, **kwargs).logits
    return out[:, -logits_to_keep:] if logits_to_keep else out


# Per peft model: its LoRA layers (peft's BaseTunerLayer modules), found once.
_TUNER_LAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _tuner_layers(model) -> list:
    """The LoRA layers of the peft model under `model`'s DDP / DeepSpeed wrappers ([] when it
    has none)."""
    while not hasattr(model, "peft_config"):
        inner = getattr(model, "module", None)
        if not isinstance(inner, torch.nn.Module):
            return []
        model = inner
    if model not in _TUNER_LAYERS:
        from peft.tuners.tuners_utils import BaseTunerLayer

        _TUNER_LAYERS[model] = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    return _TUNER_LAYERS[model]


@contextlib.contextmanager
def lora_in_bf16(model):
    """Within: a bf16 model's float32 LoRA adapters compute in bf16, as under the references'
    mixed precision (TRL's `bf16=True` autocasts; verl's FSDP computes in its bf16
    `param_dtype`): torch's autocast, with peft's cast of each adapter's input to float32 off.
    The adapters' weights and their optimizer state stay float32. Without this, every adapted
    layer copied its input to float32, ran two float32 matmuls and added a float32 result to
    a bf16 one, both ways: a forward and backward of 16 SmolLM2 rows took 3.7 s that way and
    2.9 s this way (benchmarks/results/smollm2-step-41.md has the whole step).
    Nothing changes for a float32 model or one without adapters."""
    layers = _tuner_layers(model)
    if not layers or unwrap(model).get_input_embeddings().weight.dtype != torch.bfloat16:
        yield
        return
    before = [getattr(m, "cast_input_dtype_enabled", True) for m in layers]
    for m in layers:
        m.cast_input_dtype_enabled = False
    try:
        with torch.autocast(device_type=unwrap(model).device.type, dtype=torch.bfloat16):
            yield
    finally:
        for m, flag in zip(layers, before, strict=True):
            m.cast_input_dtype_enabled = flag


@contextlib.contextmanager
def head_inputs(model):
    """Within: each call of `model`'s LM head appends its input to the yielded list and
    computes nothing (it is given zero positions)."""
    captured: list[torch.Tensor] = []

    def take(module, args):
        captured.append(args[0])
        return (args[0][..., :0, :], *args[1:])

    head = unwrap(model).get_output_embeddings()
    if head is None:
        raise TypeError(f"{type(unwrap(model)).__name__} has no output embeddings (LM head)")
    handle = head.register_forward_pre_hook(take)
    try:
        yield captured
    finally:
        handle.remove()
    if len(captured) != 1:
        raise RuntimeError(f"the LM head ran {len(captured)} times in one forward, not once")


class SharedRows:
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
    def find(cls, ids: torch.Tensor, attn: torch.Tensor) -> SharedRows | None:
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


def zero3_sharded(model) -> bool:
    """Whether DeepSpeed ZeRO-3 holds `model`'s weights sharded right now (outside a gather):
    then every forward is a sequence of collectives, so every process must run the same
    number of them, whatever its rows."""
    params = unwrap(model).parameters()
    first = next(params, None)
    if first is None or not hasattr(first, "ds_id"):  # not under ZeRO-3: every parameter or none
        return False
    return first.numel() == 0 or any(q.numel() == 0 for q in params)


def can_share(model) -> bool:
    """Whether rows may share a prompt pass: with gradient checkpointing, transformers turns
    the cache off in training; under ZeRO-3 (sharded) a micro-batch must be one forward, as a
    process's padding pass is."""
    if zero3_sharded(model):
        return False
    inner = unwrap(model)
    flag = getattr(inner, "is_activation_checkpointing", None)
    if flag is None:
        flag = getattr(inner, "is_gradient_checkpointing", False)
    return not flag


def prefill(model, ids, attn, pos, cache, logits_to_keep: int) -> torch.Tensor:
    """Forward `ids` into `cache`, each distinct row once, then the cache and the logits
    copied back to every row."""
    shared = SharedRows.find(ids, attn) if can_share(model) else None
    if shared is None:
        logits = forward(model, ids, attn, pos, cache, logits_to_keep)
        check_filled(cache, model)
        return logits
    i = shared.first
    logits = forward(model, ids[i], attn[i], pos[i], cache, logits_to_keep)
    check_filled(cache, model)
    shared.expand_cache(cache)
    return shared.expand(logits)


def check_filled(cache, model) -> None:
    # A model that ignored the cache would leave the next pass without its prompt.
    if cache.get_seq_length() == 0:
        raise RuntimeError(f"{type(unwrap(model)).__name__} did not fill the KV cache it was given")
