"""Direct preference optimisation (Rafailov et al. 2023): learn from preference pairs without a reward model.

The KL-regularised RLHF optimum is ``π*(y|x) ∝ π_ref(y|x)·exp(r(x, y)/β)``, so a policy *defines* a reward
``r̂(x, y) = β·log(π(y|x)/π_ref(y|x))`` (up to a per-prompt constant that cancels in a comparison).
Plugging it into the Bradley–Terry likelihood gives the DPO loss (Eq. 7)::

    L = −log σ( β·[ (log π(y_w) − log π_ref(y_w)) − (log π(y_l) − log π_ref(y_l)) ] )

with the log-probs *summed* over response tokens (:func:`minillm.alignment.logprobs.sequence_logprobs`).
At initialisation π = π_ref, the margin is 0 and the loss is exactly ln 2. We log the implicit rewards
of chosen and rejected responses, their margin and the accuracy (strict ``>``, so it is 0 at step 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["DPOOutput", "dpo_loss"]


@dataclass
class DPOOutput:
    """The loss and the detached implicit rewards ``β·log(π/π_ref)`` of each pair."""

    loss: torch.Tensor
    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor

    @property
    def margins(self) -> torch.Tensor:
        return self.chosen_rewards - self.rejected_rewards

    @property
    def accuracy(self) -> float:
        """Fraction of pairs whose chosen response gets the strictly larger implicit reward."""
        return (self.margins > 0).float().mean().item()


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float = 0.1,
) -> DPOOutput:
    """The DPO loss, averaged over the batch of pairs; all inputs are ``[B]`` summed log-probs."""
    if beta <= 0:
        raise ValueError(f"beta must be positive, got {beta}")
    shapes = {t.shape for t in (policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)}
    if len(shapes) != 1 or policy_chosen_logps.dim() != 1:
        raise ValueError(f"all four log-prob tensors must share one [B] shape, got {sorted(map(tuple, shapes))}")
    chosen_log_ratio = policy_chosen_logps - ref_chosen_logps.detach()
    rejected_log_ratio = policy_rejected_logps - ref_rejected_logps.detach()
    logits = beta * (chosen_log_ratio - rejected_log_ratio)
    loss = -F.logsigmoid(logits).mean()
    return DPOOutput(loss, beta * chosen_log_ratio.detach(), beta * rejected_log_ratio.detach())
