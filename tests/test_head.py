"""The fused LM head (`grpo_core.rollout.head`): a hand-computed case, and the same numbers and
gradients as the unfused head (logits, log_softmax, gather) in float32 and bfloat16."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_core.rollout.head import fused_head_logprobs
from grpo_core.rollout.scoring import _logprobs


def _head(weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.nn.Linear:
    head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        head.weight.copy_(weight)
        if bias is not None:
            head.bias.copy_(bias)
    return head


def test_a_hand_computed_case_at_temperature_two():
    # logits (2 ln 2, 0, 0) at T = 2: z = (ln 2, 0, 0), p = (1/2, 1/4, 1/4).
    head = _head(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    head.requires_grad_(False)
    hidden = torch.tensor([[[2 * math.log(2), 0.0]]], requires_grad=True)
    logp, entropy = fused_head_logprobs(
        head, hidden, torch.tensor([[0]]), 2.0, with_entropy=True, entropy_grad=True
    )
    assert logp.item() == pytest.approx(math.log(0.5), abs=1e-6)
    assert entropy.item() == pytest.approx(1.5 * math.log(2), abs=1e-6)
    # d logp_0 / dz = (1 - 1/2, -1/4, -1/4); / T for the logits; through W to (h0, h1).
    (grad,) = torch.autograd.grad(logp.sum(), hidden, retain_graph=True)
    assert grad[0, 0].tolist() == pytest.approx([0.25, -0.125], abs=1e-6)
    # dH/dz_j = -p_j (log p_j + H), H = 1.5 ln 2: (-1/2 (ln 2 / 2), -1/4 (-ln 2 / 2), idem)
    (grad,) = torch.autograd.grad(entropy.sum(), hidden)
    ln2 = math.log(2)
    assert grad[0, 0].tolist() == pytest.approx([-ln2 / 4 / 2, ln2 / 8 / 2], abs=1e-6)


def _unfused(head, hidden, targets, t, with_entropy, entropy_grad):
    return _logprobs(head(hidden), targets, t, with_entropy, entropy_grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_same_log_probs_entropies_and_gradients_as_the_unfused_head(dtype, temperature):
    """Every input's gradient (hidden states, weight, bias), through the log-probs and the
    entropy together, with pieces that do not divide the rows (5 rows of 3 at a time)."""
    torch.manual_seed(0)
    v, h = 50, 8
    weight, bias = torch.randn(v, h), torch.randn(v)
    hidden0 = torch.randn(3, 5, h)
    targets = torch.randint(0, v, (3, 5))
    mix = torch.randn(3, 5)  # a loss weighing each token's log-prob and entropy differently
    results = []
    for fused in (True, False):
        head = _head(weight, bias).to(dtype)
        hidden = hidden0.to(dtype).requires_grad_()
        if fused:
            logp, entropy = fused_head_logprobs(
                head, hidden, targets, temperature, True, True, piece_bytes=3 * 4 * v
            )
        else:
            logp, entropy = _unfused(head, hidden, targets, temperature, True, True)
        (logp * mix + entropy * mix.flip(0)).sum().backward()
        grads = (hidden.grad, head.weight.grad, head.bias.grad)
        results.append((logp.detach(), entropy.detach(), grads))
    (lf, ef, gf), (lu, eu, gu) = results
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(lf, lu, atol=tol) and torch.allclose(ef, eu, atol=tol)
    for a, b in zip(gf, gu, strict=True):
        assert a.dtype == b.dtype == dtype
        assert torch.allclose(a.float(), b.float(), atol=tol, rtol=tol), (a - b).abs().max()


def test_no_gradient_asked_none_kept():
    """Under no_grad the fused head saves nothing for a backward; entropy without
    `entropy_grad` is detached."""
    head = _head(torch.randn(10, 4))
    hidden = torch.randn(1, 3, 4, requires_grad=True)
    with torch.no_grad():
        logp, entropy = fused_head_logprobs(head, hidden, torch.zeros(1, 3, dtype=torch.long))
    assert entropy is None and logp.grad_fn is None
    logp, entropy = fused_head_logprobs(
        head, hidden, torch.zeros(1, 3, dtype=torch.long), with_entropy=True
    )
    assert logp.grad_fn is not None and entropy.grad_fn is None
