"""How close two sets of weights trained by Adam must be when the only difference between the
runs is float32 rounding (other batch shapes, other summation orders, other kernels).

Derived from the computation rather than fit to one machine. Adam divides by sqrt(v): on an
entry whose gradient is near 0, a rounding-sized difference of the gradient can change its step
by anything up to Adam's bound on one step, lr (1 - beta1) / sqrt(1 - beta2) (Kingma & Ba 2015,
section 2.1). So every weight is held to that bound times the optimizer steps taken (no
rounding can move a weight further), and the bulk of the weights, all but a share `FEW` (at
least one: a small tensor may hold one near-zero-gradient entry), to a tight `atol` that a real
bug (a group trained twice, a gradient lost) moves most weights past.
"""

from __future__ import annotations

import torch

BETA1, BETA2 = 0.9, 0.999  # torch.optim.AdamW's defaults, which the trainer keeps
FEW = 0.01


def adam_bound(optimizer_steps: int, lr: float) -> float:
    """The furthest `optimizer_steps` Adam steps at rate `lr` can move one weight."""
    return optimizer_steps * lr * (1 - BETA1) / (1 - BETA2) ** 0.5


def assert_weights_close(
    got: torch.Tensor, want: torch.Tensor, *, bound: float, atol: float, key: str = ""
) -> None:
    """Within `bound` everywhere, and within `atol` but for a share FEW of the entries."""
    diff = (got - want).abs()
    assert float(diff.max()) <= bound, (key, float(diff.max()), bound)
    far = int((diff > atol).sum())
    assert far <= max(1, int(FEW * diff.numel())), (key, far, diff.numel(), float(diff.max()))
