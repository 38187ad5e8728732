"""Graders for notebook 04: the stable log-sum-exp, the cross-entropy loss and its gradient.

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.

Every build gets one probe with logits of magnitude up to 1e4: ``exp`` overflows there even in float64, so a
version without the max subtracted returns inf or NaN, which is how that mistake is recognised.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from minillm import loss
from minillm.grading.core import Build, Mistake, Probe, grade

BUILDS = ("logsumexp", "cross_entropy", "cross_entropy_grad")

F64 = torch.float64


def _logits(seed: int, *shape: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded float64 logits of ``shape`` (the last axis is the vocabulary) and integer targets for them."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(*shape, generator=g, dtype=F64)
    if scale >= 1e3:  # rescale so the largest |logit| is exactly ``scale``: far past exp's range
        logits = logits * scale / logits.abs().max()
    else:
        logits = logits * scale
    targets = torch.randint(0, shape[-1], shape[:-1], generator=g)
    return logits, targets


def _describe(shape: tuple[int, ...], scale: float) -> str:
    size = "×".join(str(n) for n in shape)
    return f"float64 logits {size}, " + (f"|logits| up to {scale:g}" if scale >= 1e3 else f"scale {scale:g}")


# ------------------------------------------------------------------------------------------------ logsumexp
def _lse_case(seed: int, shape: tuple[int, ...], scale: float) -> Probe:
    def run(implementation: Any) -> torch.Tensor:
        logits, _ = _logits(seed, *shape, scale=scale)
        return implementation(logits)

    return Probe(_describe(shape, scale), run)


def _lse_truth(z: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(z, dim=-1)


def _lse_library(z: torch.Tensor) -> torch.Tensor:
    """minillm's max-shifted log-softmax read back as log-sum-exp: z − log_softmax(z) = logsumexp(z) in every slot."""
    return (z - loss.log_softmax(z))[..., 0]


def _lse_no_max(z):
    return z.exp().sum(-1).log()


def _lse_shift_not_added_back(z):
    m = z.amax(dim=-1, keepdim=True)
    return (z - m).exp().sum(-1).log()


def _lse_global_max(z):
    m = z.max()
    return m + (z - m).exp().sum(-1).log()


LOGSUMEXP = Build(
    name="logsumexp",
    what="the log-sum-exp over the last axis",
    truth=_lse_truth,
    truth_name="torch.logsumexp(z, dim=-1)",
    fallback=_lse_library,
    fallback_name="minillm's max-shifted log-sum-exp (minillm.loss.log_softmax)",
    probes=(
        _lse_case(1, (3, 5, 7), 3.0),
        _lse_case(2, (6, 9), 1e4),
        _lse_case(3, (4, 2, 12), 1e3),
    ),
    mistakes=(
        Mistake(
            "log-sum-exp without the max subtracted",
            "exp overflows past about 709 (88.7 in float32): compute m + log Σ exp(z − m) with m = max(z) per row.",
            _lse_no_max,
        ),
        Mistake(
            "the max subtracted but not added back",
            "log Σ exp(z − m) is logsumexp(z) − m: add m to the result.",
            _lse_shift_not_added_back,
        ),
        Mistake(
            "the max taken over the whole tensor, not each row",
            "take m = z.amax(dim=-1, keepdim=True): with one global max, rows far below it underflow to log 0 = −inf.",
            _lse_global_max,
        ),
    ),
    rtol=1e-10,
    atol=1e-10,
    what_is_compared="log-sum-exp",
)


def logsumexp(learner: Any) -> Any:
    """Grade ``logsumexp(z)``: ``z`` of shape ``(..., V)`` → log Σ_j exp(z_j) over the last axis, shape ``(...)``."""
    return grade(LOGSUMEXP, learner)


# --------------------------------------------------------------------------------------------- cross-entropy
def _ce_case(seed: int, shape: tuple[int, ...], scale: float) -> Probe:
    def run(implementation: Any) -> torch.Tensor:
        logits, targets = _logits(seed, *shape, scale=scale)
        return implementation(logits, targets)

    return Probe(_describe(shape, scale) + " with random targets", run)


def _ce_truth(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _ce_library(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return loss.cross_entropy(logits, targets)


def _target_logit(logits, targets):
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def _ce_per_position(logits, targets):
    return torch.logsumexp(logits, -1) - _target_logit(logits, targets)


def _ce_over_vocabulary(logits, targets):
    one_hot = F.one_hot(targets, logits.shape[-1]).to(logits.dtype)
    return -(torch.log_softmax(logits, -1) * one_hot).mean()  # mean over B·T·V entries, not B·T positions


def _ce_summed(logits, targets):
    return _ce_per_position(logits, targets).sum()


def _ce_not_negated(logits, targets):
    return (_target_logit(logits, targets) - torch.logsumexp(logits, -1)).mean()


def _ce_naive_probabilities(logits, targets):
    probs = logits.exp() / logits.exp().sum(-1, keepdim=True)
    return -probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1).log().mean()


def _ce_naive_log_sum(logits, targets):
    return (logits.exp().sum(-1).log() - _target_logit(logits, targets)).mean()


_NAIVE = "the softmax without the max subtracted"
_NAIVE_ADVICE = "exp(z) overflows for large logits: use the max-shifted logsumexp(z) − z[target]."

CROSS_ENTROPY = Build(
    name="cross_entropy",
    what="the mean cross-entropy",
    truth=_ce_truth,
    truth_name="torch.nn.functional.cross_entropy",
    fallback=_ce_library,
    fallback_name="minillm.loss.cross_entropy",
    probes=(
        _ce_case(11, (2, 5, 7), 2.0),
        _ce_case(12, (6, 11), 1e4),
        _ce_case(13, (3, 4, 50), 1.0),
    ),
    mistakes=(
        Mistake(
            "the cross-entropy averaged over the vocabulary",
            "average over the B·T positions only: the loss at a position is one number, not V of them.",
            _ce_over_vocabulary,
        ),
        Mistake(
            "the losses summed, not averaged over positions",
            "take the mean over the B·T positions, so the loss does not grow with the batch.",
            _ce_summed,
        ),
        Mistake(
            "the log-probability not negated",
            "the loss is −ln p_y = logsumexp(z) − z_y, which is ≥ 0.",
            _ce_not_negated,
        ),
        Mistake(_NAIVE, _NAIVE_ADVICE, _ce_naive_probabilities),
        Mistake(_NAIVE, _NAIVE_ADVICE, _ce_naive_log_sum),
    ),
    rtol=1e-10,
    atol=1e-10,
    what_is_compared="loss",
)


def cross_entropy(learner: Any) -> Any:
    """Grade ``cross_entropy(logits, targets)``: ``(..., V)`` logits, ``(...)`` int targets → the mean loss (0-d)."""
    return grade(CROSS_ENTROPY, learner)


# ------------------------------------------------------------------------------------------------- gradient
def _grad_truth(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    z = logits.detach().clone().requires_grad_()
    F.cross_entropy(z.reshape(-1, z.shape[-1]), targets.reshape(-1)).backward()
    return z.grad


def _grad_library(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The gradient of minillm.loss.cross_entropy, whose backward is the hand-written softmax − one-hot."""
    z = logits.detach().clone().requires_grad_()
    loss.cross_entropy(z, targets).backward()
    return z.grad


def _softmax_minus_one_hot(logits, targets):
    return torch.softmax(logits, -1) - F.one_hot(targets, logits.shape[-1]).to(logits.dtype)


def _grad_without_mean(logits, targets):
    return _softmax_minus_one_hot(logits, targets)


def _grad_over_batch(logits, targets):
    return _softmax_minus_one_hot(logits, targets) / targets.shape[0]


def _grad_sign_flipped(logits, targets):
    return -_softmax_minus_one_hot(logits, targets) / targets.numel()


def _grad_over_vocabulary(logits, targets):
    return _softmax_minus_one_hot(logits, targets) / (targets.numel() * logits.shape[-1])


def _grad_naive_softmax(logits, targets):
    probs = logits.exp() / logits.exp().sum(-1, keepdim=True)
    return (probs - F.one_hot(targets, logits.shape[-1]).to(logits.dtype)) / targets.numel()


def _grad_case(seed: int, shape: tuple[int, ...], scale: float) -> Probe:
    def run(implementation: Any) -> torch.Tensor:
        logits, targets = _logits(seed, *shape, scale=scale)
        return implementation(logits, targets)

    return Probe(_describe(shape, scale) + " with random targets", run)


CROSS_ENTROPY_GRAD = Build(
    name="cross_entropy_grad",
    what="∂(mean loss)/∂logits",
    truth=_grad_truth,
    truth_name="autograd through torch.nn.functional.cross_entropy",
    fallback=_grad_library,
    fallback_name="the gradient of minillm.loss.cross_entropy",
    probes=(
        _grad_case(21, (2, 5, 7), 2.0),
        _grad_case(22, (6, 11), 1e4),
        _grad_case(23, (3, 4, 50), 1.0),
    ),
    mistakes=(
        Mistake(
            "the gradient missing the 1/N of the mean",
            "the loss is the mean over N = B·T positions, so every position's softmax − one-hot is divided by N.",
            _grad_without_mean,
        ),
        Mistake(
            "the gradient divided by the batch size, not by every position",
            "N is the number of predictions, targets.numel() = B·T, not B = targets.shape[0].",
            _grad_over_batch,
        ),
        Mistake(
            "the gradient's sign flipped (one-hot − softmax)",
            "∂L/∂z = softmax(z) − onehot(y): the target's entry is negative, the others positive.",
            _grad_sign_flipped,
        ),
        Mistake(
            "the gradient divided by N·V (a loss averaged over the vocabulary)",
            "divide by the number of positions N = B·T only.",
            _grad_over_vocabulary,
        ),
        Mistake(
            _NAIVE,
            "exp(z) overflows for large logits: use torch.softmax, which subtracts the max.",
            _grad_naive_softmax,
        ),
    ),
    rtol=1e-10,
    atol=1e-12,
    what_is_compared="gradient",
)


def cross_entropy_grad(learner: Any) -> Any:
    """Grade ``cross_entropy_grad(logits, targets)``: ∂ mean-loss / ∂ logits, shape and dtype of ``logits``."""
    return grade(CROSS_ENTROPY_GRAD, learner)
