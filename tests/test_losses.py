import math

import pytest
import torch

from grpo_core.losses import agg_loss, clipped_surrogate, kl_k3, masked_mean


def test_masked_mean_and_token_mean():
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert masked_mean(x, m).item() == pytest.approx(2.0)
    torch.testing.assert_close(masked_mean(x, m, dim=1), torch.tensor([1.5, 3.0]))
    # token-mean divides by all unmasked tokens of the batch, or by a given global count.
    assert agg_loss(x, m).item() == pytest.approx(6.0 / 3)
    assert agg_loss(x, m, num_tokens=6).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        agg_loss(x, m, mode="seq-mean")


def test_clipped_surrogate_hand_computed():
    # ratios e^0 = 1, 1.5, 0.5, 1.5 against advantages +1, +1, -1, -1; clip 0.2 both sides.
    logp = torch.log(torch.tensor([[1.0, 1.5, 0.5, 1.5]]))
    old = torch.zeros(1, 4)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    out = clipped_surrogate(logp, old, adv, clip_low=0.2, clip_high=0.2)
    # -min(r A, clip(r) A): -1; -min(1.5, 1.2) = -1.2;
    # -min(-0.5, -0.8) = 0.8; -min(-1.5, -1.2) = 1.5
    torch.testing.assert_close(out.per_token, torch.tensor([[-1.0, -1.2, 0.8, 1.5]]))
    assert out.clipped_high.tolist() == [[False, True, False, False]]
    assert out.clipped_low.tolist() == [[False, False, True, False]]


def test_clipped_gradient_is_minus_advantage_times_ratio_inside_the_clip():
    logp = torch.tensor([[0.1, 0.5]], requires_grad=True)
    out = clipped_surrogate(logp, torch.zeros(1, 2), torch.tensor([2.0]), 0.2, 0.2)
    out.per_token.sum().backward()
    # Inside the clip range: d/dlogp of -r*A = -A*r; outside (r = e^0.5 > 1.2) the gradient is 0.
    torch.testing.assert_close(logp.grad, torch.tensor([[-2.0 * math.exp(0.1), 0.0]]))


def test_k3_kl_hand_computed():
    logp = torch.tensor([0.0, math.log(0.5)])
    ref = torch.tensor([0.0, math.log(0.25)])
    # d = ref - logp = [0, -log 2]: exp(d) - d - 1 = [0, 0.5 + log 2 - 1]
    torch.testing.assert_close(kl_k3(logp, ref), torch.tensor([0.0, math.log(2) - 0.5]))
    assert (kl_k3(torch.randn(100), torch.randn(100)) >= 0).all()
