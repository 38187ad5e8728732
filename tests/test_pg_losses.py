"""minillm.alignment.pg_losses: each per-token policy-gradient loss and reduction against a float64 computation
written out with plain Python loops over the tokens, and the gradients they produce against the formulas."""

from __future__ import annotations

import math

import pytest
import torch

from minillm.alignment.advantages import grpo_advantages
from minillm.alignment.pg_losses import (
    REDUCTIONS,
    clipped_token_loss,
    reduce_token_losses,
    reinforce_loss,
)


def _batch(seed: int = 0):
    """4 responses of different lengths (mask), padded to 6 tokens; float64."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(4, 6, generator=g, dtype=torch.float64) * 3
    old = logp + 0.3 * torch.randn(4, 6, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]])
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0], dtype=torch.float64)
    return logp.requires_grad_(), old, mask, rewards


SCALAR_REDUCTIONS = [r for r in REDUCTIONS if r != "none"]


def _reduce_by_hand(values: list[list[float]], mask: torch.Tensor, reduction: str, max_len: int) -> float:
    rows = [[v for v, m in zip(row, mrow, strict=True) if m] for row, mrow in zip(values, mask.tolist(), strict=True)]
    if reduction == "token":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    if reduction == "sequence":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    return sum(sum(r) for r in rows) / (len(rows) * max_len)


@pytest.mark.parametrize("reduction", SCALAR_REDUCTIONS)
@pytest.mark.parametrize("baseline", [None, 0.4, "group"])
def test_reinforce_equals_the_loop_and_its_gradient_is_minus_advantage(reduction, baseline):
    logp, _, mask, rewards = _batch()
    b = grpo_advantages(rewards, 2, scale=False) if baseline == "group" else None
    base = rewards - b if baseline == "group" else baseline  # the group mean, per response
    loss = reinforce_loss(logp, rewards, mask, base, reduction)
    adv = [
        r - (0.0 if base is None else float(base) if isinstance(base, float) else float(base[i]))
        for i, r in enumerate(rewards.tolist())
    ]
    terms = [[-adv[i] * v for v in row] for i, row in enumerate(logp.tolist())]
    assert loss.item() == pytest.approx(_reduce_by_hand(terms, mask, reduction, 6), abs=1e-12)
    (grad,) = torch.autograd.grad(loss, logp)
    weights = {"token": 1 / mask.sum().item(), "constant": 1 / (4 * 6)}
    for i in range(4):
        for t in range(6):
            w = weights.get(reduction, 1 / (4 * mask[i].sum().item()))
            assert grad[i, t].item() == pytest.approx(-adv[i] * w * mask[i, t].item(), abs=1e-12)


@pytest.mark.parametrize("reduction", SCALAR_REDUCTIONS)
@pytest.mark.parametrize("per_token", [False, True])
def test_clipped_token_loss_equals_the_loop(reduction, per_token):
    logp, old, mask, rewards = _batch(1)
    adv = grpo_advantages(rewards, 2)
    if per_token:
        adv = adv[:, None] * torch.linspace(0.5, 1.5, 6, dtype=torch.float64)
    loss = clipped_token_loss(logp, old, adv, mask, 0.2, reduction)
    terms = []
    for i in range(4):
        row = []
        for t in range(6):
            a = adv[i, t].item() if per_token else adv[i].item()
            ratio = math.exp(logp[i, t].item() - old[i, t].item())
            row.append(-min(ratio * a, min(max(ratio, 0.8), 1.2) * a))
        terms.append(row)
    assert loss.item() == pytest.approx(_reduce_by_hand(terms, mask, reduction, 6), abs=1e-12)


def test_group_advantages_with_and_without_the_std():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5], dtype=torch.float64)
    centred = grpo_advantages(rewards, 4, scale=False)
    scaled = grpo_advantages(rewards, 4)
    for g in range(2):
        group = rewards[4 * g : 4 * g + 4].tolist()
        mean = sum(group) / 4
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / 3)  # unbiased, as GRPO
        for j in range(4):
            assert centred[4 * g + j].item() == pytest.approx(group[j] - mean, abs=1e-15)
            assert scaled[4 * g + j].item() == pytest.approx((group[j] - mean) / (std + 1e-4), abs=1e-12)
    # a group where every answer got the same reward carries no signal either way
    assert torch.equal(grpo_advantages(torch.ones(4), 4, scale=False), torch.zeros(4))


def test_reductions_weigh_lengths_differently_and_bad_arguments_are_refused():
    losses, mask = torch.ones(2, 4), torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    losses[1, 0] = 5.0
    assert reduce_token_losses(losses, mask, "token").item() == pytest.approx(9 / 5)
    assert reduce_token_losses(losses, mask, "sequence").item() == pytest.approx((1 + 5) / 2)
    assert reduce_token_losses(losses, mask, "constant", max_len=10).item() == pytest.approx(9 / 20)
    with pytest.raises(ValueError, match="reduction must be one of"):
        reduce_token_losses(losses, mask, "mean")
    with pytest.raises(ValueError, match=r"\[N, L\]"):
        reduce_token_losses(losses[0], mask[0], "token")
    with pytest.raises(ValueError, match="clip_eps must be positive"):
        clipped_token_loss(losses, losses, torch.ones(2), mask, clip_eps=0)


def test_no_reduction_returns_each_masked_token_term():
    logp, old, mask, rewards = _batch(1)
    adv = grpo_advantages(rewards, 2)
    per_token = clipped_token_loss(logp, old, adv, mask, 0.2, "none")
    assert per_token.shape == mask.shape
    for i in range(4):
        for t in range(6):
            ratio = math.exp(logp[i, t].item() - old[i, t].item())
            a = adv[i].item()
            expected = -min(ratio * a, min(max(ratio, 0.8), 1.2) * a) if mask[i, t] else 0.0
            assert per_token[i, t].item() == pytest.approx(expected, abs=1e-12)
    terms = reinforce_loss(logp, rewards, mask, 0.4, "none")
    expected = [
        [-(r - 0.4) * v * m for v, m in zip(row, mrow, strict=True)]
        for r, row, mrow in zip(rewards.tolist(), logp.tolist(), mask.tolist(), strict=True)
    ]
    assert torch.allclose(terms, torch.tensor(expected, dtype=torch.float64), atol=1e-12)
