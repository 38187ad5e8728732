"""Advantages: how much better an action was than expected — GAE with a value head, or GRPO's group baseline.

PPO needs, for every response token, an advantage Â_t. Two ways, one switch apart in the RLHF loop:

- **GAE** (Schulman et al. 2016) with a learned value V(s_t): ``δ_t = r_t + γ V_{t+1} − V_t`` and
  ``Â_t = Σ_k (γλ)^k δ_{t+k}``; the returns ``Â_t + V_t`` are the value head's regression targets.
- **GRPO** (DeepSeekMath §4.1.2): sample G responses to the same prompt and use the group as the
  baseline, ``Â_i = (r_i − mean(r)) / (std(r) + ε)`` for every token of response i. No value model.
  We use the unbiased (Bessel-corrected) std and ε = 1e-4, as TRL does; a group whose rewards are all
  equal gets zero advantage (nothing to learn from it), not a NaN.
"""

from __future__ import annotations

import torch

__all__ = ["gae", "grpo_advantages", "whiten"]


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the masked (response) positions of each row.

    ``rewards``, ``values`` and ``mask`` are ``[B, L]``; a row's real positions must be one contiguous
    run (right padding). The episode ends at the last real position (V after it is 0). Returns
    ``(advantages, returns)``, both zero at padded positions.
    """
    if not (rewards.shape == values.shape == mask.shape) or rewards.dim() != 2:
        raise ValueError(
            f"rewards, values and mask must be equal [B, L] shapes, got {tuple(rewards.shape)}, "
            f"{tuple(values.shape)}, {tuple(mask.shape)}"
        )
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must lie in [0, 1], got gamma={gamma}, lam={lam}")
    m = mask.to(rewards.dtype)
    values = values.detach() * m
    rewards = rewards * m
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])
    next_advantage = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage_t = (delta + gamma * lam * next_advantage) * m[:, t]
        advantages[:, t] = advantage_t
        # Padding after the episode must not leak back: carry only from real positions.
        next_value = torch.where(m[:, t] > 0, values[:, t], next_value * 0)
        next_advantage = torch.where(m[:, t] > 0, advantage_t, next_advantage * 0)
    returns = (advantages + values) * m
    return advantages, returns


def grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-4, scale: bool = True) -> torch.Tensor:
    """Group-normalised advantages ``(r − mean_group) / (std_group + eps)``; only ``r − mean_group`` without ``scale``.

    ``rewards`` is ``[N]`` with consecutive runs of ``group_size`` responses to the same prompt (or
    ``[P, G]``); the result has the same shape. The std is unbiased (divides by G − 1).
    """
    if group_size < (2 if scale else 1):
        raise ValueError(f"group_size must be at least 2 (a std needs two samples), got {group_size}")
    if rewards.numel() % group_size != 0:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    if not scale:
        grouped = rewards.reshape(-1, group_size)
        return (grouped - grouped.mean(dim=1, keepdim=True)).reshape(rewards.shape)
    grouped = rewards.reshape(-1, group_size).to(torch.float64 if rewards.dtype == torch.float64 else torch.float32)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, unbiased=True, keepdim=True)
    return ((grouped - mean) / (std + eps)).reshape(rewards.shape).to(rewards.dtype)


def whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Shift and scale the masked entries to mean 0, std 1 (PPO's usual advantage normalisation)."""
    m = mask.to(values.dtype)
    count = m.sum()
    if count < 2:
        raise ValueError("whiten needs at least two masked elements")
    mean = (values * m).sum() / count
    var = (((values - mean) * m) ** 2).sum() / (count - 1)
    return (values - mean) * torch.rsqrt(var + eps) * m
