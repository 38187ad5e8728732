"""PPO's clipped losses, the KL-penalised per-token reward and the GRPO loss, against hand values."""

import math

import pytest
import torch

from minillm.alignment import ppo, rlhf
from minillm.alignment.advantages import grpo_advantages
from minillm.alignment.kl import kl_k3
from minillm.alignment.logprobs import masked_mean


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


def _grpo_loss_by_definition(logp, old_logp, ref_logp, scores, mask, group_size, beta, clip_eps):
    """GRPO written token by token from DeepSeekMath Eq. 3–4 (float64, plain Python loops)."""
    n, length = mask.shape
    advantage = []
    for start in range(0, n, group_size):
        group = [scores[i].item() for i in range(start, start + group_size)]
        mean = sum(group) / group_size
        std = math.sqrt(sum((g - mean) ** 2 for g in group) / (group_size - 1))  # unbiased, as TRL
        advantage += [(g - mean) / (std + 1e-4) for g in group]
    terms = []
    for i in range(n):
        for t in range(length):
            if mask[i, t]:
                ratio = torch.exp(logp[i, t] - old_logp[i, t])
                clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps)
                surrogate = torch.minimum(ratio * advantage[i], clipped * advantage[i])
                log_r = ref_logp[i, t] - logp[i, t]
                terms.append(-surrogate + beta * (torch.exp(log_r) - 1 - log_r))
    return torch.stack(terms).mean()


@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_grpo_loss_matches_the_formula_in_value_and_gradient(beta):
    g = torch.Generator().manual_seed(0)
    n, length, group_size = 6, 5, 3
    old_logp = -torch.rand(n, length, generator=g, dtype=torch.float64) * 3
    logp0 = old_logp + 0.4 * torch.randn(n, length, generator=g, dtype=torch.float64)  # some ratios leave [0.8, 1.2]
    ref_logp = old_logp + 0.3 * torch.randn(n, length, generator=g, dtype=torch.float64)
    scores = torch.rand(n, generator=g, dtype=torch.float64)
    mask = torch.ones(n, length, dtype=torch.long)
    mask[1, 3:] = 0  # right padding
    mask[4, 1:] = 0
    mask[[0, 3], 0] = 0  # a prompt position
    logp = logp0.clone().requires_grad_(True)
    loss, stats = rlhf.grpo_loss(logp, old_logp, ref_logp, scores, mask, group_size, beta, clip_eps=0.2)
    loss.backward()
    logp_def = logp0.clone().requires_grad_(True)
    want = _grpo_loss_by_definition(logp_def, old_logp, ref_logp, scores, mask, group_size, beta, 0.2)
    want.backward()
    assert loss.item() == pytest.approx(want.item(), abs=1e-12)
    torch.testing.assert_close(logp.grad, logp_def.grad, rtol=0, atol=1e-12)
    assert torch.all(logp.grad[mask == 0] == 0)  # padding and prompt tokens get no gradient
    assert 0 < stats["clip_fraction"] < 1


def test_grpo_loss_of_an_all_equal_group_is_only_the_kl_term():
    """Equal rewards give zero advantage (no NaN): with β the loss is the mean k3, and 0 at the reference."""
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -1.5]], requires_grad=True)
    ref_logp = torch.tensor([[-1.2, -2.0], [-0.5, -1.0]])
    mask = torch.ones(2, 2)
    loss, _ = rlhf.grpo_loss(logp, logp.detach(), ref_logp, torch.tensor([0.7, 0.7]), mask, 2, beta=0.1)
    log_r = ref_logp - logp.detach()
    assert loss.item() == pytest.approx(0.1 * (torch.exp(log_r) - 1 - log_r).mean().item(), abs=1e-7)
    loss_at_ref, _ = rlhf.grpo_loss(ref_logp, ref_logp, ref_logp, torch.tensor([0.7, 0.7]), mask, 2, beta=0.1)
    assert loss_at_ref.item() == 0.0
    with pytest.raises(ValueError, match="beta"):
        rlhf.grpo_loss(logp, logp, ref_logp, torch.tensor([0.0, 1.0]), mask, 2, beta=-0.1)


def _rl_batch(dtype=torch.float32):
    """A fixed batch as train_rlhf sees one: 6 responses of different lengths (prompt and padding masked)."""
    g = torch.Generator().manual_seed(3)
    n, length = 6, 7
    old_logp = -torch.rand(n, length, generator=g, dtype=dtype) * 3
    logp = old_logp + 0.4 * torch.randn(n, length, generator=g, dtype=dtype)
    ref_logp = old_logp + 0.3 * torch.randn(n, length, generator=g, dtype=dtype)
    scores = torch.rand(n, generator=g, dtype=dtype)
    advantages = torch.randn(n, length, generator=g, dtype=dtype)
    mask = torch.ones(n, length, dtype=torch.long)
    mask[:, :2] = 0  # the prompt
    mask[1, 4:] = 0
    mask[4, 3:] = 0
    return logp, old_logp, ref_logp, scores, advantages, mask


def test_default_reduction_is_bit_identical_to_the_per_token_mean_the_committed_runs_used():
    """The committed RL results were trained with ``−masked_mean(objective)`` (+ ``β·masked_mean(k3)`` for GRPO):
    the default reduction must give the same loss and gradient to the last bit (float32, as the runs)."""
    logp0, old_logp, ref_logp, scores, advantages, mask = _rl_batch()

    def gae_before(logp):
        objective, _ = ppo.clipped_surrogate(logp, old_logp, advantages, 0.2)
        return -masked_mean(objective, mask)

    def grpo_before(logp):
        adv = grpo_advantages(scores, 3)[:, None] * mask
        objective, _ = ppo.clipped_surrogate(logp, old_logp, adv, 0.2)
        return -masked_mean(objective, mask) + 0.05 * masked_mean(kl_k3(logp, ref_logp), mask)

    def gae_now(logp):
        return rlhf.policy_loss(logp, old_logp, advantages, mask, 0.2, rlhf.RLHFConfig().reduction, 7)[0]

    def grpo_now(logp):
        return rlhf.grpo_loss(logp, old_logp, ref_logp, scores, mask, 3, 0.05, 0.2, rlhf.RLHFConfig().reduction, 7)[0]

    for before, now in ((gae_before, gae_now), (grpo_before, grpo_now)):
        a, b = logp0.clone().requires_grad_(True), logp0.clone().requires_grad_(True)
        loss_a, loss_b = before(a), now(b)
        loss_a.backward(), loss_b.backward()
        assert torch.equal(loss_a, loss_b) and torch.equal(a.grad, b.grad)
    # and the PPO path equals ppo.clipped_policy_loss, diagnostics included
    assert rlhf.policy_loss(logp0, old_logp, advantages, mask) == ppo.clipped_policy_loss(
        logp0, old_logp, advantages, mask
    )


def test_other_reductions_weigh_each_response_or_a_constant():
    """``"sequence"``: the mean over responses of each one's token mean; ``"constant"``: the token sum over
    N × max_len — of both the surrogate and (GRPO) the k3 term."""
    logp, old_logp, ref_logp, scores, advantages, mask = _rl_batch(torch.float64)
    objective, _ = ppo.clipped_surrogate(logp, old_logp, advantages, 0.2)
    m = mask.to(torch.float64)
    per_response = ((-objective * m).sum(1) / m.sum(1)).mean()
    seq, _ = rlhf.policy_loss(logp, old_logp, advantages, mask, 0.2, "sequence")
    const, _ = rlhf.policy_loss(logp, old_logp, advantages, mask, 0.2, "constant", max_len=10)
    assert seq.item() == pytest.approx(per_response.item(), abs=1e-12)
    assert const.item() == pytest.approx((-objective * m).sum().item() / (6 * 10), abs=1e-12)
    no_kl, _ = rlhf.grpo_loss(logp, old_logp, ref_logp, scores, mask, 3, 0.0, 0.2, "sequence")
    with_kl, _ = rlhf.grpo_loss(logp, old_logp, ref_logp, scores, mask, 3, 0.1, 0.2, "sequence")
    log_r = ref_logp - logp
    k3 = torch.exp(log_r) - 1 - log_r
    assert (with_kl - no_kl).item() == pytest.approx(0.1 * ((k3 * m).sum(1) / m.sum(1)).mean().item(), abs=1e-12)
    with pytest.raises(ValueError, match="reduction must be one of"):
        rlhf.policy_loss(logp, old_logp, advantages, mask, 0.2, "mean")
