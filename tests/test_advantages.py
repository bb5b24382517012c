import pytest
import torch

from grpo_core.algorithms.advantages import get_advantage, group_reward_std, grpo_advantage


def test_grpo_advantage_hand_computed():
    # Group 1: rewards [1, 0, 0, 0]: mean 0.25, unbiased std sqrt(0.25) = 0.5.
    # Group 2: rewards [1, 1, 0, 0]: mean 0.5, unbiased std sqrt(1/3).
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0])
    adv = grpo_advantage(rewards, group_size=4, epsilon=0.0)
    s = (1 / 3) ** 0.5
    expected = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.5 / s, 0.5 / s, -0.5 / s, -0.5 / s])
    torch.testing.assert_close(adv, expected)


def test_identical_rewards_give_zero_advantage():
    rewards = torch.tensor([1.0, 1, 1, 0, 0, 0])
    assert torch.equal(grpo_advantage(rewards, 3), torch.zeros(6))
    torch.testing.assert_close(group_reward_std(rewards, 3), torch.zeros(2))


def test_registry_and_shape_errors():
    assert get_advantage("grpo") is grpo_advantage
    with pytest.raises(ValueError, match="unknown advantage estimator 'nope'"):
        get_advantage("nope")
    with pytest.raises(ValueError, match="groups of 4"):
        grpo_advantage(torch.zeros(6), 4)


def test_registry_refuses_a_second_registration_under_one_name():
    from grpo_core.algorithms.advantages import register_advantage

    with pytest.raises(ValueError, match="'grpo' is registered twice"):
        register_advantage("grpo")(lambda rewards, group_size: rewards)


def test_dr_grpo_batch_norm_and_rloo_hand_computed():
    from grpo_core.algorithms.advantages import (
        batch_norm_advantage,
        dr_grpo_advantage,
        rloo_advantage,
    )

    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0])
    # Dr. GRPO: r - group mean (0.25 and 0.5).
    torch.testing.assert_close(
        dr_grpo_advantage(rewards, 4),
        torch.tensor([0.75, -0.25, -0.25, -0.25, 0.5, 0.5, -0.5, -0.5]),
    )
    # Batch std: 3 ones in 8 -> mean 0.375, unbiased var = (3 * 0.625^2 + 5 * 0.375^2) / 7 = 15/56.
    s = (15 / 56) ** 0.5
    torch.testing.assert_close(
        batch_norm_advantage(rewards, 4, epsilon=0.0),
        torch.tensor([0.75, -0.25, -0.25, -0.25, 0.5, 0.5, -0.5, -0.5]) / s,
    )
    # RLOO, first group: 1 - mean(0, 0, 0) = 1; 0 - mean(1, 0, 0) = -1/3.
    torch.testing.assert_close(
        rloo_advantage(rewards, 4)[:4], torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3])
    )


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "batch_norm", "rloo"])
def test_every_estimator_gives_zero_for_identical_rewards_and_sums_to_zero(name):
    fn = get_advantage(name)
    assert torch.equal(fn(torch.ones(8), 8), torch.zeros(8))
    adv = fn(torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 0]), 4)
    torch.testing.assert_close(adv.view(2, 4).sum(dim=1), torch.zeros(2))
