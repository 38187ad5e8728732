"""The next-token loss: cross-entropy over a softmax of logits, written out by hand.

A language model outputs one logit per vocabulary entry at every position; the loss at a position is
``-log softmax(logits)[target] = logsumexp(logits) - logits[target]``. Computing ``logsumexp`` as
``m + log(sum(exp(z - m)))`` with ``m = max(z)`` keeps ``exp`` below 1, so logits of magnitude 1e4 do not
overflow. The gradient with respect to the logits is the famous ``softmax(z) - one_hot(target)``; this
module implements it by hand (an ``autograd.Function``) so that the course can check the derivation with
``torch.autograd.gradcheck``.
"""

from __future__ import annotations

import math

import torch

#: Targets equal to this value are masked: they add nothing to the loss and get zero gradient
#: (the same default as ``torch.nn.functional.cross_entropy``).
IGNORE_INDEX = -100

_REDUCTIONS = ("mean", "sum", "none")


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """``log softmax`` over the last dimension, via the max-shifted log-sum-exp (never overflows)."""
    shift = logits.amax(dim=-1, keepdim=True).detach()
    shifted = logits - shift
    return shifted - shifted.exp().sum(dim=-1, keepdim=True).log()


class _CrossEntropy(torch.autograd.Function):
    """Per-position cross-entropy with the hand-derived backward ``softmax - one_hot``."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
        mask = targets != ignore_index
        safe_targets = torch.where(mask, targets, torch.zeros_like(targets))
        shift = logits.amax(dim=-1, keepdim=True)
        log_norm = shift + (logits - shift).exp().sum(dim=-1, keepdim=True).log()  # logsumexp
        target_logit = logits.gather(-1, safe_targets.unsqueeze(-1))
        losses = (log_norm - target_logit).squeeze(-1) * mask
        ctx.save_for_backward(logits, log_norm, safe_targets, mask)
        return losses

    @staticmethod
    def backward(ctx, grad_losses: torch.Tensor):
        logits, log_norm, safe_targets, mask = ctx.saved_tensors
        grad = (logits - log_norm).exp()  # softmax
        grad.scatter_add_(-1, safe_targets.unsqueeze(-1), -torch.ones_like(log_norm))  # minus one-hot
        grad.mul_((grad_losses * mask).unsqueeze(-1))  # chain rule; masked positions get zero
        return grad, None, None


def cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = IGNORE_INDEX,
    reduction: str = "mean",
) -> torch.Tensor:
    """Cross-entropy of ``targets`` under ``softmax(logits)``, in nats.

    ``logits`` has shape ``(..., V)`` and ``targets`` the same leading shape ``(...)`` with integer class ids.
    ``reduction="mean"`` averages over the targets that are not ``ignore_index`` (NaN when every target is
    masked, as in PyTorch); ``"sum"`` adds them (for token-weighted averaging across micro-batches);
    ``"none"`` returns the per-position losses (0 at masked positions).
    """
    if not torch.is_tensor(logits) or not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point tensor, got {type(logits).__name__}")
    if not torch.is_tensor(targets) or targets.is_floating_point() or targets.dtype == torch.bool:
        raise TypeError(f"targets must be an integer tensor, got {getattr(targets, 'dtype', type(targets))}")
    if logits.dim() < 1 or logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits shape {tuple(logits.shape)} must be targets shape {tuple(targets.shape)} plus a vocab dim"
        )
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    losses = _CrossEntropy.apply(logits, targets, ignore_index)
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / (targets != ignore_index).sum()


def z_loss(logits: torch.Tensor) -> torch.Tensor:
    """mean(logsumexp(logits)²) over every position: the auxiliary loss that keeps the softmax normaliser near 1.

    Softmax ignores a constant added to every logit, so nothing in cross-entropy stops the logits from drifting
    upwards together; large ones lose precision in bf16 and destabilise training. Penalising log Z = logsumexp
    pulls them back (PaLM, §5: coefficient 1e-4; the caller multiplies and adds it to the loss). ``logits`` has
    shape ``(..., V)``; select the positions that count (e.g. ``logits[mask]``) before calling.
    """
    if not torch.is_tensor(logits) or not logits.is_floating_point() or logits.dim() < 1:
        raise TypeError(f"logits must be a floating-point tensor (..., V), got {getattr(logits, 'dtype', logits)!r}")
    shift = logits.amax(dim=-1, keepdim=True).detach()
    log_z = (shift + (logits - shift).exp().sum(dim=-1, keepdim=True).log()).squeeze(-1)
    return log_z.pow(2).mean()


def perplexity(loss: float | torch.Tensor) -> float:
    """``exp(loss)``: the effective number of equally likely choices per token (loss in nats)."""
    return math.exp(float(loss))


def bits_per_byte(loss: float | torch.Tensor, n_tokens: int, n_bytes: int) -> float:
    """Convert a mean loss in nats per token to bits per UTF-8 byte of the text it was measured on.

    Unlike per-token loss, bits per byte does not depend on the tokenizer, so models with different
    vocabularies can be compared: ``loss * n_tokens / (n_bytes * ln 2)``.
    """
    if n_tokens <= 0 or n_bytes <= 0:
        raise ValueError(f"n_tokens and n_bytes must be positive, got {n_tokens} and {n_bytes}")
    return float(loss) * n_tokens / (n_bytes * math.log(2))
