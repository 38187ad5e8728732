"""Log-probabilities of responses under a policy, per-token entropy, and masked reductions.

Every alignment loss is built from the same few quantities: the log-probability the policy gives each
response token (prompt tokens and padding excluded by a mask), their sum over the response, and averages
that count only real tokens. Getting the mask and the one-position shift right once, here, is what keeps
the losses in the other files short.

Conventions: ``input_ids`` is ``[B, T]`` (prompt, then response, then right padding); ``response_mask``
is ``[B, T]`` and is 1 exactly at response tokens. ``logits`` is the model's output on ``input_ids``, so
``logits[:, t]`` predicts ``input_ids[:, t + 1]``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "masked_sum",
    "masked_mean",
    "token_logprobs",
    "sequence_logprobs",
    "token_entropy",
    "shifted_mask",
]


def _check_same_shape(values: torch.Tensor, mask: torch.Tensor) -> None:
    if values.shape != mask.shape:
        raise ValueError(f"values shape {tuple(values.shape)} and mask shape {tuple(mask.shape)} differ")


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is 1 (over ``dim``, or everything when ``dim`` is None)."""
    _check_same_shape(values, mask)
    masked = values * mask.to(values.dtype)
    return masked.sum() if dim is None else masked.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` over the positions where ``mask`` is 1.

    With ``dim=None`` every real token in the batch counts once (per-token normalisation); with
    ``dim=-1`` each row is averaged over its own tokens. A row with no real token would divide by zero,
    so that is an error rather than a silent NaN.
    """
    _check_same_shape(values, mask)
    count = mask.to(values.dtype).sum() if dim is None else mask.to(values.dtype).sum(dim=dim)
    if torch.any(count == 0):
        raise ValueError("masked_mean: the mask selects no element (in at least one row)")
    return masked_sum(values, mask, dim) / count


def shifted_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """The response mask aligned with next-token predictions: position t scores token t + 1."""
    if response_mask.dim() != 2:
        raise ValueError(f"response_mask must be [B, T], got shape {tuple(response_mask.shape)}")
    return response_mask[:, 1:]


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """``log p(input_ids[:, t+1] | input_ids[:, :t+1])`` for every t: shape ``[B, T-1]``.

    Computed as a gather from ``log_softmax`` (numerically stable: no exp of raw logits).
    """
    if logits.dim() != 3 or input_ids.dim() != 2 or logits.shape[:2] != input_ids.shape:
        raise ValueError(
            f"expected logits [B, T, V] and input_ids [B, T], got {tuple(logits.shape)} and {tuple(input_ids.shape)}"
        )
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def sequence_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``log π(response | prompt)``: the per-token log-probs *summed* over response tokens, shape ``[B]``.

    A sum (not a mean) because the probability of a sequence is the product of its tokens'
    probabilities; DPO and the RLHF KL use this quantity.
    """
    return masked_sum(token_logprobs(logits, input_ids), shifted_mask(response_mask), dim=-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy ``-Σ_v p_v log p_v`` of every next-token distribution, shape ``logits.shape[:-1]``.

    Watching the mean entropy of the policy during RL tells whether it is collapsing onto a few outputs.
    """
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)
