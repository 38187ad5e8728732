"""Notebook 05's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong shape or NaN get a clear line."""

from __future__ import annotations

import math

import pytest
import torch
from grading_helpers import StubClass, assert_fails, assert_passes, stub

from minillm import optim
from minillm.grading import nb05_optimization as nb05


# ------------------------------------------------------------------------------------------------ AdamW
class LearnerAdamW:
    """A learner's AdamW with switches for the mistakes learners make (written for these tests)."""

    correct_bias, l2, decay_lr = True, False, True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        params = list(params)
        if isinstance(params[0], dict):
            self.items = [(p, g.get("weight_decay", weight_decay)) for g in params for p in g["params"]]
        else:
            self.items = [(p, weight_decay) for p in params]
        self.lr, (self.b1, self.b2), self.eps = lr, betas, eps
        self.state = [(torch.zeros_like(p), torch.zeros_like(p)) for p, _ in self.items]
        self.steps = 0

    def zero_grad(self):
        for p, _ in self.items:
            p.grad = None

    @torch.no_grad()
    def step(self):
        self.steps += 1
        for (p, wd), (m, v) in zip(self.items, self.state, strict=True):
            grad = p.grad + wd * p if self.l2 else p.grad
            if not self.l2:
                p -= (self.lr * wd if self.decay_lr else wd) * p
            m.copy_(self.b1 * m + (1 - self.b1) * grad)
            v.copy_(self.b2 * v + (1 - self.b2) * grad**2)
            if self.correct_bias:
                mh, vh = m / (1 - self.b1**self.steps), v / (1 - self.b2**self.steps)
            else:
                mh, vh = m, v
            p -= self.lr * mh / (torch.sqrt(vh) + self.eps)


class NoBiasCorrection(LearnerAdamW):
    correct_bias = False


class AdamWithL2(LearnerAdamW):
    l2 = True


class DecayNotTimesLr(LearnerAdamW):
    decay_lr = False


class StepCountedAfterUse(LearnerAdamW):
    """Uses the step count before increasing it: the first bias correction divides by 1 − β⁰ = 0."""

    @torch.no_grad()
    def step(self):
        for (p, wd), (m, v) in zip(self.items, self.state, strict=True):
            p -= self.lr * wd * p
            m.copy_(self.b1 * m + (1 - self.b1) * p.grad)
            v.copy_(self.b2 * v + (1 - self.b2) * p.grad**2)
            mh, vh = m / (1 - self.b1**self.steps), v / (1 - self.b2**self.steps)
            p -= self.lr * mh / (torch.sqrt(vh) + self.eps)
        self.steps += 1


class EpsUnderTheRoot(LearnerAdamW):
    @torch.no_grad()
    def step(self):
        self.steps += 1
        for (p, wd), (m, v) in zip(self.items, self.state, strict=True):
            p -= self.lr * wd * p
            m.copy_(self.b1 * m + (1 - self.b1) * p.grad)
            v.copy_(self.b2 * v + (1 - self.b2) * p.grad**2)
            mh, vh = m / (1 - self.b1**self.steps), v / (1 - self.b2**self.steps)
            p -= self.lr * mh / torch.sqrt(vh + self.eps)


def test_adamw_reference_and_a_learners_correct_class_pass(capsys):
    assert_passes(nb05.adamw, torch.optim.AdamW, capsys)
    assert_passes(nb05.adamw, LearnerAdamW, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (NoBiasCorrection, "AdamW without bias correction"),
        (AdamWithL2, "Adam + L2, not AdamW"),
        (DecayNotTimesLr, "weight decay not scaled by the learning rate"),
        (StepCountedAfterUse, "the bias correction counted from t = 0"),
        (EpsUnderTheRoot, "ε inside the square root"),
    ],
)
def test_adamw_names_the_mistake(wrong, name, capsys):
    assert_fails(nb05.adamw, wrong, capsys, says=f"Looks like {name}")


def test_adamw_stub_and_a_raising_class(capsys):
    out = assert_fails(nb05.adamw, StubClass, capsys, says="is not written yet")
    assert "StubClass.__init__ is not written yet" in out

    class Raises(LearnerAdamW):
        def step(self):
            raise RuntimeError("boom")

    assert_fails(nb05.adamw, Raises, capsys, says="raised RuntimeError: boom")


def test_adamw_fallback_follows_the_notebooks_lr_attribute(capsys):
    assert_fails(nb05.adamw, NoBiasCorrection, capsys, says="without bias correction", fallback=nb05.ADAMW.fallback)
    fallback = nb05.ADAMW.fallback
    w = torch.nn.Parameter(torch.zeros(2))
    opt = fallback([w], lr=0.1, weight_decay=0.0)
    opt.lr = 0.5  # the notebook's loops set the rate this way
    assert opt.param_groups[0]["lr"] == 0.5 and opt.lr == 0.5


# --------------------------------------------------------------------------------------------- clipping
@torch.no_grad()
def clip_each_tensor(params, max_norm):
    total = 0.0
    for p in params:
        n = p.grad.norm()
        total += n.item() ** 2
        if n > max_norm:
            p.grad *= max_norm / (n + 1e-6)
    return torch.tensor(math.sqrt(total))


@torch.no_grad()
def clip_also_grows(params, max_norm):
    norm = torch.cat([p.grad.flatten() for p in params]).norm()
    for p in params:
        p.grad *= max_norm / (norm + 1e-6)
    return norm


@torch.no_grad()
def clip_correct(params, max_norm):
    norm = torch.cat([p.grad.flatten() for p in params]).norm()
    factor = min(1.0, max_norm / (norm.item() + 1e-6))
    for p in params:
        p.grad *= factor
    return norm


@torch.no_grad()
def clip_by_summed_norms(params, max_norm):
    total = sum(float(p.grad.norm()) for p in params)
    for p in params:
        p.grad *= min(1.0, max_norm / (total + 1e-6))
    return torch.tensor(total)


def test_clip_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb05.clip_grad_norm, torch.nn.utils.clip_grad_norm_, capsys)
    assert_passes(nb05.clip_grad_norm, clip_correct, capsys)


def test_clip_names_the_mistakes(capsys):
    assert_fails(nb05.clip_grad_norm, clip_each_tensor, capsys, says="Looks like clipping each tensor by its own norm")
    assert_fails(nb05.clip_grad_norm, clip_also_grows, capsys, says="Looks like small gradients scaled up")
    assert_fails(nb05.clip_grad_norm, clip_by_summed_norms, capsys, says="Looks like the norms of the tensors added up")


def test_clip_stub_nan_and_wrong_return(capsys):
    assert_fails(
        nb05.clip_grad_norm,
        stub("clip_grad_norm_by_hand"),
        capsys,
        says="is not written yet",
        fallback=optim.clip_grad_norm,
    )

    @torch.no_grad()
    def nan_grads(params, max_norm):
        for p in params:
            p.grad *= float("nan")  # e.g. a 0/0 in the scale factor
        return torch.tensor(1.0)

    assert_fails(nb05.clip_grad_norm, nan_grads, capsys, says="returned NaN")

    @torch.no_grad()
    def forgets_the_norm(params, max_norm):
        clip_correct(params, max_norm)

    assert_fails(nb05.clip_grad_norm, forgets_the_norm, capsys, says="returned None, expected a number")


# --------------------------------------------------------------------------------------------- schedule
def cosine_correct(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    t = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * t)) / 2


def warmup_starting_at_zero(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
    if step < warmup_steps:
        return max_lr * step / warmup_steps
    return cosine_correct(step, max_lr, warmup_steps, total_steps, min_lr)


def cosine_to_zero(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
    if step < warmup_steps or step >= total_steps:
        return cosine_correct(step, max_lr, warmup_steps, total_steps, 0.0)
    t = (step - warmup_steps) / (total_steps - warmup_steps)
    return max_lr * (1 + math.cos(math.pi * t)) / 2


def cosine_from_step_zero(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
    if step < warmup_steps or step >= total_steps:
        return cosine_correct(step, max_lr, warmup_steps, total_steps, min_lr)
    t = step / total_steps  # progress measured from step 0, not from the end of warmup
    return min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * t)) / 2


def cosine_past_the_end(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    t = (step - warmup_steps) / (total_steps - warmup_steps)  # no stop at total_steps: t > 1 climbs back up
    return min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * t)) / 2


def test_schedule_reference_passes_and_mistakes_are_named(capsys):
    assert_passes(nb05.warmup_cosine, cosine_correct, capsys)
    assert_fails(nb05.warmup_cosine, warmup_starting_at_zero, capsys, says="Looks like warmup off by one step")
    assert_fails(nb05.warmup_cosine, cosine_to_zero, capsys, says="Looks like min_lr left out")
    assert_fails(nb05.warmup_cosine, cosine_from_step_zero, capsys, says="Looks like the cosine started at step 0")
    assert_fails(
        nb05.warmup_cosine, cosine_past_the_end, capsys, says="Looks like the cosine rising again after total_steps"
    )


def test_schedule_wrong_type_and_raising(capsys):
    assert_fails(nb05.warmup_cosine, lambda step, **kw: "0.1", capsys, says="expected a number")
    assert_fails(nb05.warmup_cosine, lambda step, **kw: 1 / 0, capsys, says="raised ZeroDivisionError")


# ----------------------------------------------------------- Exercise 2: Adam's first step without bias correction
def first_step_by_recurrence(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    """A learner's answer that runs the moment updates from zero, with torch's default eps."""
    m = v = 0.0
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g**2
    return abs(lr * m / (v**0.5 + 1e-8))


def first_step_corrected(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    m, v = (1 - beta1) * g, (1 - beta2) * g**2
    return lr * (m / (1 - beta1)) / (v / (1 - beta2)) ** 0.5


def first_step_v_not_rooted(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    return lr * (1 - beta1) * g / ((1 - beta2) * g**2)


def first_step_betas_swapped(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    m, v = beta1 * g, beta2 * g**2
    return lr * m / math.sqrt(v)


def first_step_signed(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    m, v = (1 - beta1) * g, (1 - beta2) * g**2
    return -lr * m / math.sqrt(v)  # Δw, not its size


def first_step_ratio(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    return 0.1 / math.sqrt(0.001) if (beta1, beta2) == (0.9, 0.999) else (1 - beta1) / math.sqrt(1 - beta2)


def test_first_step_reference_and_a_learners_answer_pass(capsys):
    assert_passes(nb05.first_adam_step, first_step_by_recurrence, capsys)
    assert_passes(nb05.first_adam_step, nb05.FIRST_STEP.fallback, capsys)
    assert_passes(nb05.first_adam_step, nb05.FIRST_STEP.truth, capsys)


def test_first_step_truth_agrees_with_torchs_corrected_step():
    """torch.optim.Adam's own first (corrected) step is η; the uncorrected one is (1 − β1)/√(1 − β2) times that."""
    w = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    adam = torch.optim.Adam([w], lr=1e-3, betas=(0.9, 0.999), eps=0.0)
    w.grad = torch.full_like(w, 0.5)
    adam.step()
    assert abs(-w.item() * 0.1 / math.sqrt(0.001) - nb05.FIRST_STEP.truth()) < 1e-15


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (first_step_corrected, "the bias-corrected step"),
        (first_step_v_not_rooted, "v not square-rooted"),
        (first_step_betas_swapped, "β and 1 − β swapped"),
        (first_step_signed, "the update's sign kept"),
        (first_step_ratio, "the ratio to η instead of the step"),
    ],
)
def test_first_step_names_the_mistake(wrong, name, capsys):
    assert_fails(nb05.first_adam_step, wrong, capsys, says=f"Looks like {name}")


def test_first_step_stub_raise_type_and_nan(capsys):
    assert_fails(
        nb05.first_adam_step,
        stub("first_adam_step"),
        capsys,
        says="first_adam_step is not written yet",
        fallback=nb05.FIRST_STEP.fallback,
    )
    assert_fails(nb05.first_adam_step, lambda **hyper: math.sqrt(-1.0), capsys, says="raised ValueError")
    assert_fails(nb05.first_adam_step, lambda **hyper: float("nan"), capsys, says="returned NaN")
    assert_fails(nb05.first_adam_step, lambda **hyper: "3.16·lr", capsys, says="expected a number")
    tensor_answer = lambda g, lr, beta1, beta2: lr * torch.tensor([(1 - beta1) / math.sqrt(1 - beta2)])  # noqa: E731
    assert_passes(nb05.first_adam_step, tensor_answer, capsys)  # a one-element tensor is read as its number
    huge_eps = lambda g, lr, beta1, beta2: lr * (1 - beta1) * g / (math.sqrt((1 - beta2) * g * g) + 1e-4)  # noqa: E731
    assert_fails(nb05.first_adam_step, huge_eps, capsys, says="expected 0.00316228")


def test_first_step_fallback_answers_the_exercise(capsys):
    returned, _ = nb05.first_adam_step(stub("first_adam_step")), capsys.readouterr()
    g, lr, b1, b2 = 0.5, 1e-3, 0.9, 0.999
    uncorrected = returned(g, lr, b1, b2)
    assert abs(uncorrected / lr - 0.1 / math.sqrt(0.001)) < 1e-9 and returned() == uncorrected
