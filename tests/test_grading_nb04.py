"""Notebook 04's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong shape or NaN get a clear line."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from grading_helpers import assert_fails, assert_passes, stub

from minillm import loss
from minillm.grading import nb04_cross_entropy as nb04


# --------------------------------------------------------------------------------------------- logsumexp
def lse_correct(z):
    top = z.max(dim=-1).values
    return top + torch.log(torch.exp(z - top[..., None]).sum(dim=-1))


def lse_naive(z):
    return torch.log(torch.sum(torch.exp(z), dim=-1))


def lse_forgets_the_shift(z):
    top = z.max(dim=-1, keepdim=True).values
    return torch.log(torch.exp(z - top).sum(dim=-1))


def lse_one_max_for_all(z):
    top = torch.max(z)
    return top + torch.log(torch.exp(z - top).sum(dim=-1))


def test_logsumexp_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb04.logsumexp, lambda z: torch.logsumexp(z, -1), capsys)
    assert_passes(nb04.logsumexp, lse_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (lse_naive, "log-sum-exp without the max subtracted"),
        (lse_forgets_the_shift, "the max subtracted but not added back"),
        (lse_one_max_for_all, "the max taken over the whole tensor, not each row"),
    ],
)
def test_logsumexp_names_the_mistake(wrong, name, capsys):
    assert_fails(nb04.logsumexp, wrong, capsys, says=f"Looks like {name}", fallback=nb04.LOGSUMEXP.fallback)


def test_logsumexp_stub_raising_shape_and_nan(capsys):
    assert_fails(nb04.logsumexp, stub("logsumexp"), capsys, says="logsumexp is not written yet")
    assert_fails(nb04.logsumexp, lambda z: z.undefined_method(), capsys, says="raised AttributeError")
    keeps_the_axis = lambda z: torch.logsumexp(z, -1, keepdim=True)  # noqa: E731
    assert_fails(nb04.logsumexp, keeps_the_axis, capsys, says="returned shape")
    assert_fails(nb04.logsumexp, lambda z: torch.logsumexp(z, -1) * float("nan"), capsys, says="returned NaN")


def test_logsumexp_fallback_works_where_the_notebook_uses_it():
    z = torch.randn(2, 5, 6) * 2
    big = torch.tensor([[1000.0, 999.0, 0.0]])
    fallback = nb04.LOGSUMEXP.fallback
    assert torch.allclose(fallback(z), torch.logsumexp(z, -1), atol=1e-6)
    assert torch.allclose(fallback(big), torch.logsumexp(big, -1))
    assert fallback(z).dtype == z.dtype


# ---------------------------------------------------------------------------------------- cross-entropy
def ce_correct(logits, targets):
    log_probs = torch.log_softmax(logits, dim=-1)
    return -log_probs.gather(-1, targets[..., None])[..., 0].mean()


def ce_mean_over_everything(logits, targets):
    one_hot = F.one_hot(targets, num_classes=logits.shape[-1]).to(logits.dtype)
    return (-one_hot * torch.log_softmax(logits, dim=-1)).mean()


def ce_summed(logits, targets):
    log_probs = torch.log_softmax(logits, dim=-1)
    return -log_probs.gather(-1, targets[..., None]).sum()


def ce_positive_log_prob(logits, targets):
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).mean()


def ce_through_probabilities(logits, targets):
    e = torch.exp(logits)
    p = e / e.sum(dim=-1, keepdim=True)
    return -torch.log(p.gather(-1, targets[..., None])).mean()


def ce_log_of_the_sum(logits, targets):
    lse = torch.log(torch.exp(logits).sum(dim=-1))
    return (lse - logits.gather(-1, targets[..., None])[..., 0]).mean()


def test_cross_entropy_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb04.cross_entropy, loss.cross_entropy, capsys)
    assert_passes(nb04.cross_entropy, ce_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (ce_mean_over_everything, "the cross-entropy averaged over the vocabulary"),
        (ce_summed, "the losses summed, not averaged over positions"),
        (ce_positive_log_prob, "the log-probability not negated"),
        (ce_through_probabilities, "the softmax without the max subtracted"),
        (ce_log_of_the_sum, "the softmax without the max subtracted"),
    ],
)
def test_cross_entropy_names_the_mistake(wrong, name, capsys):
    assert_fails(nb04.cross_entropy, wrong, capsys, says=f"Looks like {name}", fallback=nb04.CROSS_ENTROPY.fallback)


def test_cross_entropy_stub_raising_shape_and_nan(capsys):
    assert_fails(nb04.cross_entropy, stub("cross_entropy"), capsys, says="cross_entropy is not written yet")

    def flat_only(logits, targets):  # F.cross_entropy wants (N, V): a learner forgetting to flatten
        return F.cross_entropy(logits, targets)

    assert_fails(nb04.cross_entropy, flat_only, capsys, says="raised RuntimeError")

    def per_position(logits, targets):  # forgot the mean
        return torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0].neg()

    assert_fails(nb04.cross_entropy, per_position, capsys, says="returned shape")
    assert_fails(nb04.cross_entropy, lambda z, y: ce_correct(z, y) / 0 * 0, capsys, says="returned NaN")


def test_cross_entropy_fallback_trains_like_the_notebook_uses_it():
    fallback = nb04.CROSS_ENTROPY.fallback
    z = torch.randn(2, 5, 6, requires_grad=True)
    y = torch.randint(0, 6, (2, 5))
    fallback(z, y).backward()  # the notebook backpropagates through cross_entropy
    expected = (torch.softmax(z.detach(), -1) - F.one_hot(y, 6).float()) / y.numel()
    assert torch.allclose(z.grad, expected, atol=1e-7)
    assert abs(fallback(torch.zeros(1, 2048), torch.tensor([1])).item() - torch.log(torch.tensor(2048.0)).item()) < 1e-5


# --------------------------------------------------------------------------------------------- gradient
def grad_correct(logits, targets):
    n_positions = targets.numel()
    probs = torch.softmax(logits, dim=-1)
    probs = probs.scatter_add(-1, targets[..., None], -torch.ones_like(probs[..., :1]))
    return probs / n_positions


def grad_no_mean(logits, targets):
    return torch.softmax(logits, -1) - F.one_hot(targets, logits.shape[-1]).to(logits.dtype)


def grad_per_sequence(logits, targets):
    return grad_no_mean(logits, targets) / len(targets)


def grad_descent_direction(logits, targets):
    return (F.one_hot(targets, logits.shape[-1]).to(logits.dtype) - torch.softmax(logits, -1)) / targets.numel()


def grad_mean_over_vocabulary(logits, targets):
    return grad_no_mean(logits, targets) / grad_no_mean(logits, targets).numel()


def grad_exp_over_sum(logits, targets):
    e = logits.exp()
    return (e / e.sum(-1, keepdim=True) - F.one_hot(targets, logits.shape[-1]).to(logits.dtype)) / targets.numel()


def test_gradient_reference_and_a_learners_version_pass(capsys):
    def autograd(logits, targets):
        z = logits.clone().requires_grad_()
        loss.cross_entropy(z, targets).backward()
        return z.grad

    assert_passes(nb04.cross_entropy_grad, autograd, capsys)
    assert_passes(nb04.cross_entropy_grad, grad_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (grad_no_mean, "the gradient missing the 1/N of the mean"),
        (grad_per_sequence, "the gradient divided by the batch size, not by every position"),
        (grad_descent_direction, "the gradient's sign flipped (one-hot − softmax)"),
        (grad_mean_over_vocabulary, "the gradient divided by N·V (a loss averaged over the vocabulary)"),
        (grad_exp_over_sum, "the softmax without the max subtracted"),
    ],
)
def test_gradient_names_the_mistake(wrong, name, capsys):
    assert_fails(
        nb04.cross_entropy_grad, wrong, capsys, says=f"Looks like {name}", fallback=nb04.CROSS_ENTROPY_GRAD.fallback
    )


def test_gradient_stub_raising_shape_dtype(capsys):
    assert_fails(nb04.cross_entropy_grad, stub("cross_entropy_grad"), capsys, says="is not written yet")

    def one_hot_of_logits(logits, targets):  # F.one_hot needs integers
        return torch.softmax(logits, -1) - F.one_hot(logits, logits.shape[-1])

    assert_fails(nb04.cross_entropy_grad, one_hot_of_logits, capsys, says="raised RuntimeError")
    flattened = lambda z, y: grad_correct(z, y).reshape(-1, z.shape[-1])  # noqa: E731
    assert_fails(nb04.cross_entropy_grad, flattened, capsys, says="returned shape")
    in_float32 = lambda z, y: grad_correct(z, y).float()  # noqa: E731
    assert_fails(nb04.cross_entropy_grad, in_float32, capsys, says="returned dtype torch.float32")


def test_gradient_fallback_matches_the_notebooks_check():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 6, generator=gen) * 2
    targets = torch.randint(0, 6, (2, 5), generator=gen)
    by_hand = nb04.CROSS_ENTROPY_GRAD.fallback(logits, targets)
    assert by_hand.shape == logits.shape and not logits.requires_grad
    assert (by_hand - grad_correct(logits, targets)).abs().max().item() <= 1e-7
