"""The tiny world's tokenizer and model, built from scratch (no download).

- `build_char_tokenizer`: a character-level tokenizer built with `tokenizers`, saved as a
  standard HF tokenizer. Every character of the corpus is one token; a BPE model with no merges
  is exactly that, and `decoders.Fuse` joins tokens back without spaces. Downstream code only
  sees `AutoTokenizer`.
- `build_tiny_model`: the decoder, a standard, randomly initialised Llama from `transformers`.
  Llama rather than Qwen2 because transformers 5 loads a Qwen2 checkpoint's tokenizer as
  `Qwen2Tokenizer` whatever `tokenizer_config.json` says, which would replace the character
  tokenizer's pre-tokenizer; with Llama, `AutoTokenizer` honours the saved tokenizer class.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from grpo_core.config.model import TinyModelParams

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"


def build_char_tokenizer(texts: Iterable[str]) -> PreTrainedTokenizerFast:
    chars = sorted({c for text in texts for c in text})
    vocab = {tok: i for i, tok in enumerate([PAD, EOS, UNK, *chars])}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",  # generation appends on the right
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )


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
