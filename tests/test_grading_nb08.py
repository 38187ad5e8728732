"""Notebook 08's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong shape or NaN get a clear line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from grading_helpers import StubClass, assert_fails, assert_passes, stub
from torch import nn

from minillm import precision
from minillm.grading import nb08_mixed_precision as nb08


# -------------------------------------------------------------------------------------------------- decode
def decode_correct(bits, exponent_bits, mantissa_bits):
    """A learner's decoder written with masks and ldexp instead of np.where chains."""
    bits = np.asarray(bits, dtype=np.int64)
    bias = (1 << (exponent_bits - 1)) - 1
    negative = (bits >> (exponent_bits + mantissa_bits)) & 1 == 1
    e = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1)
    frac = (bits & ((1 << mantissa_bits) - 1)).astype(np.float64)
    out = np.ldexp(frac + 2.0**mantissa_bits, (e - bias - mantissa_bits).astype(np.int64))
    sub = e == 0
    out[sub] = np.ldexp(frac[sub], 1 - bias - mantissa_bits)
    top = e == (1 << exponent_bits) - 1
    out[top] = np.where(frac[top] == 0, np.inf, np.nan)
    return np.where(negative, -out, out)


def decode_without_subnormals(bits, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    sign = np.where((bits >> (exponent_bits + mantissa_bits)) & 1, -1.0, 1.0)
    exponent = (bits >> mantissa_bits) & (2**exponent_bits - 1)
    mantissa = (bits & (2**mantissa_bits - 1)) / 2.0**mantissa_bits
    value = sign * (1 + mantissa) * 2.0 ** (exponent - bias)  # every pattern with the implicit 1
    top = exponent == 2**exponent_bits - 1
    return np.where(top, np.where(mantissa == 0, sign * np.inf, np.nan), value)


def decode_bias_too_large(bits, exponent_bits, mantissa_bits):
    out = decode_correct(bits, exponent_bits, mantissa_bits)
    return out / 2.0  # bias 2^(e-1) instead of 2^(e-1) - 1: every finite value halved


def decode_no_specials(bits, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    sign = np.where((bits >> (exponent_bits + mantissa_bits)) & 1, -1.0, 1.0)
    exponent = (bits >> mantissa_bits) & (2**exponent_bits - 1)
    mantissa = (bits & (2**mantissa_bits - 1)) / 2.0**mantissa_bits
    normal = sign * (1 + mantissa) * 2.0 ** (exponent - bias)
    return np.where(exponent == 0, sign * mantissa * 2.0 ** (1 - bias), normal)


def decode_subnormals_one_binade_low(bits, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    exponent = (bits >> mantissa_bits) & (2**exponent_bits - 1)
    sign = np.where((bits >> (exponent_bits + mantissa_bits)) & 1, -1.0, 1.0)
    mantissa = (bits & (2**mantissa_bits - 1)) / 2.0**mantissa_bits
    subnormal = sign * mantissa * 2.0 ** (-bias)  # should be 2^(1 − bias): half of every subnormal
    return np.where(exponent == 0, subnormal, decode_correct(bits, exponent_bits, mantissa_bits))


def decode_magnitude_only(bits, exponent_bits, mantissa_bits):
    return np.abs(decode_correct(bits, exponent_bits, mantissa_bits))


def test_decode_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb08.decode, decode_correct, capsys)
    assert_passes(nb08.decode, nb08.DECODE.fallback, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (decode_without_subnormals, "exponent 0 read as a normal number"),
        (decode_bias_too_large, "the bias off by one"),
        (decode_subnormals_one_binade_low, "subnormals scaled by 2^−bias"),
        (decode_no_specials, "the all-ones exponent read as a number"),
        (decode_magnitude_only, "the sign bit ignored"),
    ],
)
def test_decode_names_the_mistake(wrong, name, capsys):
    assert_fails(nb08.decode, wrong, capsys, says=f"Looks like {name}")


def test_decode_stub_raise_shape_and_nan(capsys):
    assert_fails(nb08.decode, stub("decode"), capsys, says="decode is not written yet", fallback=nb08.DECODE.fallback)
    assert_fails(nb08.decode, lambda bits, e, m: np.zeros(3)[bits], capsys, says="raised IndexError")
    assert_fails(nb08.decode, lambda bits, e, m: decode_correct(bits, e, m)[:-1], capsys, says="returned shape")
    assert_fails(nb08.decode, lambda bits, e, m: decode_correct(bits, e, m) * np.nan, capsys, says="returned NaN")


def test_decode_fallback_reads_the_notebooks_patterns(capsys):
    returned, _ = nb08.decode(stub("decode")), capsys.readouterr()
    patterns = np.arange(2**16, dtype=np.int64)
    assert returned(np.array([0x3C00]), 5, 10)[0] == 1.0 and returned(np.array([0x3F80]), 8, 7)[0] == 1.0
    assert returned(np.array([0x7BFF]), 5, 10)[0] == 65504.0
    assert np.array_equal(returned(patterns, 5, 10), decode_correct(patterns, 5, 10), equal_nan=True)


# ------------------------------------------------------------------------------------------ the loss scaler
class ScalerCorrect:
    """A learner's scaler that counts differently: a countdown to the next growth."""

    def __init__(self, scale=2.0**16, growth_interval=2000):
        self.scale, self.growth_interval = scale, growth_interval
        self.left = growth_interval

    def step_and_update(self, grads_are_finite, do_step):
        if not grads_are_finite:
            self.scale *= 0.5
            self.left = self.growth_interval
            return
        do_step()
        self.left -= 1
        if self.left == 0:
            self.scale *= 2.0
            self.left = self.growth_interval


class ScalerAlwaysSteps(ScalerCorrect):
    def step_and_update(self, grads_are_finite, do_step):
        if not grads_are_finite:
            do_step()  # the overflowed step is taken anyway
        super().step_and_update(grads_are_finite, do_step)


class ScalerNeverBacksOff(ScalerCorrect):
    def step_and_update(self, grads_are_finite, do_step):
        if not grads_are_finite:
            self.left = self.growth_interval
            return
        super().step_and_update(True, do_step)


class ScalerTotalCount:
    """Counts every clean step since the start, not the clean steps in a row."""

    def __init__(self, scale=2.0**16, growth_interval=2000):
        self.scale, self.growth_interval, self.clean = scale, growth_interval, 0

    def step_and_update(self, grads_are_finite, do_step):
        if grads_are_finite:
            do_step()
            self.clean += 1
            if self.clean % self.growth_interval == 0:
                self.scale *= 2
        else:
            self.scale /= 2


class ScalerCountdownNotRestarted(ScalerCorrect):
    """After growing once it never restarts its countdown, so it never grows again (until an overflow)."""

    def step_and_update(self, grads_are_finite, do_step):
        if not grads_are_finite:
            self.scale *= 0.5
            self.left = self.growth_interval
            return
        do_step()
        self.left -= 1
        if self.left == 0:
            self.scale *= 2.0


class ScalerGrowsLate(ScalerCorrect):
    def __init__(self, scale=2.0**16, growth_interval=2000):
        super().__init__(scale, growth_interval + 1)  # grows after growth_interval + 1 clean steps


def test_scaler_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb08.loss_scaler, ScalerCorrect, capsys)
    assert_passes(nb08.loss_scaler, nb08.SCALER.fallback, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (ScalerAlwaysSteps, "the step taken on overflow too"),
        (ScalerNeverBacksOff, "no back-off on overflow"),
        (ScalerTotalCount, "the clean-step count not reset after an overflow"),
        (ScalerGrowsLate, "the scale grown one step late"),
        (ScalerCountdownNotRestarted, "the clean-step count not reset after growing"),
    ],
)
def test_scaler_names_the_mistake(wrong, name, capsys):
    assert_fails(nb08.loss_scaler, wrong, capsys, says=f"Looks like {name}")


def test_scaler_stub_and_raising(capsys):
    assert_fails(nb08.loss_scaler, StubClass, capsys, says="is not written yet", fallback=nb08.SCALER.fallback)

    class Raises(ScalerCorrect):
        def step_and_update(self, grads_are_finite, do_step):
            raise AttributeError("no scale yet")

    assert_fails(nb08.loss_scaler, Raises, capsys, says="raised AttributeError: no scale yet")

    class NanScale(ScalerCorrect):
        def step_and_update(self, grads_are_finite, do_step):
            super().step_and_update(grads_are_finite, do_step)
            self.scale = float("nan")

    assert_fails(nb08.loss_scaler, NanScale, capsys, says="returned NaN")


def test_scaler_fallback_replays_the_notebooks_trajectory(capsys):
    returned, _ = nb08.loss_scaler(StubClass), capsys.readouterr()
    overflowed = [True, True, True, True, False, False, True, True, True, True, True, True, True, True, False] + [
        False
    ] * 5
    mine, scales, taken = returned(2.0**24, growth_interval=4), [], []
    for bad in overflowed:
        scales.append(mine.scale)
        mine.step_and_update(not bad, lambda: taken.append(True))
    torch_scales = []
    gs = torch.amp.GradScaler("cpu", init_scale=2.0**24, growth_interval=4)
    for bad in overflowed:
        torch_scales.append(gs.get_scale())
        w = torch.zeros(1, requires_grad=True)
        gs.scale(torch.ones(()))
        w.grad = torch.tensor([float("inf") if bad else 1.0])
        gs.step(torch.optim.SGD([w], lr=1.0))
        gs.update()
    assert scales == torch_scales and len(taken) == overflowed.count(False)


# ------------------------------------------------------------------------------------ the mixed-precision step
def step_correct(model16, masters, optimizer, scaler, loss_fn, x, y):
    """A learner's step written differently: zero_grad on the module, torch.cat for the overflow check."""
    model16.zero_grad(set_to_none=True)
    loss = loss_fn(model16, x, y)
    s = scaler.scale
    (loss * s).backward()
    fp32 = [p.grad.to(torch.float32) * (1.0 / s) for p in model16.parameters()]
    ok = bool(torch.isfinite(torch.cat([g.flatten() for g in fp32])).all())

    def apply():
        for master, g in zip(masters, fp32, strict=True):
            master.grad = g
        optimizer.step()
        with torch.no_grad():
            for p, master in zip(model16.parameters(), masters, strict=True):
                p.copy_(master.to(p.dtype))

    scaler.step_and_update(ok, apply)
    return float(loss.detach()), s, not ok


def _step(
    model16,
    masters,
    optimizer,
    scaler,
    loss_fn,
    x,
    y,
    *,
    unscale_fp16=False,
    check=True,
    copy=True,
    reread=False,
    zero=True,
    unscale=True,
):
    params = list(model16.parameters())
    if zero:
        for p in params:
            p.grad = None
    loss = loss_fn(model16, x, y)
    s = scaler.scale
    (loss * s).backward()
    grads = [(p.grad / s).float() if unscale_fp16 else p.grad.float() / s for p in params]
    grads = grads if unscale else [p.grad.float() for p in params]
    ok = all(bool(torch.isfinite(g).all()) for g in grads) or not check

    def apply():
        with torch.no_grad():
            if reread:  # the masters follow the fp16 copy instead of the other way round
                for master, p in zip(masters, params, strict=True):
                    master.copy_(p.float())
        for master, g in zip(masters, grads, strict=True):
            master.grad = g
        optimizer.step()
        if copy:
            with torch.no_grad():
                for p, master in zip(params, masters, strict=True):
                    p.copy_(master)

    scaler.step_and_update(ok, apply)
    return loss.item(), s, not ok


def step_unscaled_in_fp16(*args):
    return _step(*args, unscale_fp16=True)


def step_never_unscaled(*args):
    return _step(*args, unscale=False)


def step_without_overflow_check(*args):
    return _step(*args, check=False)


def step_without_copy_back(*args):
    return _step(*args, copy=False)


def step_updates_the_fp16_copy(*args):
    return _step(*args, reread=True)


def step_without_zeroing(*args):
    return _step(*args, zero=False)


def step_returns_the_new_scale(*args):
    loss, _, skipped = _step(*args)
    return loss, args[3].scale, skipped


def test_mixed_step_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb08.mixed_precision_step, step_correct, capsys)
    assert_passes(nb08.mixed_precision_step, nb08.MIXED_STEP.fallback, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (step_never_unscaled, "the gradients never divided by S"),
        (step_unscaled_in_fp16, "the gradients unscaled in float16"),
        (step_without_overflow_check, "no overflow check (a step taken with inf gradients)"),
        (step_updates_the_fp16_copy, "the fp16 working copy treated as the weights"),
        (step_without_copy_back, "the masters not rounded back into the working copy"),
        (step_returns_the_new_scale, "the loss scale read after the scaler's update"),
        (step_without_zeroing, "the gradients not reset before backward"),
    ],
)
def test_mixed_step_names_the_mistake(wrong, name, capsys):
    assert_fails(nb08.mixed_precision_step, wrong, capsys, says=f"Looks like {name}")


def test_mixed_step_stub_raise_and_nan(capsys):
    assert_fails(nb08.mixed_precision_step, stub("mixed_precision_step"), capsys, says="is not written yet")
    assert_fails(nb08.mixed_precision_step, lambda *args: step_correct(*args)[:2], capsys, says="raised ValueError")

    def nan_loss(*args):
        _, s, skipped = step_correct(*args)
        return float("nan"), s, skipped

    assert_fails(nb08.mixed_precision_step, nan_loss, capsys, says="returned NaN")


def test_the_grader_reference_is_minillms_recipe():
    """The grader's reference step, run in a loop, is minillm's train_mixed_precision bit for bit."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(16, 8, generator=g).half(), torch.randint(0, 5, (16,), generator=g)) for _ in range(6)]

    def fresh():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 5))

    def loss_fn(model, x, y):
        return F.cross_entropy(model(x).float(), y)

    ref = precision.train_mixed_precision(fresh, batches, loss_fn, lr=1e-3, init_scale=2.0**18, growth_interval=2)
    model16 = fresh().half()
    masters = [p.detach().float().clone().requires_grad_() for p in model16.parameters()]
    opt = torch.optim.AdamW(masters, lr=1e-3)
    scaler = nb08.SCALER.fallback(scale=2.0**18, growth_interval=2)
    record = [nb08.MIXED_STEP.truth(model16, masters, opt, scaler, loss_fn, x, y) for x, y in batches]
    assert [r[0] for r in record] == ref.losses and [r[1] for r in record] == ref.scales
    assert [r[2] for r in record] == ref.skipped and any(ref.skipped)
    assert all(torch.equal(a.detach(), b) for a, b in zip(masters, ref.masters, strict=True))


# ------------------------------------------------------------------ Exercise 1: the last integer of the exact run
def exact_run_by_casting(dtype=torch.float16):
    """A learner's answer that casts integers one by one until one comes back changed."""
    k = 0
    while float(torch.tensor(float(k + 1)).to(dtype)) == k + 1:
        k += 1
    return k


def exact_run_from_eps(dtype=torch.float16):
    return round(2 / torch.finfo(dtype).eps)


def exact_run_no_leading_one(dtype=torch.float16):
    return round(1 / torch.finfo(dtype).eps)


def exact_run_all_ones(dtype=torch.float16):
    m = precision.float_format(dtype).mantissa_bits
    return int("1" * (m + 1), 2)


def exact_run_first_inexact(dtype=torch.float16):
    k = 0
    while float(torch.tensor(float(k)).to(dtype)) == k:
        k += 1
    return k


def exact_run_finite_max(dtype=torch.float16):
    return int(precision.float_format(dtype).max)


def test_exact_run_reference_and_a_learners_answers_pass(capsys):
    assert_passes(nb08.largest_exact_integer, exact_run_by_casting, capsys)
    assert_passes(nb08.largest_exact_integer, exact_run_from_eps, capsys)
    assert_passes(nb08.largest_exact_integer, nb08.EXACT_RUN.fallback, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (exact_run_no_leading_one, "the implicit leading 1 forgotten"),
        (exact_run_all_ones, "2^(m + 1) − 1 instead of 2^(m + 1)"),
        (exact_run_first_inexact, "the first inexact integer instead of the last exact one"),
        (exact_run_finite_max, "the largest finite value instead of the last exact integer"),
    ],
)
def test_exact_run_names_the_mistake(wrong, name, capsys):
    assert_fails(nb08.largest_exact_integer, wrong, capsys, says=f"Looks like {name}")


def test_exact_run_stub_raise_type_and_nan(capsys):
    assert_fails(
        nb08.largest_exact_integer,
        stub("largest_exact_integer"),
        capsys,
        says="largest_exact_integer is not written yet",
        fallback=nb08.EXACT_RUN.fallback,
    )
    answers = {torch.float16: 2048, torch.bfloat16: 256}  # the exercise's two formats only
    assert_fails(nb08.largest_exact_integer, lambda dtype: answers[dtype], capsys, says="raised KeyError")
    assert_fails(nb08.largest_exact_integer, lambda dtype: float("nan"), capsys, says="returned NaN")
    assert_fails(nb08.largest_exact_integer, lambda dtype: "2**11", capsys, says="expected a number")
    assert_fails(nb08.largest_exact_integer, lambda dtype: 2048.5, capsys, says="expected the whole number 2048")


def test_exact_run_fallback_answers_the_exercise(capsys):
    returned, _ = nb08.largest_exact_integer(stub("largest_exact_integer")), capsys.readouterr()
    n_fp16, n_bf16 = returned(torch.float16), returned(torch.bfloat16)
    assert (n_fp16, n_bf16) == (2**11, 2**8) and returned() == 2**11
    for n, dtype in [(n_fp16, torch.float16), (n_bf16, torch.bfloat16)]:
        assert all(precision.cast(k, dtype) == k for k in range(n + 1))
        assert precision.cast(n + 1, dtype) != n + 1
