"""Per-token policy-gradient losses, as GRPO and RL-with-verifiable-rewards recipes write them.

Every loss here is a ``[N, L]`` tensor of per-token terms over N sampled responses (rows) and their tokens,
turned into one number by a *reduction* — a choice the recipes differ on, and that changes which responses
weigh most:

* ``"token"`` — the mean over every response token of the batch (DAPO, Yu et al. 2025): a long response
  counts as many times as it has tokens;
* ``"sequence"`` — the mean over responses of each response's own token mean (GRPO as first written,
  Shao et al. 2024): every response weighs the same, so each token of a short one weighs more;
* ``"constant"`` — the token sum divided by N × ``max_len``, a normaliser that does not depend on the
  lengths sampled (Dr. GRPO, Liu et al. 2025), so no length is favoured;
* ``"none"`` — no reduction: the ``[N, L]`` per-token terms, zero where ``mask`` is 0, for code that weighs or
  logs tokens itself (what practitioners' RL code expects of ``reduction="none"``).

The losses: REINFORCE (``−A·log π(token)``, with or without a baseline subtracted from the reward) and the
clipped surrogate of PPO/GRPO per token (:func:`minillm.alignment.ppo.clipped_surrogate`). Advantages come from
:func:`minillm.alignment.advantages.grpo_advantages`, GRPO's ``(r − mean)/(std + ε)`` within each prompt's group,
or only ``r − mean`` (``scale=False``, as Dr. GRPO argues: dividing by a small std over-weights easy or hopeless
prompts).
"""

from __future__ import annotations

import torch

from minillm.alignment.logprobs import masked_sum
from minillm.alignment.ppo import clipped_surrogate

__all__ = ["REDUCTIONS", "reduce_token_losses", "reinforce_loss", "clipped_token_loss"]

REDUCTIONS = ("token", "sequence", "constant", "none")


def reduce_token_losses(
    losses: torch.Tensor, mask: torch.Tensor, reduction: str, max_len: int | None = None
) -> torch.Tensor:
    """One number from per-token ``losses`` [N, L] over the tokens where ``mask`` is 1 (see the module docstring);
    with ``reduction="none"``, the [N, L] terms themselves, zeroed where ``mask`` is 0.

    ``max_len`` is the constant normaliser's length (default: L, the padded width).
    """
    if losses.shape != mask.shape or losses.dim() != 2:
        raise ValueError(f"losses and mask must both be [N, L], got {tuple(losses.shape)} and {tuple(mask.shape)}")
    m = mask.to(losses.dtype)
    if reduction == "token":
        return masked_sum(losses, mask) / m.sum().clamp(min=1)
    if reduction == "sequence":
        return (masked_sum(losses, mask, dim=1) / m.sum(1).clamp(min=1)).mean()
    if reduction == "constant":
        return masked_sum(losses, mask) / (losses.shape[0] * (max_len or losses.shape[1]))
    if reduction == "none":
        return torch.where(mask.bool(), losses, torch.zeros_like(losses))
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def reinforce_loss(
    logp: torch.Tensor,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    baseline: torch.Tensor | float | None = None,
    reduction: str = "token",
) -> torch.Tensor:
    """REINFORCE: per token ``−(r − b)·log π(token)``, its gradient ``−(r − b)·∇log π`` (Williams 1992).

    ``logp`` [N, L] are the sampled tokens' log-probs under the policy, ``rewards`` [N] one per response,
    ``baseline`` None (no baseline), a number, or [N] (e.g. the group mean): subtracting it leaves the
    gradient's expectation unchanged and lowers its variance.
    """
    advantage = rewards if baseline is None else rewards - baseline
    return reduce_token_losses(-advantage.detach()[:, None] * logp, mask, reduction)


def clipped_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    reduction: str = "token",
) -> torch.Tensor:
    """The PPO/GRPO clipped surrogate per token: ``−min(ρ·A, clip(ρ, 1 − ε, 1 + ε)·A)``, ρ = π/π_old.

    ``advantages`` is [N] (one per response, as GRPO's group advantage) or [N, L] (per token, as GAE).
    """
    per_token = advantages[:, None] if advantages.dim() == 1 else advantages
    objective, _ = clipped_surrogate(logp, old_logp, per_token, clip_eps)
    return reduce_token_losses(-objective, mask, reduction)
