import math

import pytest
import torch

from grpo_core.algorithms.losses import agg_loss, clipped_surrogate, kl_k3, masked_mean


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


def test_sequence_aggregations_hand_computed():
    loss = torch.tensor([[1.0, 3.0, 9.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # seq-mean-token-mean: mean(mean(1, 3), mean(4)) = (2 + 4) / 2
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.0)
    # seq-mean-token-sum-norm with a budget of 4 tokens: (4 + 4) / (2 * 4)
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm", max_tokens=4).item() == pytest.approx(
        1.0
    )
    # Global counts for micro-batches: one sequence of a batch of 4.
    one = agg_loss(loss[:1], mask[:1], "seq-mean-token-mean", num_seqs=4)
    assert one.item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="needs max_tokens"):
        agg_loss(loss, mask, "seq-mean-token-sum-norm")


def test_dr_grpo_aggregation_ignores_other_sequences_lengths():
    loss = torch.ones(2, 6)
    short = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]])
    long = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    grads = []
    for mask in (short, long):
        x = loss.clone().requires_grad_(True)
        agg_loss(x, mask, "seq-mean-token-sum-norm", max_tokens=6).backward()
        grads.append(x.grad[0])
    torch.testing.assert_close(grads[0], grads[1])  # sequence 0's tokens weigh the same
    grads = []
    for mask in (short, long):
        x = loss.clone().requires_grad_(True)
        agg_loss(x, mask, "token-mean").backward()
        grads.append(x.grad[0])
    assert not torch.allclose(grads[0], grads[1])  # whereas token-mean does depend on them


def test_dual_clip_bounds_negative_advantage_losses():
    logp = torch.log(torch.tensor([[5.0, 5.0, 0.5]]))
    adv = torch.tensor([[-1.0, 1.0, -1.0]])
    plain = clipped_surrogate(logp, torch.zeros(1, 3), adv).per_token
    dual = clipped_surrogate(logp, torch.zeros(1, 3), adv, dual_clip=3.0).per_token
    # ratio 5, A = -1: the plain loss is 5, dual clip bounds it at 3; A > 0 and small ratios
    # are untouched.
    torch.testing.assert_close(plain, torch.tensor([[5.0, -1.2, 0.8]]))
    torch.testing.assert_close(dual, torch.tensor([[3.0, -1.2, 0.8]]))


def test_k1_k2_hand_computed_and_registry():
    from grpo_core.algorithms.losses import KL_ESTIMATORS, kl_k1, kl_k2

    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    torch.testing.assert_close(kl_k1(logp, ref), torch.tensor([math.log(2)]))
    torch.testing.assert_close(kl_k2(logp, ref), torch.tensor([0.5 * math.log(2) ** 2]))
    assert KL_ESTIMATORS.names() == ["k1", "k2", "k3"]
    # All three estimate the same KL: averaged over samples of pi they agree (k1, k3 exactly
    # in expectation). pi = (0.5, 0.5), ref = (0.25, 0.75): KL = 0.5 log 2 + 0.5 log(2/3).
    p, r = torch.tensor([0.5, 0.5]).log(), torch.tensor([0.25, 0.75]).log()
    kl = 0.5 * math.log(2) + 0.5 * math.log(2 / 3)
    for name in ("k1", "k3"):
        assert (0.5 * KL_ESTIMATORS.get(name)(p, r)).sum().item() == pytest.approx(kl)
