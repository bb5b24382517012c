"""A KV cache that grows in place: each layer's keys and values live in a buffer with room for
the tokens still to come, so a decoding step writes one position instead of copying the whole
cache (`DynamicLayer`'s `torch.cat`: 11% of a SmolLM2 generation, and more the longer it runs).

Attention reads the same numbers either way (the layer returns a view of the filled part of its
buffer), so the sampled tokens and their log-probs are the same bit for bit
(`tests/test_rollout.py`).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of a preallocated buffer with `reserve`
    free positions after the ones first written. Whoever replaces `keys` / `values` (a batch
    expansion or selection) gets a fresh buffer made from them at the next update."""

    def __init__(self, reserve: int):
        super().__init__()
        self.reserve = reserve
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def _owns(self) -> bool:
        """Whether `keys` / `values` are still the views this layer made of its buffers."""
        if self._buffers is None:
            return False
        bk, bv = self._buffers
        return (
            self.keys.data_ptr() == bk.data_ptr()
            and self.values.data_ptr() == bv.data_ptr()
            and self.keys.shape[0] == bk.shape[0]
        )

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        used, new = self.get_seq_length(), key_states.shape[-2]
        fits = self._owns() and used + new <= self._buffers[0].shape[-2]
        if not fits:
            buffers = []
            for old, states in ((self.keys, key_states), (self.values, value_states)):
                b, h, _, d = states.shape
                buf = states.new_empty(b, h, used + new + self.reserve, d)
                if used:
                    buf[:, :, :used] = old
                buffers.append(buf)
            self._buffers = (buffers[0], buffers[1])
        bk, bv = self._buffers
        bk[:, :, used : used + new] = key_states
        bv[:, :, used : used + new] = value_states
        self.keys, self.values = bk[:, :, : used + new], bv[:, :, : used + new]
        return self.keys, self.values

    def reset(self) -> None:
        self._buffers = None
        super().reset()


def growing_cache(config, reserve: int) -> DynamicCache:
    """A `DynamicCache` for `config` whose full-attention layers grow in place with room for
    `reserve` more positions (sliding-window layers are left as transformers makes them)."""
    cache = DynamicCache(config=config)
    layers = getattr(cache, "layers", None)
    if layers:
        cache.layers = [
            GrowingLayer(reserve) if type(layer) is DynamicLayer else layer for layer in layers
        ]
    return cache
