"""Per-token estimators of KL(π ‖ π_ref) from tokens sampled from π (Schulman 2020).

RLHF keeps the policy π near the frozen reference π_ref (the SFT model) with a KL penalty. The exact KL
sums over the whole vocabulary at every step; with samples ``y ~ π`` one uses the log-ratio of the sampled
token only. Writing ``log r = log π_ref(y) − log π(y)``:

- k1 = −log r            unbiased, high variance, can be negative on a single token;
- k2 = ½ (log r)²        biased (it estimates a second-order approximation), low variance, ≥ 0;
- k3 = (r − 1) − log r   unbiased and always ≥ 0 (the GRPO paper's per-token KL, Eq. 4).

Our PPO adds ``−β·k1`` to each token's reward (the InstructGPT/TRL default); our GRPO adds ``β·k3`` to
the loss, as DeepSeekMath does. All functions work element-wise on tensors of any shape.
"""

from __future__ import annotations

import torch

__all__ = ["kl_k1", "kl_k2", "kl_k3", "kl_estimate", "ESTIMATORS"]


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = log π(y) − log π_ref(y)."""
    return logp - ref_logp


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 = ½ (log π(y) − log π_ref(y))²."""
    return 0.5 * (logp - ref_logp) ** 2


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = π_ref(y)/π(y) − 1 − log(π_ref(y)/π(y)); ``expm1`` keeps it accurate (and ≥ 0) near 0."""
    log_ratio = ref_logp - logp
    return torch.expm1(log_ratio) - log_ratio


ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """Dispatch to one of :data:`ESTIMATORS` by name."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {sorted(ESTIMATORS)}")
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp shape {tuple(logp.shape)} and ref_logp shape {tuple(ref_logp.shape)} differ")
    return ESTIMATORS[estimator](logp, ref_logp)
