"""LoRA on the policy (`train.lora`): peft adapters on named linear modules of chosen layers.
With LoRA the reference policy of the KL term is the policy with its adapters disabled."""

from __future__ import annotations

import torch

from grpo_core.errors import InputError

# `train.lora.target_modules` aliases, by the module names of Llama/Qwen/Mistral-style models.
LORA_TARGETS = {
    "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mlp": ["gate_proj", "up_proj", "down_proj"],
}


def lora_config(model, lora):
    """peft's LoraConfig for `train.lora` on `model`, with the aliases resolved and the module
    names and layer indices checked against the model (an InputError names the key)."""
    from peft import LoraConfig

    linear = sorted(
        {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    )
    targets = lora.target_modules
    if isinstance(targets, str):
        targets = LORA_TARGETS.get(targets, targets)
    if targets != "all-linear":
        missing = [t for t in targets if t not in linear]
        if missing:
            raise InputError(
                f"train.lora.target_modules={lora.target_modules!r}: the model has no linear "
                f"module named {missing}; its linear modules are {linear}"
            )
    layers = None
    if lora.layers is not None:
        num_layers = model.config.num_hidden_layers
        bad = [i for i in lora.layers if i >= num_layers]
        if bad:
            raise InputError(
                f"train.lora.layers={lora.layers}: the model has {num_layers} layers "
                f"(0..{num_layers - 1}); no layer {bad}"
            )
        layers = list(lora.layers)
        if targets == "all-linear":  # peft takes layers only with named targets
            head = model.get_output_embeddings()
            targets = [
                n.rsplit(".", 1)[-1]
                for n, m in model.named_modules()
                if isinstance(m, torch.nn.Linear) and m is not head and ".layers." in n
            ]
            targets = sorted(set(targets))
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        layers_to_transform=layers,
        layers_pattern="layers" if layers is not None else None,
        task_type="CAUSAL_LM",
    )


def add_lora(model, lora) -> torch.nn.Module:
    from peft import get_peft_model

    return get_peft_model(model, lora_config(model, lora))
