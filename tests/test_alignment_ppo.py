"""PPO clipped surrogate, clipped value loss and the KL-penalised per-token reward, against hand values."""

import math

import pytest
import torch

from minillm.alignment import ppo


@pytest.mark.parametrize(
    ("advantage", "ratio", "objective", "d_objective_d_logratio"),
    [
        (+1.0, 1.3, 1.2, 0.0),  # above 1+ε with a positive advantage: clipped, no gradient
        (+1.0, 0.7, 0.7, 0.7),  # below 1−ε with a positive advantage: unclipped, gradient ρ·A
        (-1.0, 0.7, -0.8, 0.0),  # below 1−ε with a negative advantage: clipped, no gradient
        (-1.0, 1.3, -1.3, -1.3),  # above 1+ε with a negative advantage: unclipped, gradient ρ·A
        (+2.0, 1.1, 2.2, 2.2),  # inside the trust region: plain ρ·A
    ],
)
def test_clipped_surrogate_values_and_gradients(advantage, ratio, objective, d_objective_d_logratio):
    old_logp = torch.tensor([[-1.0]])
    logp = (old_logp + math.log(ratio)).requires_grad_(True)
    loss, stats = ppo.clipped_policy_loss(logp, old_logp, torch.tensor([[advantage]]), torch.ones(1, 1), 0.2)
    loss.backward()
    assert -loss.item() == pytest.approx(objective, abs=1e-6)
    # d(ρA)/d log ρ = ρA; the loss is −objective.
    assert -logp.grad.item() == pytest.approx(d_objective_d_logratio, abs=1e-6)
    assert stats["clip_fraction"] == (1.0 if d_objective_d_logratio == 0.0 else 0.0)


def test_clipped_surrogate_averages_over_masked_tokens_only():
    logp = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 2.0, 99.0], [3.0, 99.0, 99.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss, stats = ppo.clipped_policy_loss(logp, logp, adv, mask)
    assert loss.item() == pytest.approx(-(1 + 2 + 3) / 3)
    assert stats["approx_kl"] == 0.0


def test_clipped_value_loss_hand_case():
    # old V = 0, new V = 1, return 2, clip 0.2: unclipped err (1−2)² = 1, clipped (0.2−2)² = 3.24 → ½·3.24
    loss = ppo.clipped_value_loss(torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[2.0]]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(0.5 * 3.24)
    # a move towards the target inside the clip range is not clipped: ½·(0.1 − 2)²
    loss = ppo.clipped_value_loss(torch.tensor([[0.1]]), torch.tensor([[0.0]]), torch.tensor([[2.0]]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(0.5 * 1.9**2)


def test_kl_penalised_rewards_hand_case():
    logp = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-1.0, -1.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.5, 0.0], [-2.0, -1.0, -3.0, -1.0]])
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]])
    scores = torch.tensor([10.0, -4.0])
    rewards, kl = ppo.kl_penalised_rewards(scores, logp, ref, mask, beta=0.1, estimator="k1")
    torch.testing.assert_close(kl, torch.tensor([[0.5, -1.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0]]))
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 0.1, 10.0, 0.0], [0.0, 0.0, -0.2, -4.0]]))


def test_kl_penalised_rewards_and_last_index_reject_bad_input():
    with pytest.raises(ValueError, match="beta"):
        ppo.kl_penalised_rewards(torch.zeros(1), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), beta=-1)
    with pytest.raises(ValueError, match="scores"):
        ppo.kl_penalised_rewards(torch.zeros(2), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), beta=1)
    with pytest.raises(ValueError, match="no true element"):
        ppo.last_true_index(torch.tensor([[1, 0], [0, 0]]))
    assert ppo.last_true_index(torch.tensor([[1, 1, 0], [0, 0, 1]])).tolist() == [1, 2]
