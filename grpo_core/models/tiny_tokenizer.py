"""A character-level tokenizer built with `tokenizers`, saved as a standard HF tokenizer.

Every character of the corpus is one token; a BPE model with no merges is exactly that, and
`decoders.Fuse` joins tokens back without spaces. Downstream code only sees `AutoTokenizer`.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

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
