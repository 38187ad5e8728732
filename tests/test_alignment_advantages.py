"""GAE and GRPO advantages against hand-worked values and a direct float64 sum of the definition."""

import math

import pytest
import torch

from minillm.alignment import advantages


def test_grpo_advantages_hand_case_unbiased_std():
    # rewards [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(1/3) → ±0.5 / (0.57735 + 1e-4) = ±0.86588
    got = advantages.grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=4)
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    torch.testing.assert_close(got, torch.tensor([expected, -expected, -expected, expected]))


def test_grpo_advantages_per_group_zero_mean_and_equal_rewards_give_zero():
    rewards = torch.tensor([[3.0, 3.0, 3.0], [0.0, 1.0, 5.0]])
    got = advantages.grpo_advantages(rewards, group_size=3)
    assert got.shape == (2, 3)
    assert torch.all(got[0] == 0) and not torch.isnan(got).any()
    assert abs(got[1].sum().item()) < 1e-6
    std = torch.tensor([0.0, 1.0, 5.0]).std(unbiased=True).item()
    torch.testing.assert_close(got[1], (torch.tensor([0.0, 1.0, 5.0]) - 2.0) / (std + 1e-4))
    flat = advantages.grpo_advantages(rewards.flatten(), group_size=3)
    torch.testing.assert_close(flat, got.flatten())


def test_grpo_advantages_rejects_bad_groups():
    with pytest.raises(ValueError, match="groups of 3"):
        advantages.grpo_advantages(torch.zeros(4), group_size=3)
    with pytest.raises(ValueError, match="at least 2"):
        advantages.grpo_advantages(torch.zeros(4), group_size=1)


def test_gae_hand_case():
    # r = [0, 0, 1], V = [0.5, 0.2, 0.4], gamma 0.9, lambda 0.8:
    # δ = [0 + 0.9·0.2 − 0.5, 0 + 0.9·0.4 − 0.2, 1 − 0.4] = [−0.32, 0.16, 0.6]
    # A2 = 0.6, A1 = 0.16 + 0.72·0.6 = 0.592, A0 = −0.32 + 0.72·0.592 = 0.10624
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.2, 0.4]])
    adv, ret = advantages.gae(rewards, values, torch.ones(1, 3), gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, torch.tensor([[0.10624, 0.592, 0.6]]))
    torch.testing.assert_close(ret, torch.tensor([[0.60624, 0.792, 1.0]]))


def test_gae_limits_monte_carlo_and_td():
    torch.manual_seed(0)
    rewards, values = torch.randn(2, 6, dtype=torch.float64), torch.randn(2, 6, dtype=torch.float64)
    mask = torch.ones(2, 6)
    adv_mc, _ = advantages.gae(rewards, values, mask, gamma=1.0, lam=1.0)  # return-to-go minus V
    torch.testing.assert_close(adv_mc, rewards.flip(1).cumsum(1).flip(1) - values)
    adv_td, _ = advantages.gae(rewards, values, mask, gamma=0.9, lam=0.0)  # one-step TD error
    next_v = torch.cat([values[:, 1:], torch.zeros(2, 1, dtype=torch.float64)], 1)
    torch.testing.assert_close(adv_td, rewards + 0.9 * next_v - values)


def _gae_by_definition(rewards, values, gamma, lam):
    """Â_t = Σ_k (γλ)^k δ_{t+k}, summed directly in float64 (one unpadded episode)."""
    n = len(rewards)
    deltas = [rewards[t] + gamma * (values[t + 1] if t + 1 < n else 0.0) - values[t] for t in range(n)]
    return [sum((gamma * lam) ** k * deltas[t + k] for k in range(n - t)) for t in range(n)]


def test_gae_with_padding_equals_definition_on_each_episode():
    torch.manual_seed(1)
    rewards, values = torch.randn(3, 7, dtype=torch.float64), torch.randn(3, 7, dtype=torch.float64)
    mask = torch.tensor([[0, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 0]])
    adv, _ = advantages.gae(rewards, values, mask, gamma=0.95, lam=0.9)
    for row in range(3):
        real = mask[row].bool()
        expected = _gae_by_definition(rewards[row, real].tolist(), values[row, real].tolist(), 0.95, 0.9)
        torch.testing.assert_close(adv[row, real], torch.tensor(expected, dtype=torch.float64))
        assert torch.all(adv[row, ~real] == 0)


def test_gae_rejects_bad_arguments():
    with pytest.raises(ValueError, match="shapes"):
        advantages.gae(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match="gamma"):
        advantages.gae(torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1, 3), gamma=1.5)


def test_whiten_gives_zero_mean_unit_std_on_masked_entries():
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, 4.0, -50.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    got = advantages.whiten(values, mask)
    real = got[mask.bool()]
    assert abs(real.mean().item()) < 1e-12
    assert real.std(unbiased=True).item() == pytest.approx(1.0, abs=1e-6)
    assert torch.all(got[~mask.bool()] == 0)
