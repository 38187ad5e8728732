"""Graders for notebook 08: decoding 16-bit patterns, the dynamic loss scaler, the mixed-precision step, and
Exercise 1's answer (the largest N up to which every integer is exact in float16 and bfloat16).

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s (or torch's) otherwise. The wrong variants below
are the mistakes the graders recognise by their results; they are written here only to be recognised.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import skip_init

from minillm import precision
from minillm.grading.core import Build, Mistake, Probe, grade

BUILDS = ("decode", "MyLossScaler", "mixed_precision_step", "largest_exact_integer")


# -------------------------------------------------------------------------------------------------- decode
_FORMATS = {  # (exponent bits, mantissa bits): (torch dtype, unsigned and signed integer types of its width)
    (5, 10): (torch.float16, np.uint16, np.int16),
    (8, 7): (torch.bfloat16, np.uint16, np.int16),
    (5, 2): (torch.float8_e5m2, np.uint8, np.int8),
}


def _torch_decode(bits, exponent_bits, mantissa_bits):
    """The value of each bit pattern as torch reads it (a view of the bits as the float dtype), in float64."""
    dtype, unsigned, signed = _FORMATS[(exponent_bits, mantissa_bits)]
    raw = np.asarray(bits, dtype=np.int64).astype(unsigned).view(signed)
    return torch.from_numpy(raw.copy()).view(dtype).double().numpy()


def _as_tensor(values: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values, dtype=np.float64))


def _patterns(exponent_bits: int, mantissa_bits: int, kind: str) -> np.ndarray:
    """Every bit pattern of the format whose value is finite, infinite or NaN (``kind``), as torch reads it."""
    everything = np.arange(2 ** (1 + exponent_bits + mantissa_bits), dtype=np.int64)
    values = _torch_decode(everything, exponent_bits, mantissa_bits)
    keep = {"finite": np.isfinite(values), "inf": np.isinf(values), "nan": np.isnan(values)}[kind]
    return everything[keep]


def _decode_case(name: str, exponent_bits: int, mantissa_bits: int) -> Probe:
    def run(decode: Any) -> torch.Tensor:
        return _as_tensor(decode(_patterns(exponent_bits, mantissa_bits, "finite"), exponent_bits, mantissa_bits))

    return Probe(f"every finite {name} bit pattern", run)


def _decode_specials(decode: Any) -> dict[str, Any]:
    infinities = [_as_tensor(decode(_patterns(e, m, "inf"), e, m)) for e, m in ((5, 10), (8, 7))]
    nans = _as_tensor(decode(_patterns(5, 10, "nan"), 5, 10))
    return {
        "±inf patterns of float16 and bfloat16": infinities,
        "float16 NaN patterns all NaN": bool(nans.isnan().all()),
    }


def _decode(bits, exponent_bits, mantissa_bits, *, subnormal="right", bias_shift=0, specials=True, signed=True):
    """The notebook's decoder with the switches for the ways learners write it wrong."""
    bias = 2 ** (exponent_bits - 1) - 1 + bias_shift
    sign = np.where((bits >> (exponent_bits + mantissa_bits)) & 1, -1.0, 1.0) if signed else 1.0
    exponent = (bits >> mantissa_bits) & (2**exponent_bits - 1)
    mantissa = (bits & (2**mantissa_bits - 1)) / 2.0**mantissa_bits
    normal = sign * (1 + mantissa) * 2.0 ** (exponent - bias)
    if subnormal == "right":
        small = sign * mantissa * 2.0 ** (1 - bias)
    elif subnormal == "exponent -bias":
        small = sign * mantissa * 2.0 ** (-bias)
    else:  # no special case: exponent 0 read as a normal number
        small = normal
    special = np.where(mantissa == 0, sign * np.inf, np.nan) if specials else normal
    return np.where(exponent == 0, small, np.where(exponent == 2**exponent_bits - 1, special, normal))


def _decode_no_subnormals(bits, exponent_bits, mantissa_bits):
    return _decode(bits, exponent_bits, mantissa_bits, subnormal="normal")


def _decode_subnormal_exponent(bits, exponent_bits, mantissa_bits):
    return _decode(bits, exponent_bits, mantissa_bits, subnormal="exponent -bias")


def _decode_bias_plus_one(bits, exponent_bits, mantissa_bits):
    return _decode(bits, exponent_bits, mantissa_bits, bias_shift=1)


def _decode_no_specials(bits, exponent_bits, mantissa_bits):
    return _decode(bits, exponent_bits, mantissa_bits, specials=False)


def _decode_unsigned(bits, exponent_bits, mantissa_bits):
    return _decode(bits, exponent_bits, mantissa_bits, signed=False)


DECODE = Build(
    name="decode",
    what="decoding the bit patterns",
    truth=_torch_decode,
    truth_name="torch's own reading of the bits (a view as float16, bfloat16 or float8_e5m2)",
    fallback=_torch_decode,
    fallback_name="torch's reading of the bits (Tensor.view(torch.float16) …)",
    probes=(
        _decode_case("float16", 5, 10),
        _decode_case("bfloat16", 8, 7),
        _decode_case("float8_e5m2", 5, 2),
        Probe("the specials (exponent bits all ones): ±inf and NaN", _decode_specials),
    ),
    mistakes=(
        Mistake(
            "exponent 0 read as a normal number",
            "exponent bits 0 are the subnormals: no implicit leading 1, value = mantissa · 2^(1 − bias).",
            _decode_no_subnormals,
        ),
        Mistake(
            "subnormals scaled by 2^−bias",
            "subnormals share the smallest normal exponent: mantissa · 2^(1 − bias), not 2^(−bias).",
            _decode_subnormal_exponent,
        ),
        Mistake(
            "the bias off by one",
            "bias = 2^(e − 1) − 1: 15 for float16, 127 for bfloat16.",
            _decode_bias_plus_one,
        ),
        Mistake(
            "the all-ones exponent read as a number",
            "exponent bits all 1 are the specials: ±inf when the mantissa is 0, NaN otherwise.",
            _decode_no_specials,
        ),
        Mistake(
            "the sign bit ignored",
            "the top bit is the sign: bit (e + m) set means negative.",
            _decode_unsigned,
        ),
    ),
    rtol=0.0,
    atol=0.0,
    what_is_compared="output",
)


def decode(learner: Any) -> Any:
    """Grade ``decode(bits, exponent_bits, mantissa_bits)``: numpy int patterns → their float64 values."""
    return grade(DECODE, learner)


# ------------------------------------------------------------------------------------------ the loss scaler
class _TorchScaler:
    """torch.amp.GradScaler("cpu") behind the notebook's interface: an inf gradient is what overflow means to it."""

    def __init__(self, scale=2.0**16, growth_interval=2000):
        self._weight = torch.zeros(1, requires_grad=True)
        self._optimizer = torch.optim.SGD([self._weight], lr=1.0)
        self._scaler = torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=growth_interval)

    @property
    def scale(self) -> float:
        return self._scaler.get_scale()

    def step_and_update(self, grads_are_finite, do_step):
        self._scaler.scale(torch.ones(()))  # what a training step does first (it also starts the scaler)
        self._weight.grad = torch.tensor([1.0 if grads_are_finite else float("inf")])
        before = self._weight.detach().clone()
        self._scaler.step(self._optimizer)
        if not torch.equal(self._weight.detach(), before):  # torch stepped
            do_step()
        self._scaler.update()


class _LibraryScaler:
    """minillm's DynamicLossScaler behind the notebook's interface (``scale``, ``step_and_update``)."""

    def __init__(self, scale=2.0**16, growth_interval=2000):
        self._scaler = precision.DynamicLossScaler(init_scale=scale, growth_interval=growth_interval)

    @property
    def scale(self) -> float:
        return self._scaler.scale_value

    @property
    def growth_interval(self) -> int:
        return self._scaler.growth_interval

    def step_and_update(self, grads_are_finite, do_step):
        self._scaler.found_inf = not grads_are_finite
        if grads_are_finite:
            do_step()
        self._scaler.update()


def _scaler_case(init: float, interval: int, flags: str) -> Probe:
    """``flags``: one letter per step, "." a clean step, "x" an overflow."""

    def run(scaler_class: Any) -> dict[str, list]:
        scaler = scaler_class(scale=init, growth_interval=interval)
        scales, stepped = [], []
        for flag in flags:
            scales.append(scaler.scale)
            took = []
            scaler.step_and_update(flag == ".", lambda took=took: took.append(True))
            stepped.append(len(took) == 1)
        scales.append(scaler.scale)
        return {"scale before each step (and after the last)": scales, "steps taken": stepped}

    return Probe(f"S = 2^{int(np.log2(init))}, growth_interval {interval}, overflows at 'x' of {flags}", run)


class _ScalerVariant:
    steps_on_overflow, backs_off, reset_on_overflow, reset_on_growth, late = False, True, True, True, False

    def __init__(self, scale=2.0**16, growth_interval=2000):
        self.scale, self.growth_interval, self.clean = scale, growth_interval, 0

    def step_and_update(self, grads_are_finite, do_step):
        if grads_are_finite:
            do_step()
            self.clean += 1
            if self.clean == self.growth_interval + (1 if self.late else 0):
                self.scale *= 2
                if self.reset_on_growth:
                    self.clean = 0
        else:
            if self.steps_on_overflow:
                do_step()
            if self.backs_off:
                self.scale /= 2
            if self.reset_on_overflow:
                self.clean = 0


class _StepsOnOverflow(_ScalerVariant):
    steps_on_overflow = True


class _NoBackoff(_ScalerVariant):
    backs_off = False


class _CountNotResetOnOverflow(_ScalerVariant):
    reset_on_overflow = False


class _CountNotResetOnGrowth(_ScalerVariant):
    reset_on_growth = False


class _GrowsLate(_ScalerVariant):
    late = True


SCALER = Build(
    name="MyLossScaler",
    what="the dynamic loss scaler",
    truth=_TorchScaler,
    truth_name='torch.amp.GradScaler("cpu")',
    fallback=_LibraryScaler,
    fallback_name="minillm.precision.DynamicLossScaler",
    probes=(
        _scaler_case(2.0**16, 3, ".......x....."),
        _scaler_case(2.0**24, 4, "xx..x.......x..."),
        _scaler_case(2.0**10, 1, ".x..xx...."),
    ),
    mistakes=(
        Mistake(
            "the step taken on overflow too",
            "when the gradients hold inf/NaN, skip the step: do not call do_step(); only halve S.",
            _StepsOnOverflow,
        ),
        Mistake(
            "no back-off on overflow",
            "after an overflow halve S (S ← S/2), so the next step's gradients fit in float16.",
            _NoBackoff,
        ),
        Mistake(
            "the clean-step count not reset after an overflow",
            "S doubles after growth_interval clean steps IN A ROW: an overflow sets the count back to 0.",
            _CountNotResetOnOverflow,
        ),
        Mistake(
            "the clean-step count not reset after growing",
            "after doubling S, start counting clean steps from 0 again.",
            _CountNotResetOnGrowth,
        ),
        Mistake(
            "the scale grown one step late",
            "double S right after the growth_interval-th clean step in a row (count == growth_interval).",
            _GrowsLate,
        ),
    ),
    rtol=0.0,
    atol=0.0,
    what_is_compared="record",
)


def loss_scaler(learner: Any) -> Any:
    """Grade ``MyLossScaler(scale, growth_interval)`` with ``.scale`` and ``step_and_update(finite, do_step)``."""
    return grade(SCALER, learner)


# ------------------------------------------------------------------------------------ the mixed-precision step
def _tiny_loss(model, x, y):
    """Cross-entropy of a float16 network's logits, computed in float32 (as the notebook's lm_loss)."""
    return F.cross_entropy(model(x).float(), y)


def _weighted_loss(weight: float):
    """A loss this many times smaller: its gradients reach float16's subnormals unless they stay scaled."""
    return lambda model, x, y: _tiny_loss(model, x, y) * weight


def _mp_case(
    seed: int, steps: int, optimizer: str, lr: float, init_scale: float, interval: int, weight: float = 1.0
) -> Probe:
    """A float16 MLP, fp32 masters, a correct loss scaler; a spike batch (inputs × 200) makes one step overflow."""

    def run(step: Any) -> dict[str, list]:
        g = torch.Generator().manual_seed(seed)
        net = nn.Sequential(skip_init(nn.Linear, 8, 16), nn.Tanh(), skip_init(nn.Linear, 16, 10))  # no RNG drawn
        with torch.no_grad():
            for p in net.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        model16 = net.half()
        masters = [p.detach().float().clone().requires_grad_() for p in model16.parameters()]
        opt = torch.optim.SGD(masters, lr=lr) if optimizer == "SGD" else torch.optim.AdamW(masters, lr=lr)
        scaler = _LibraryScaler(scale=init_scale, growth_interval=interval)
        loss_fn = _tiny_loss if weight == 1.0 else _weighted_loss(weight)
        record = {"loss per step": [], "loss scale used per step": [], "skipped per step": []}
        for i in range(steps):
            x = torch.randn(32, 8, generator=g) * (200.0 if i == steps // 2 else 1.0)
            y = torch.randint(0, 10, (32,), generator=g)
            loss, used, skipped = step(model16, masters, opt, scaler, loss_fn, x.half(), y)
            record["loss per step"].append(float(loss))
            record["loss scale used per step"].append(float(used))
            record["skipped per step"].append(bool(skipped))
        record["fp32 master weights after the steps"] = [m.detach().clone() for m in masters]
        record["fp16 working copy after the steps"] = [p.detach().clone() for p in model16.parameters()]
        return record

    described = f"{steps} steps of {optimizer} (lr {lr:g}), S from 2^{int(np.log2(init_scale))}, N = {interval}"
    return Probe(described + ("" if weight == 1.0 else f", the loss × {weight:g}"), run)


def _mp(
    model16,
    masters,
    optimizer,
    scaler,
    loss_fn,
    x,
    y,
    *,
    unscale="fp32",
    check=True,
    copy_back=True,
    reread=False,
    scale_after=False,
    zero=True,
):
    """One fp16 step with the switches for the ways learners write it wrong."""
    params16 = list(model16.parameters())
    if zero:
        for p in params16:
            p.grad = None
    loss = loss_fn(model16, x, y)
    (loss * scaler.scale).backward()
    if unscale == "fp32":
        grads = [p.grad.float() / scaler.scale for p in params16]
    elif unscale == "fp16":
        grads = [(p.grad / scaler.scale).float() for p in params16]
    else:
        grads = [p.grad.float() for p in params16]
    finite = all(torch.isfinite(g).all().item() for g in grads) if check else True

    def update():
        if reread:
            with torch.no_grad():
                for m, p in zip(masters, params16, strict=True):
                    m.copy_(p)
        for m, g in zip(masters, grads, strict=True):
            m.grad = g
        optimizer.step()
        if copy_back:
            with torch.no_grad():
                for p, m in zip(params16, masters, strict=True):
                    p.copy_(m)

    used = scaler.scale
    scaler.step_and_update(finite, update)
    return loss.item(), scaler.scale if scale_after else used, not finite


def _reference_step(model16, masters, optimizer, scaler, loss_fn, x, y):
    """The fp16 recipe as minillm.precision.train_mixed_precision runs it (the tests check they agree)."""
    return _mp(model16, masters, optimizer, scaler, loss_fn, x, y)


def _unscaled_in_fp16(*args):
    return _mp(*args, unscale="fp16")


def _never_unscaled(*args):
    return _mp(*args, unscale="none")


def _no_overflow_check(*args):
    return _mp(*args, check=False)


def _no_copy_back(*args):
    return _mp(*args, copy_back=False)


def _masters_from_fp16(*args):
    return _mp(*args, reread=True)


def _scale_after(*args):
    return _mp(*args, scale_after=True)


def _grads_accumulate(*args):
    return _mp(*args, zero=False)


MIXED_STEP = Build(
    name="mixed_precision_step",
    what="the mixed-precision step",
    truth=_reference_step,
    truth_name="the fp16 recipe of minillm.precision.train_mixed_precision",
    fallback=_reference_step,
    fallback_name="minillm's fp16 recipe (precision.train_mixed_precision's step)",
    probes=(
        _mp_case(1, 8, "SGD", 0.05, 2.0**16, 3),
        _mp_case(2, 10, "AdamW", 1e-4, 2.0**20, 2),
        _mp_case(3, 8, "AdamW", 3e-3, 2.0**16, 3, weight=1e-4),
    ),
    mistakes=(
        Mistake(
            "the gradients never divided by S",
            "the backward pass gave S·g: divide by S (in float32) before the update.",
            _never_unscaled,
        ),
        Mistake(
            "the gradients unscaled in float16",
            "copy the gradients to float32 first, then divide by S: in float16 the small ones fall below 2^−24 again.",
            _unscaled_in_fp16,
        ),
        Mistake(
            "no overflow check (a step taken with inf gradients)",
            "finite = every unscaled gradient is finite; pass it to the scaler so that it skips the step.",
            _no_overflow_check,
        ),
        Mistake(
            "the fp16 working copy treated as the weights",
            "the fp32 masters are the weights: never copy fp16 → masters; after the step copy masters → fp16.",
            _masters_from_fp16,
        ),
        Mistake(
            "the masters not rounded back into the working copy",
            "after optimizer.step(), copy every master into its fp16 parameter (p.copy_(m) under no_grad).",
            _no_copy_back,
        ),
        Mistake(
            "the loss scale read after the scaler's update",
            "return the S this step used: read scaler.scale before step_and_update changes it.",
            _scale_after,
        ),
        Mistake(
            "the gradients not reset before backward",
            "set every fp16 parameter's .grad to None first: backward adds to what is there.",
            _grads_accumulate,
        ),
    ),
    rtol=1e-6,
    atol=1e-9,
    what_is_compared="record",
)


def mixed_precision_step(learner: Any) -> Any:
    """Grade ``mixed_precision_step(model16, masters, optimizer, scaler, loss_fn, x, y) -> (loss, S, skipped)``."""
    return grade(MIXED_STEP, learner)


# ------------------------------------------------------------------ Exercise 1: the last integer of the exact run
def _exact_run_case(dtypes: tuple[torch.dtype, ...]) -> Probe:
    names = " and ".join(str(d).removeprefix("torch.") for d in dtypes)

    def run(largest_exact_integer: Any) -> Any:
        found = [largest_exact_integer(dtype) for dtype in dtypes]
        return found[0] if len(found) == 1 else found

    return Probe(names, run)


def _cast_search(dtype: torch.dtype) -> int:
    """Cast 0, 1, 2, … to ``dtype`` with torch and read them back: the integer before the first that changes."""
    for stop in (2**6, 2**10, 2**14, 2**18):
        values = torch.arange(stop, dtype=torch.float64)
        changed = (values.to(dtype).to(torch.float64) != values).nonzero()
        if len(changed):
            return int(changed[0]) - 1
    raise ValueError(f"every integer below 2**18 is exact in {dtype}: search a larger range")


def _from_mantissa_width(dtype: torch.dtype = torch.float16) -> int:
    """2^(m + 1), m read by minillm.precision.float_format (the notebook's fallback)."""
    return 2 ** (precision.float_format(dtype).mantissa_bits + 1)


def _stored_bits(dtype: torch.dtype) -> int:
    return round(-np.log2(torch.finfo(dtype).eps))


def _no_leading_one(dtype=torch.float16):
    return 2 ** _stored_bits(dtype)


def _all_ones(dtype=torch.float16):
    return 2 ** (_stored_bits(dtype) + 1) - 1


def _first_inexact(dtype=torch.float16):
    return 2 ** (_stored_bits(dtype) + 1) + 1


def _largest_finite(dtype=torch.float16):
    return int(torch.finfo(dtype).max)


EXACT_RUN = Build(
    name="largest_exact_integer",
    what="the last integer of the exact run",
    truth=_cast_search,
    truth_name="casting 0, 1, 2, … to the format with torch",
    fallback=_from_mantissa_width,
    fallback_name="2^(m + 1) with m from minillm.precision.float_format",
    probes=(
        _exact_run_case((torch.float16,)),
        _exact_run_case((torch.bfloat16,)),
        _exact_run_case((torch.float8_e4m3fn, torch.float8_e5m2)),
    ),
    mistakes=(
        Mistake(
            "the implicit leading 1 forgotten",
            "a normal number holds m stored mantissa bits plus the implicit leading 1: m + 1 significant bits, "
            "so every integer up to 2^(m + 1) is exact.",
            _no_leading_one,
        ),
        Mistake(
            "2^(m + 1) − 1 instead of 2^(m + 1)",
            "2^(m + 1) itself is a power of two, exact in any binary format: the first integer that rounds is "
            "2^(m + 1) + 1.",
            _all_ones,
        ),
        Mistake(
            "the first inexact integer instead of the last exact one",
            "N is the last integer of the run 0, 1, …, N; N + 1 = 2^(m + 1) + 1 is the first that rounds.",
            _first_inexact,
        ),
        Mistake(
            "the largest finite value instead of the last exact integer",
            "torch.finfo(dtype).max is the range; above 2^(m + 1) the spacing between floats is 2 or more, so "
            "integers start to be skipped long before it.",
            _largest_finite,
        ),
    ),
    rtol=0.0,
    atol=0.0,
    what_is_compared="answer",
)


def largest_exact_integer(learner: Any) -> Any:
    """Grade ``largest_exact_integer(dtype) -> int``: the largest N with every integer 0 … N exact in dtype."""
    return grade(EXACT_RUN, learner)
