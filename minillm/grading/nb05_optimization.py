"""Graders for notebook 05: AdamW, clipping by the global norm, warmup + cosine decay, and Exercise 2's answer
(the size of Adam's very first update without bias correction).

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from minillm import optim
from minillm.grading.core import Build, Mistake, Probe, grade

BUILDS = ("AdamWByHand", "clip_grad_norm_by_hand", "warmup_cosine_by_hand", "first_adam_step")

F64 = torch.float64


# --------------------------------------------------------------------------------------------------- AdamW
def _adamw_case(seed: int, steps: int, groups: bool, grad_scale: float = 1.0, **hyper: Any) -> Probe:
    """Two float64 tensors, fresh seeded gradients at every step; observe the weights after the steps."""

    def run(optimizer_class: Any) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        params = [
            torch.randn(4, 3, generator=g, dtype=F64).requires_grad_(),
            torch.randn(5, generator=g, dtype=F64).requires_grad_(),
        ]
        spec = (
            [{"params": [params[0]], "weight_decay": 0.1}, {"params": [params[1]], "weight_decay": 0.0}]
            if groups
            else params
        )
        opt = optimizer_class(spec, **hyper)
        for _ in range(steps):
            for p in params:
                p.grad = torch.randn(p.shape, generator=g, dtype=F64) * grad_scale
            opt.step()
        return [p.detach().clone() for p in params]

    described = ", ".join(f"{k} {v}" for k, v in hyper.items())
    layout = "two parameter groups (weight decay 0.1 and 0)" if groups else "two tensors"
    return Probe(f"{layout}, {steps} steps, {described}", run)


class _AdamVariant:
    """One AdamW-shaped optimiser whose update can be written wrong in the ways learners write it."""

    bias_correction, decoupled, decay_times_lr, eps_inside, count_from_zero = True, True, True, False, False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        params = list(params)
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.params = [p for group in groups for p in group["params"]]
        self.decay = [group.get("weight_decay", weight_decay) for group in groups for _ in group["params"]]
        self.lr, self.betas, self.eps = lr, betas, eps
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self):
        t = self.t if self.count_from_zero else self.t + 1
        self.t += 1
        b1, b2 = self.betas
        for p, m, v, decay in zip(self.params, self.m, self.v, self.decay, strict=True):
            g = p.grad if self.decoupled else p.grad + decay * p
            if self.decoupled:
                p.mul_(1 - (self.lr * decay if self.decay_times_lr else decay))
            m.mul_(b1).add_((1 - b1) * g)
            v.mul_(b2).add_((1 - b2) * g * g)
            m_hat = m / (1 - b1**t) if self.bias_correction else m
            v_hat = v / (1 - b2**t) if self.bias_correction else v
            denominator = (v_hat + self.eps).sqrt() if self.eps_inside else v_hat.sqrt() + self.eps
            p.sub_(self.lr * m_hat / denominator)


class _NoBiasCorrection(_AdamVariant):
    bias_correction = False


class _AdamL2(_AdamVariant):
    decoupled = False


class _DecayWithoutLr(_AdamVariant):
    decay_times_lr = False


class _EpsInsideSqrt(_AdamVariant):
    eps_inside = True


class _StepCountFromZero(_AdamVariant):
    count_from_zero = True


class _LibraryAdamW(optim.AdamW):
    """minillm's AdamW answering to ``opt.lr = …`` as the notebook's class does, for when the notebook falls back."""

    @property
    def lr(self) -> float:
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value: float) -> None:
        for group in self.param_groups:
            group["lr"] = value


ADAMW = Build(
    name="AdamWByHand",
    what="AdamW's update",
    truth=torch.optim.AdamW,
    truth_name="torch.optim.AdamW",
    fallback=_LibraryAdamW,
    fallback_name="minillm.optim.AdamW",
    probes=(
        _adamw_case(1, 3, False, lr=0.01, weight_decay=0.0),
        _adamw_case(2, 5, True, lr=0.01, betas=(0.9, 0.95)),
        _adamw_case(3, 4, False, grad_scale=1e-3, lr=0.01, eps=1e-3, weight_decay=0.0),
    ),
    mistakes=(
        Mistake(
            "AdamW without bias correction",
            "divide m by (1 − β1^t) and v by (1 − β2^t) before the update.",
            _NoBiasCorrection,
        ),
        Mistake(
            "the bias correction counted from t = 0",
            "increase t before using it: the first step has t = 1.",
            _StepCountFromZero,
        ),
        Mistake(
            "Adam + L2, not AdamW",
            "the weight decay was added to the gradient; decoupled decay shrinks θ itself: θ ← θ·(1 − lr·λ).",
            _AdamL2,
        ),
        Mistake("weight decay not scaled by the learning rate", "shrink by (1 − lr·λ), not (1 − λ).", _DecayWithoutLr),
        Mistake("ε inside the square root", "the denominator is √v̂ + ε, not √(v̂ + ε).", _EpsInsideSqrt),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="weights after the steps",
)


def adamw(learner: Any) -> Any:
    """Grade ``AdamWByHand`` (a class: ``__init__(params, lr, betas, eps, weight_decay)``, ``step``, ``zero_grad``)."""
    return grade(ADAMW, learner)


# ------------------------------------------------------------------------------------------------ clipping
_SIZES = (50, 20, 7, 1, 30)


def _grads(seed: int, scale: float) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    params = [torch.zeros(n, dtype=F64, requires_grad=True) for n in _SIZES]
    for i, p in enumerate(params):  # one tensor much larger than the rest: per-tensor clipping shows
        p.grad = torch.randn(p.shape, generator=g, dtype=F64) * scale * (10.0 if i == 0 else 1.0)
    return params


def _clip_gradients(seed: int, scale: float, max_norm: float) -> Probe:
    def run(clip: Any) -> torch.Tensor:
        params = _grads(seed, scale)
        clip(params, max_norm)
        return torch.cat([p.grad for p in params])

    return Probe(f"five tensors whose global norm is {'above' if scale > 0.1 else 'below'} max_norm {max_norm}", run)


def _clip_norm(seed: int, scale: float, max_norm: float) -> Probe:
    def run(clip: Any) -> float:
        value = clip(_grads(seed, scale), max_norm)
        return float(value) if isinstance(value, torch.Tensor) and value.numel() == 1 else value

    return Probe(f"the returned norm (before clipping), max_norm {max_norm}", run)


@torch.no_grad()
def _per_tensor(params, max_norm):
    norms = []
    for p in params:
        norm = p.grad.norm()
        p.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        norms.append(norm)
    return torch.stack(norms).norm()


@torch.no_grad()
def _no_clamp(params, max_norm):
    norm = torch.sqrt(sum((p.grad**2).sum() for p in params))
    for p in params:
        p.grad.mul_(max_norm / (norm + 1e-6))
    return norm


@torch.no_grad()
def _sum_of_norms(params, max_norm):
    norm = sum(p.grad.norm() for p in params)
    for p in params:
        p.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


CLIP = Build(
    name="clip_grad_norm_by_hand",
    what="clipping by the global norm",
    truth=torch.nn.utils.clip_grad_norm_,
    truth_name="torch.nn.utils.clip_grad_norm_",
    fallback=optim.clip_grad_norm,
    fallback_name="minillm.optim.clip_grad_norm",
    probes=(_clip_gradients(0, 1.0, 1.0), _clip_gradients(1, 0.001, 1.0), _clip_norm(2, 1.0, 1.0)),
    mistakes=(
        Mistake(
            "clipping each tensor by its own norm",
            "compute ONE norm over every parameter together, then scale every gradient by the same factor.",
            _per_tensor,
        ),
        Mistake(
            "small gradients scaled up",
            "the factor is min(1, max_norm / (‖g‖ + 1e-6)): clipping only ever shrinks.",
            _no_clamp,
        ),
        Mistake(
            "the norms of the tensors added up",
            "the global norm is √(Σ over all tensors of Σ g²), not Σ ‖g_i‖.",
            _sum_of_norms,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="gradients after clipping",
)


def clip_grad_norm(learner: Any) -> Any:
    """Grade ``clip_grad_norm_by_hand(params, max_norm)``: clips the ``.grad`` in place, returns the norm before."""
    return grade(CLIP, learner)


# ------------------------------------------------------------------------------------------------ schedule
def _schedule_case(max_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> Probe:
    def run(schedule: Any) -> list[float]:
        return [
            schedule(s, max_lr=max_lr, warmup_steps=warmup_steps, total_steps=total_steps, min_lr=min_lr)
            for s in range(total_steps + 20)
        ]

    return Probe(f"warmup {warmup_steps}, total {total_steps}, max_lr {max_lr}, min_lr {min_lr}", run)


def _cosine(step, max_lr, warmup_steps, total_steps, min_lr, *, start=None, first_lr=None, to_zero=False, clamp=True):
    if step < warmup_steps:
        return first_lr(step) if first_lr else max_lr * (step + 1) / warmup_steps
    if clamp and step >= total_steps:
        return 0.0 if to_zero else min_lr
    begin = start if start is not None else warmup_steps
    progress = (step - begin) / (total_steps - begin)
    low = 0.0 if to_zero else min_lr
    return low + 0.5 * (max_lr - low) * (1 + math.cos(math.pi * progress))


def _warmup_from_zero(step, *, max_lr, warmup_steps, total_steps, min_lr=0.0):
    return _cosine(
        step, max_lr, warmup_steps, total_steps, min_lr, start=None, first_lr=lambda s: max_lr * s / warmup_steps
    )


def _decay_from_step_zero(step, *, max_lr, warmup_steps, total_steps, min_lr=0.0):
    return _cosine(step, max_lr, warmup_steps, total_steps, min_lr, start=0)


def _ignores_min_lr(step, *, max_lr, warmup_steps, total_steps, min_lr=0.0):
    return _cosine(step, max_lr, warmup_steps, total_steps, min_lr, start=None, to_zero=True)


def _rises_again(step, *, max_lr, warmup_steps, total_steps, min_lr=0.0):
    return _cosine(step, max_lr, warmup_steps, total_steps, min_lr, start=None, clamp=False)


SCHEDULE = Build(
    name="warmup_cosine_by_hand",
    what="the warmup + cosine schedule",
    truth=optim.warmup_cosine,
    truth_name="minillm.optim.warmup_cosine (every step)",
    fallback=optim.warmup_cosine,
    fallback_name="minillm.optim.warmup_cosine",
    probes=(_schedule_case(1.0, 10, 50), _schedule_case(3e-3, 100, 400, 3e-4), _schedule_case(0.05, 0, 60, 0.005)),
    mistakes=(
        Mistake(
            "warmup off by one step",
            "step 0 already trains: lr(step) = max_lr·(step + 1)/warmup_steps, so lr(warmup_steps − 1) = max_lr.",
            _warmup_from_zero,
        ),
        Mistake(
            "the cosine started at step 0",
            "the decay's progress is (step − warmup_steps)/(total_steps − warmup_steps).",
            _decay_from_step_zero,
        ),
        Mistake(
            "min_lr left out",
            "the cosine goes from max_lr down to min_lr: min_lr + ½(max_lr − min_lr)(1 + cos πp).",
            _ignores_min_lr,
        ),
        Mistake("the cosine rising again after total_steps", "from total_steps on, return min_lr.", _rises_again),
    ),
    rtol=1e-12,
    atol=1e-15,
    what_is_compared="learning rates",
)


def warmup_cosine(learner: Any) -> Any:
    """Grade ``warmup_cosine_by_hand(step, max_lr, warmup_steps, total_steps, min_lr=0.0) -> float``."""
    return grade(SCHEDULE, learner)


# ----------------------------------------------------------- Exercise 2: Adam's first step without bias correction
def _first_step_case(g: float, lr: float, beta1: float, beta2: float) -> Probe:
    def run(first_adam_step: Any) -> Any:
        return first_adam_step(g=g, lr=lr, beta1=beta1, beta2=beta2)

    return Probe(f"g = {g:g}, lr = {lr:g}, β1 = {beta1:g}, β2 = {beta2:g}", run)


def _torch_moments_step(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    """η·|m|/√v with m and v read from torch.optim.Adam's state after its first step (its moments are uncorrected)."""
    w = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    adam = torch.optim.Adam([w], lr=lr, betas=(beta1, beta2), eps=0.0, foreach=False)
    w.grad = torch.full_like(w, g)
    adam.step()
    state = adam.state[w]
    return lr * (state["exp_avg"].abs() / state["exp_avg_sq"].sqrt()).item()


def _closed_form_step(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    """η·(1 − β1)/√(1 − β2): the gradient's size cancels (the notebook's fallback)."""
    return lr * (1 - beta1) / math.sqrt(1 - beta2)


def _corrected_step(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    m_hat, v_hat = (1 - beta1) * g / (1 - beta1), (1 - beta2) * g * g / (1 - beta2)
    return lr * abs(m_hat) / math.sqrt(v_hat)


def _v_not_rooted(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    return lr * (1 - beta1) * abs(g) / ((1 - beta2) * g * g)


def _betas_swapped(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    return lr * beta1 * abs(g) / math.sqrt(beta2 * g * g)


def _signed_update(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    return -lr * (1 - beta1) * g / math.sqrt((1 - beta2) * g * g)


def _ratio_to_lr(g=0.5, lr=1e-3, beta1=0.9, beta2=0.999):
    return (1 - beta1) / math.sqrt(1 - beta2)


FIRST_STEP = Build(
    name="first_adam_step",
    what="the size of Adam's first step without bias correction",
    truth=_torch_moments_step,
    truth_name="η·|m|/√v with torch.optim.Adam's moments after one step",
    fallback=_closed_form_step,
    fallback_name="the closed form η·(1 − β1)/√(1 − β2)",
    probes=(
        _first_step_case(0.5, 1e-3, 0.9, 0.999),
        _first_step_case(2.0, 3e-4, 0.8, 0.99),
        _first_step_case(3.0, 1e-2, 0.95, 0.9999),
    ),
    mistakes=(
        Mistake(
            "the bias-corrected step",
            "that is ≈ η, Adam's step WITH the correction; without it m = (1 − β1)·g and v = (1 − β2)·g² are used as "
            "they are: η·m/√v.",
            _corrected_step,
        ),
        Mistake(
            "v not square-rooted",
            "Adam divides by √v, the root of the second moment, so that the step does not depend on the size of g.",
            _v_not_rooted,
        ),
        Mistake(
            "β and 1 − β swapped",
            "from m = v = 0 one step gives m = β1·0 + (1 − β1)·g and v = β2·0 + (1 − β2)·g²: the new gradient "
            "gets the weight 1 − β.",
            _betas_swapped,
        ),
        Mistake(
            "the update's sign kept",
            "the exercise asks for the size of the update, |Δw| = η·|m|/√v, a positive number (Δw itself is −η·m/√v).",
            _signed_update,
        ),
        Mistake(
            "the ratio to η instead of the step",
            "(1 − β1)/√(1 − β2) ≈ 3.16 is the step in units of η: multiply by lr.",
            _ratio_to_lr,
        ),
    ),
    rtol=1e-6,  # a learner's eps = 1e-8 under the root moves these answers by less than 1e-6 of their size
    atol=0.0,
    what_is_compared="step size",
)


def first_adam_step(learner: Any) -> Any:
    """Grade ``first_adam_step(g, lr, beta1, beta2) -> float``: |Δw| of Adam's first update, uncorrected."""
    return grade(FIRST_STEP, learner)
