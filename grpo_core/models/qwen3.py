"""Qwen3-shaped models with random weights and Qwen3's real tokenizer, built with no download.

The tokenizer (byte-level BPE, 151,669 tokens, `<|im_end|>` as EOS, Qwen3's chat template) is
the one Qwen publishes, stored in `qwen3_tokenizer/` with its Apache-2.0 notice (NOTICE says
where it came from and its checksums). The model is `Qwen3ForCausalLM` with Qwen3's module
names (q/k/v/o_proj with q/k norms, gate/up/down_proj) and padded vocabulary (151,936), at the
shapes of a published size (`SIZES`) or smaller (`layers`, `hidden`): what a user's first real
run loads, at a size that trains in seconds on a CPU.

Random weights almost never emit `<|im_end|>` (one token in 152k), so nothing would test how
generation ends. `end_rate` > 0 wires the weights so that the model ends after about
1 / end_rate tokens: residual dimension `d` is 1 in every token's embedding and nothing writes
to it (its rows of o_proj and down_proj are 0), so after the final norm it is positive, and
only `<|im_end|>`'s row of the (untied) LM head reads it. Everything else stays random.
"""

from __future__ import annotations

import lzma
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

TOKENIZER_DIR = Path(__file__).with_name("qwen3_tokenizer")
VOCAB = 151_936  # the embedding rows of every Qwen3 size (the tokenizer has 151,669 tokens)
PAD, EOS = "<|endoftext|>", "<|im_end|>"
# Qwen3's published generation_config.json (the instruct sizes'). The trainer samples at
# `*.temperature` with top_k 0 and top_p 1 whatever it says, as verl and TRL do by default.
GENERATION = dict(
    bos_token_id=151643,
    do_sample=True,
    eos_token_id=[151645, 151643],
    pad_token_id=151643,
    temperature=0.6,
    top_k=20,
    top_p=0.95,
)


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool


# From the published config.json of each size (Qwen/Qwen3-<size>).
SIZES = {
    "0.6B": Shape(1024, 3072, 28, 16, 8, 128, True),
    "1.7B": Shape(2048, 6144, 28, 16, 8, 128, True),
    "4B": Shape(2560, 9728, 36, 32, 8, 128, True),
    "8B": Shape(4096, 12288, 36, 32, 8, 128, False),
    # Not a Qwen size: Qwen3's vocabulary and modules at a width that trains in seconds here.
    "tiny": Shape(64, 192, 2, 4, 2, 16, False),
}


def write_tokenizer(path: Path) -> None:
    """Qwen3's tokenizer.json and tokenizer_config.json (chat template included) into `path`."""
    path.mkdir(parents=True, exist_ok=True)
    with (
        lzma.open(TOKENIZER_DIR / "tokenizer.json.xz") as src,
        open(path / "tokenizer.json", "wb") as dst,
    ):
        shutil.copyfileobj(src, dst)
    shutil.copy(TOKENIZER_DIR / "tokenizer_config.json", path / "tokenizer_config.json")
    shutil.copy(TOKENIZER_DIR / "NOTICE", path / "TOKENIZER_NOTICE")  # Apache-2.0: the notice
    shutil.copy(TOKENIZER_DIR / "LICENSE", path / "TOKENIZER_LICENSE")  # and the licence travel


def build_qwen3(
    path: str | Path,
    size: str = "tiny",
    *,
    layers: int | None = None,
    end_rate: float = 0.0,
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
) -> Path:
    """Save a random-weight Qwen3 model of `size` (`SIZES`; `layers` keeps fewer layers) with
    Qwen3's tokenizer in `path`, and return it. `end_rate` > 0: `<|im_end|>` is drawn with
    about that probability at each step (a tied size is untied for it)."""
    if size not in SIZES:
        raise ValueError(f"size {size!r}: one of {', '.join(SIZES)}")
    if not 0.0 <= end_rate < 1.0:
        raise ValueError(f"end_rate {end_rate}: a probability in [0, 1)")
    path = Path(path)
    write_tokenizer(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    shape = SIZES[size]
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=layers or shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=40_960,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=shape.tied and end_rate == 0.0,
        bos_token_id=tokenizer.convert_tokens_to_ids(PAD),
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD),
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    if end_rate > 0.0:
        _wire_end(model, tokenizer, config.eos_token_id, end_rate)
    model.to(dtype).save_pretrained(path)
    GenerationConfig(**GENERATION).save_pretrained(path)
    return path


@torch.no_grad()
def _wire_end(model: Qwen3ForCausalLM, tokenizer, eos: int, rate: float) -> None:
    """Make `eos` about `rate` likely at every position (module docstring)."""
    d = model.config.hidden_size - 1
    model.model.embed_tokens.weight[:, d] = 1.0
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight[d] = 0.0
        layer.mlp.down_proj.weight[d] = 0.0
    head = model.lm_head.weight
    head[:, d] = 0.0
    # Calibrate on some text: the mean of dimension d after the final norm.
    ids = tokenizer("Natalia sold clips to 48 of her friends in April.", return_tensors="pt")
    states = model.model(**ids).last_hidden_state[0]
    hidden, logits = states[:, d], model.lm_head(states)
    others = torch.logsumexp(logits[:, torch.arange(VOCAB) != eos], dim=-1).mean()
    target = others + math.log(rate / (1.0 - rate))  # p(eos) = rate against the rest
    head[eos, d] = target / hidden.mean()
