"""PPO's pieces for RLHF: the KL-penalised per-token reward, the clipped surrogate and the clipped value loss.

RLHF maximises ``E[r(x, y)] − β·KL(π ‖ π_ref)`` (InstructGPT Eq. 2). As in InstructGPT and TRL, the KL is
paid token by token — each response token's reward is ``−β·k_t`` (``k_t`` a per-token KL estimate, k1 by
default, see :mod:`minillm.alignment.kl`) — and the reward model's score for the whole response is added
on the last response token.

PPO (Schulman et al. 2017, Eq. 7) then takes several gradient steps on the same samples without drifting
too far: with ratio ``ρ = π_θ(y_t)/π_old(y_t)`` it maximises ``min(ρÂ, clip(ρ, 1−ε, 1+ε)Â)``. Once ρ has
moved past the bound in the direction the advantage favours, the gradient is zero; in the other
direction it is never clipped (the min keeps the pessimistic term).
"""

from __future__ import annotations

import torch

from minillm.alignment.kl import kl_estimate, kl_k3
from minillm.alignment.logprobs import masked_mean

__all__ = [
    "kl_penalised_rewards",
    "clipped_policy_loss",
    "clip_statistics",
    "clipped_value_loss",
    "last_true_index",
]


def last_true_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last 1 in each row of a ``[B, L]`` mask (a row without any is an error)."""
    if mask.dim() != 2:
        raise ValueError(f"mask must be [B, L], got shape {tuple(mask.shape)}")
    m = mask.to(torch.long)
    if torch.any(m.sum(dim=1) == 0):
        raise ValueError("a row of the mask has no true element")
    positions = torch.arange(m.shape[1], device=m.device).expand_as(m)
    return (positions * m).max(dim=1).values


def kl_penalised_rewards(
    scores: torch.Tensor,
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    estimator: str = "k1",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards ``−β·KL_t`` with ``scores[b]`` added at row b's last response token.

    ``logp``, ``ref_logp``, ``mask`` are ``[B, L]`` (log-probs of the sampled tokens under the policy
    and the reference); ``scores`` is ``[B]``. Returns ``(rewards, kl)``, both zero where ``mask`` is 0.
    """
    if beta < 0:
        raise ValueError(f"beta must be non-negative, got {beta}")
    if scores.shape != (mask.shape[0],):
        raise ValueError(f"scores must have shape ({mask.shape[0]},), got {tuple(scores.shape)}")
    m = mask.to(logp.dtype)
    kl = kl_estimate(logp.detach(), ref_logp.detach(), estimator) * m
    rewards = -beta * kl
    last = last_true_index(mask)
    rewards[torch.arange(len(scores), device=rewards.device), last] += scores.to(rewards.dtype)
    return rewards, kl


def clipped_surrogate(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip_eps: float = 0.2
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token ``min(ρ Â, clip(ρ, 1−ε, 1+ε) Â)`` with ρ = π/π_old, and where the clipped term was the smaller.

    The objective before any reduction: :func:`clipped_policy_loss` averages it over every token,
    :mod:`minillm.alignment.pg_losses` offers the other reductions.
    """
    if clip_eps <= 0:
        raise ValueError(f"clip_eps must be positive, got {clip_eps}")
    ratio = torch.exp(logp - old_logp.detach())
    advantages = advantages.detach()
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    return torch.minimum(unclipped, clipped), clipped < unclipped


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``−mean_t min(ρ_t Â_t, clip(ρ_t, 1−ε, 1+ε) Â_t)`` over masked tokens (every token counts once).

    Returns the loss and a few diagnostics: the fraction of tokens whose ratio was clipped and the
    approximate KL between the new and the sampling policy (k3 form).
    """
    objective, was_clipped = clipped_surrogate(logp, old_logp, advantages, clip_eps)
    return -masked_mean(objective, mask), clip_statistics(logp, old_logp, was_clipped, mask)


def clip_statistics(
    logp: torch.Tensor, old_logp: torch.Tensor, was_clipped: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """A PPO update's diagnostics over the masked tokens: the fraction whose ratio was clipped and the
    approximate KL between the new and the sampling policy (k3 form)."""
    with torch.no_grad():
        clip_fraction = masked_mean(was_clipped.to(logp.dtype), mask).item()
        approx_kl = masked_mean(kl_k3(logp, old_logp), mask).item()
    return {"clip_fraction": clip_fraction, "approx_kl": approx_kl}


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, clip: float = 0.2
) -> torch.Tensor:
    """``½·mean max((V − R)², (V_clipped − R)²)``: the value head may move at most ``clip`` per update."""
    old_values = old_values.detach()
    returns = returns.detach()
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * masked_mean(torch.maximum((values - returns) ** 2, (clipped - returns) ** 2), mask)
