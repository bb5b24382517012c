import math

import pytest
import torch

from grpo_core.algorithms.losses import agg_loss, clipped_surrogate
from grpo_core.algorithms.offcontext import behaviour_logprobs, guide_prefix, importance_weights

SOLUTION = "7+8=15\n4+3+1=8\n\\boxed{85}"


@pytest.mark.parametrize(
    "fraction, expected",
    [
        (0.2, "7+8=15\n"),  # 3 words * 0.2 = 0.6 words, rounded half up: 1 word
        (0.34, "7+8=15\n"),
        (0.5, "7+8=15\n4+3+1=8\n"),  # 1.5 rounds half up to 2 words
        (0.67, "7+8=15\n4+3+1=8\n"),
        (1.0, SOLUTION),
    ],
)
def test_guide_prefix_cuts_at_word_boundaries(fraction, expected):
    assert guide_prefix(SOLUTION, fraction) == expected


def test_guide_prefix_keeps_the_whitespace_after_the_last_word():
    assert guide_prefix("we add  the digits then carry", 0.4) == "we add  "
    assert guide_prefix("one", 0.4) == ""  # 0.4 of one word rounds to none
    with pytest.raises(ValueError, match="in \\(0, 1\\]"):
        guide_prefix(SOLUTION, 0.0)


def test_importance_weight_by_hand():
    # Two tokens of prefix (forced by the guide), then two sampled ones.
    old = torch.tensor([[math.log(0.5), math.log(0.001), math.log(0.3), math.log(0.9)]])
    guide = torch.tensor([[1, 1, 0, 0]])
    torch.testing.assert_close(
        behaviour_logprobs(old, guide), torch.tensor([[0.0, 0.0, math.log(0.3), math.log(0.9)]])
    )
    # prefix tokens: clip(p^gamma, 0.01, 1); sampled tokens: exp(0) = 1.
    w = importance_weights(old, guide, gamma=1.0, c_min=0.01, c_max=1.0)
    torch.testing.assert_close(w, torch.tensor([[0.5, 0.01, 1.0, 1.0]]))
    w2 = importance_weights(old, guide, gamma=2.0, c_min=0.0, c_max=1.0)
    torch.testing.assert_close(w2, torch.tensor([[0.25, 1e-6, 1.0, 1.0]]))


def test_with_an_empty_guide_the_oc_grpo_loss_is_the_grpo_loss():
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(6, 5, generator=g)
    old = logp + 0.3 * torch.randn(6, 5, generator=g)
    adv = torch.randn(6, generator=g)
    mask = (torch.rand(6, 5, generator=g) > 0.2).long()
    w = importance_weights(old, torch.zeros_like(mask))
    assert torch.equal(w, torch.ones_like(w))
    grpo = agg_loss(clipped_surrogate(logp, old, adv).per_token, mask)
    oc = agg_loss(clipped_surrogate(logp, old, adv.unsqueeze(1) * w).per_token, mask)
    torch.testing.assert_close(oc, grpo, rtol=0, atol=0)


def test_weighted_tokens_scale_their_loss_by_the_weight():
    logp = torch.tensor([[-1.0, -2.0]])
    old = torch.tensor([[-1.2, -1.5]])
    adv = torch.tensor([2.0])
    w = torch.tensor([[0.5, 1.0]])
    plain = clipped_surrogate(logp, old, adv).per_token
    weighted = clipped_surrogate(logp, old, adv.unsqueeze(1) * w).per_token
    torch.testing.assert_close(weighted, plain * w)
