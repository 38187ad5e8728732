"""Mixed precision: number formats, underflow, loss scaling, fp32 master weights and bf16 autocast.

A float with e exponent bits and m mantissa bits has machine epsilon 2^−m, smallest normal
2^(1−bias) with bias = 2^(e−1) − 1, smallest subnormal 2^(1−bias−m) and largest finite value
(2 − 2^−m)·2^bias. fp16 (e=5, m=10) keeps 3 decimal digits but only reaches 6e−5 (normal) / 6e−8
(subnormal), so small gradients flush to zero unless the loss is scaled; bf16 (e=8, m=7) has fp32's
range and needs no scaling, but rounds coarsely. Updates smaller than half an ulp of a weight vanish,
which is why the weights that receive updates are kept in fp32 (Micikevicius et al. 2018, §3.1–3.2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

#: The formats the course compares; the float8 ones are included where this torch build has them.
FORMAT_NAMES = ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]


@dataclass(frozen=True)
class FloatFormat:
    """One row of the format table (values read from ``torch.finfo``)."""

    name: str
    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    smallest_subnormal: float
    eps: float


def available_dtypes() -> dict[str, torch.dtype]:
    """The formats of :data:`FORMAT_NAMES` that exist in this torch build."""
    return {name: getattr(torch, name) for name in FORMAT_NAMES if hasattr(torch, name)}


def float_format(dtype: torch.dtype) -> FloatFormat:
    """Read a format's constants from ``torch.finfo`` (``tiny`` is the smallest *normal* number)."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"expected a floating-point torch.dtype, got {dtype!r}")
    info = torch.finfo(dtype)
    mantissa = round(-math.log2(info.eps))
    return FloatFormat(
        name=str(dtype).removeprefix("torch."),
        bits=info.bits,
        exponent_bits=info.bits - 1 - mantissa,
        mantissa_bits=mantissa,
        max=float(info.max),
        smallest_normal=float(info.smallest_normal),
        smallest_subnormal=float(info.smallest_normal) * float(info.eps),
        eps=float(info.eps),
    )


def format_table() -> list[FloatFormat]:
    """The format table for every available format, float32 first."""
    return [float_format(dtype) for dtype in available_dtypes().values()]


def closed_form(exponent_bits: int, mantissa_bits: int, finite_only: bool = False) -> dict[str, float]:
    """The same constants from the bit layout alone (IEEE-style; ``finite_only`` for e4m3fn, which has
    no infinities and uses the top exponent for normal numbers except the all-ones NaN pattern)."""
    bias = 2 ** (exponent_bits - 1) - 1
    if finite_only:
        largest = (2 - 2 ** (1 - mantissa_bits)) * 2.0 ** (2**exponent_bits - 1 - bias)
    else:
        largest = (2 - 2.0**-mantissa_bits) * 2.0**bias
    return {
        "max": largest,
        "smallest_normal": 2.0 ** (1 - bias),
        "smallest_subnormal": 2.0 ** (1 - bias - mantissa_bits),
        "eps": 2.0**-mantissa_bits,
    }


def cast(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype`` (round to nearest, ties to even) and read back as a Python float."""
    return torch.tensor(value, dtype=torch.float64).to(dtype).item()


def add_in(a: float, b: float, dtype: torch.dtype) -> float:
    """a + b computed in ``dtype`` (both operands and the result rounded to it)."""
    return (torch.tensor(a, dtype=dtype) + torch.tensor(b, dtype=dtype)).item()


def ulp(value: float, dtype: torch.dtype) -> float:
    """Spacing of ``dtype``'s numbers at ``value``: eps·2^⌊log2|value|⌋, never below the smallest subnormal."""
    fmt = float_format(dtype)
    magnitude = abs(cast(value, dtype))
    if magnitude < fmt.smallest_normal:
        return fmt.smallest_subnormal
    return fmt.eps * 2.0 ** math.floor(math.log2(magnitude))


def rounding_examples() -> list[tuple[str, float, float, float]]:
    """(expression, exact value, float16 result, bfloat16 result) for classic rounding surprises."""
    f16, bf16 = torch.float16, torch.bfloat16
    return [
        ("2048 + 1", 2049.0, add_in(2048, 1, f16), add_in(2048, 1, bf16)),
        ("256 + 1", 257.0, add_in(256, 1, f16), add_in(256, 1, bf16)),
        ("1 + 1e-4", 1.0001, add_in(1, 1e-4, f16), add_in(1, 1e-4, bf16)),
        ("1 + 1e-3", 1.001, add_in(1, 1e-3, f16), add_in(1, 1e-3, bf16)),
        ("1e-8", 1e-8, cast(1e-8, f16), cast(1e-8, bf16)),
        ("7e4", 7e4, cast(7e4, f16), cast(7e4, bf16)),
    ]


# ----------------------------------------------------------------------------------------------------
# Gradient underflow


def cast_statistics(values: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> dict[str, float]:
    """Fractions of the non-zero ``values`` that become 0 (underflow), subnormal, or ±inf (overflow)
    when multiplied by ``scale`` (in float64) and cast to ``dtype``."""
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale!r}")
    v = values.detach().double().reshape(-1)
    v = v[v != 0]
    if v.numel() == 0:
        raise ValueError("no non-zero values to cast")
    magnitude = (v * scale).to(dtype).abs()
    tiny = torch.finfo(dtype).smallest_normal
    return {
        "zero": (magnitude == 0).double().mean().item(),
        "subnormal": ((magnitude > 0) & (magnitude < tiny)).double().mean().item(),
        "overflow": torch.isinf(magnitude).double().mean().item(),
    }


def underflow_curve(
    values: torch.Tensor, scales: Iterable[float], dtype: torch.dtype = torch.float16
) -> list[dict[str, float]]:
    """:func:`cast_statistics` for each loss scale (one dict per scale, with the scale included)."""
    return [{"scale": float(s), **cast_statistics(values, dtype, s)} for s in scales]


def gradients_of(model: nn.Module, loss: torch.Tensor) -> torch.Tensor:
    """All parameter gradients of one backward pass, flattened (the model's ``.grad`` is left untouched)."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return torch.cat([g.reshape(-1) for g in grads if g is not None])


# ----------------------------------------------------------------------------------------------------
# Dynamic loss scaling


class DynamicLossScaler:
    """Loss scaling written out, with ``torch.amp.GradScaler``'s rules.

    ``scale(loss)`` multiplies by S; ``step(optimizer)`` divides the gradients by S and skips the update
    when any is inf/NaN; ``update()`` then halves S (``backoff_factor``) after a skipped step, or doubles
    it (``growth_factor``) after ``growth_interval`` clean steps in a row.
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ) -> None:
        if init_scale <= 0 or growth_factor <= 1 or not 0 < backoff_factor < 1 or growth_interval < 1:
            raise ValueError(
                f"need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval ≥ 1; got "
                f"{init_scale}, {growth_factor}, {backoff_factor}, {growth_interval}"
            )
        self.scale_value = float(init_scale)
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval = growth_interval
        self.clean_steps = 0
        self.found_inf = False
        self._unscaled = False

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale_value

    @torch.no_grad()
    def unscale_(self, optimizer: torch.optim.Optimizer) -> bool:
        """Divide every gradient by S (the reciprocal is taken in float64, then float32, like torch)."""
        inv_scale = torch.tensor(self.scale_value, dtype=torch.float64).reciprocal().float()
        self.found_inf = False
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if not torch.isfinite(p.grad).all():
                    self.found_inf = True
                p.grad.mul_(inv_scale.to(p.grad.dtype))
        self._unscaled = True
        return self.found_inf

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Unscale (if not done yet) and step unless a gradient overflowed. Returns True if it stepped."""
        if not self._unscaled:
            self.unscale_(optimizer)
        if self.found_inf:
            return False
        optimizer.step()
        return True

    def update(self) -> None:
        if self.found_inf:
            self.scale_value *= self.backoff_factor
            self.clean_steps = 0
        else:
            self.clean_steps += 1
            if self.clean_steps == self.growth_interval:
                self.scale_value *= self.growth_factor
                self.clean_steps = 0
        self._unscaled, self.found_inf = False, False


# ----------------------------------------------------------------------------------------------------
# FP32 master weights


class MasterWeightOptimizer:
    """Keeps the model in half precision and an fp32 master copy that receives the updates.

    After ``backward`` (through the half-precision model), ``step()`` copies the half gradients into the
    masters (as fp32), steps ``optimizer_class`` there, and rounds the masters back into the model.
    """

    def __init__(self, model: nn.Module, optimizer_class: type, **optimizer_kwargs) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.masters = [nn.Parameter(p.detach().float().clone()) for p in self.params]
        self.optimizer = optimizer_class(self.masters, **optimizer_kwargs)
        self.param_groups = self.optimizer.param_groups  # so a loss scaler can unscale the masters

    def zero_grad(self) -> None:
        for p in self.params + self.masters:
            p.grad = None

    def copy_grads_to_masters(self) -> None:
        for p, master in zip(self.params, self.masters, strict=True):
            master.grad = None if p.grad is None else p.grad.float()

    @torch.no_grad()
    def step(self) -> None:
        if any(m.grad is None for m in self.masters):
            self.copy_grads_to_masters()
        self.optimizer.step()
        for p, master in zip(self.params, self.masters, strict=True):
            p.copy_(master)  # rounds to the model's dtype


def repeated_add(start: float, increment: float, steps: int, dtype: torch.dtype) -> float:
    """Add ``increment`` ``steps`` times to a weight stored in ``dtype`` (each sum rounded to it)."""
    w = torch.tensor(start, dtype=dtype)
    u = torch.tensor(increment, dtype=dtype)
    for _ in range(steps):
        w = w + u
    return w.item()


def regression_problem(n: int = 256, dim: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A linear regression y = X·w* whose weights sit near 1 (so fp16's ulp there is 2^−10 ≈ 1e−3)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w_true = 1.0 + 0.5 * torch.rand(dim, generator=g)
    return x, x @ w_true, w_true


def train_regression(mode: str, steps: int = 300, lr: float = 0.01, seed: int = 0) -> list[float]:
    """SGD on :func:`regression_problem` from w = 1; returns the fp32 loss after every step.

    ``mode``: 'fp32' (reference), 'fp16' (pure fp16 weights: updates below half an ulp are lost) or
    'fp16_master' (fp16 forward/backward, fp32 master weights).
    """
    if mode not in ("fp32", "fp16", "fp16_master"):
        raise ValueError(f"mode must be 'fp32', 'fp16' or 'fp16_master', got {mode!r}")
    x, y, w_true = regression_problem(seed=seed)
    dtype = torch.float32 if mode == "fp32" else torch.float16
    w = nn.Parameter(torch.ones_like(w_true).to(dtype))
    if mode == "fp16_master":
        holder = nn.Module()
        holder.w = w
        optimizer = MasterWeightOptimizer(holder, torch.optim.SGD, lr=lr)
    else:
        optimizer = torch.optim.SGD([w], lr=lr)
    x_model = x.to(dtype)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = ((x_model @ w).float() - y).pow(2).mean()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            losses.append(((x @ w.float()) - y).pow(2).mean().item())
    return losses


# ----------------------------------------------------------------------------------------------------
# The whole fp16 step: loss scaling + fp32 master weights


@dataclass
class MixedPrecisionRun:
    """What :func:`train_mixed_precision` records: per step the loss, the loss scale it used and whether the
    step was skipped on overflow; at the end the fp32 master weights (in ``model.parameters()`` order)."""

    losses: list[float]
    scales: list[float]
    skipped: list[bool]
    masters: list[torch.Tensor]


def train_mixed_precision(
    make_model: Callable[[], nn.Module],
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor],
    lr: float = 3e-3,
    init_scale: float = 2.0**16,
    growth_interval: int = 2000,
    dtype: torch.dtype = torch.float16,
    optimizer_class: type = torch.optim.AdamW,
) -> MixedPrecisionRun:
    """Train a fresh model with the fp16 recipe of Micikevicius et al. (2018) and return its record.

    The model is cast to ``dtype`` (the working copy: forward and backward run there); an fp32 master copy of
    its weights and the optimizer's state live in a :class:`MasterWeightOptimizer`. Each step scales the loss
    by S (:class:`DynamicLossScaler`) before backward, copies the 16-bit gradients into fp32 and divides them
    by S there (so gradients below 2^-24 survive the division), skips the update and halves S if any gradient
    is inf/NaN, else steps the masters and rounds them back into the model (S doubles after
    ``growth_interval`` clean steps). Loss scaling keeps small gradients from underflowing in the backward
    pass; the fp32 masters keep updates smaller than half a 16-bit ulp from being lost.
    """
    model = make_model().to(dtype)
    optimizer = MasterWeightOptimizer(model, optimizer_class, lr=lr)
    scaler = DynamicLossScaler(init_scale=init_scale, growth_interval=growth_interval)
    losses, scales, skipped = [], [], []
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_fn(model, x, y)
        scaler.scale(loss).backward()
        optimizer.copy_grads_to_masters()  # before unscaling: the division by S must happen in fp32
        scales.append(scaler.scale_value)
        skipped.append(not scaler.step(optimizer))
        scaler.update()
        losses.append(loss.item())
    return MixedPrecisionRun(losses, scales, skipped, [m.detach().clone() for m in optimizer.masters])


# ----------------------------------------------------------------------------------------------------
# bf16 autocast


def train_with_autocast(
    make_model: Callable[[], nn.Module],
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor],
    autocast_dtype: torch.dtype | None = None,
    lr: float = 3e-3,
    device: torch.device | str = "cpu",
) -> list[float]:
    """Train a fresh model (fp32 weights, AdamW) on ``batches``; ``autocast_dtype=torch.bfloat16`` runs the
    forward pass under autocast on ``device`` (matmuls in bf16, weights and gradients stay fp32). Returns losses."""
    device = torch.device(device)
    model = make_model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        enabled = autocast_dtype is not None
        with torch.autocast(device.type, dtype=autocast_dtype or torch.bfloat16, enabled=enabled):
            loss = loss_fn(model, x, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
