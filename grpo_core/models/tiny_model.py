"""The tiny-world decoder: a standard, randomly initialised Llama from `transformers`.

Llama rather than Qwen2 because transformers 5 loads a Qwen2 checkpoint's tokenizer as
`Qwen2Tokenizer` whatever `tokenizer_config.json` says, which would replace the character
tokenizer's pre-tokenizer; with Llama, `AutoTokenizer` honours the saved tokenizer class.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from grpo_core.config.model import TinyModelParams


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase, params: TinyModelParams, seed: int
) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=params.hidden_size,
        num_hidden_layers=params.num_layers,
        num_attention_heads=params.num_heads,
        num_key_value_heads=params.num_heads,
        intermediate_size=params.intermediate_size,
        max_position_embeddings=params.max_position_embeddings,
        tie_word_embeddings=True,
        attention_bias=True,  # as Qwen2, the calibrated architecture
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)
