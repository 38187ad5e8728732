"""Scaling laws from measured runs (notebook 12): parameter counts, power-law fits and compute-optimal sizes.

Why a module: the notebook fits laws to a precomputed sweep (``python -m minillm.experiments.scaling_sweep``)
and to a live mini-sweep; both, and the tests, need the same counting and the same fit.

* Counting: :func:`non_embedding_parameters` (Kaplan et al. 2020 count N without the embedding tables) and
  :func:`matmul_parameters` (every weight a token is multiplied by — the N of C ≈ 6·N·D that
  ``GPT.flops_per_token`` uses, tied head included).
* :func:`fit_power_law`: y = k·x^p by least squares in log space (a straight line on log-log axes).
* :func:`fit_scaling_law`: Chinchilla's approach 3, L(N, D) = E + A/N^α + B/D^β, fitted by L-BFGS on a Huber
  loss of log L from a grid of initialisations (the loss surface has several basins).
* :class:`ScalingLaw`: the law, and its compute-optimal frontier in closed form under C = 6·N·D.
* :func:`parabola_minimum`: the bottom of an isoFLOP profile (approach 2), a parabola in log N.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from minillm.model import GPTConfig, _is_positive_int, matmul_parameters

__all__ = [
    "ModelShape",
    "PowerLaw",
    "ScalingLaw",
    "fit_power_law",
    "fit_scaling_law",
    "matmul_parameters",
    "non_embedding_parameters",
    "parabola_minimum",
    "steps_for_budget",
]


@dataclass(frozen=True)
class ModelShape:
    """Depth, width and heads of one model of a sweep; the rest is the ``gpt2-style`` preset."""

    n_layer: int
    d_model: int
    n_head: int

    def __post_init__(self) -> None:
        for name in ("n_layer", "d_model", "n_head"):
            value = getattr(self, name)
            if not _is_positive_int(value):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_head:
            raise ValueError(f"n_head={self.n_head} does not divide d_model={self.d_model}")

    @property
    def name(self) -> str:
        return f"L{self.n_layer}-d{self.d_model}"

    def config(self, vocab_size: int, context_length: int) -> GPTConfig:
        """The model's :class:`GPTConfig` (GELU MLP of 4·d, learned positions, tied head)."""
        return GPTConfig.preset(
            "gpt2-style",
            vocab_size=vocab_size,
            context_length=context_length,
            n_layer=self.n_layer,
            n_head=self.n_head,
            d_model=self.d_model,
        )


def non_embedding_parameters(config: GPTConfig) -> int:
    """Kaplan's N: all parameters except the token and position tables (and an untied output head).

    Why this count: Kaplan et al. found loss follows N more cleanly when the embedding matrices, whose
    size follows the vocabulary rather than the model's capacity, are left out. About 12·n_layer·d².
    """
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
    return matmul_parameters(config) - config.vocab_size * config.d_model  # less the output head (tied or not)


def steps_for_budget(flops: float, flops_per_token: float, tokens_per_step: int) -> int:
    """Optimizer steps that spend about ``flops`` training FLOPs (at least one): an isoFLOP run's length."""
    if flops <= 0 or flops_per_token <= 0 or tokens_per_step <= 0:
        raise ValueError(f"flops, flops_per_token and tokens_per_step must be positive, got {flops}, "
                         f"{flops_per_token}, {tokens_per_step}")  # fmt: skip
    return max(1, round(flops / (flops_per_token * tokens_per_step)))


def _positive_array(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or len(array) == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence, got shape {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"{name} must be finite and positive (it is fitted in log space)")
    return array


@dataclass(frozen=True)
class PowerLaw:
    """y = coefficient · x^exponent."""

    coefficient: float
    exponent: float

    def __call__(self, x: float | np.ndarray) -> float | np.ndarray:
        return self.coefficient * np.power(x, self.exponent)


def fit_power_law(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> PowerLaw:
    """Least-squares line through (log x, log y), in float64: the slope is the exponent."""
    lx, ly = np.log(_positive_array(x, "x")), np.log(_positive_array(y, "y"))
    if len(lx) != len(ly) or len(lx) < 2 or np.ptp(lx) == 0:
        raise ValueError("need at least two points with different x, and as many y as x")
    slope = float(np.sum((lx - lx.mean()) * (ly - ly.mean())) / np.sum((lx - lx.mean()) ** 2))
    return PowerLaw(coefficient=float(math.exp(ly.mean() - slope * lx.mean())), exponent=slope)


def parabola_minimum(log_n: Sequence[float] | np.ndarray, loss: Sequence[float] | np.ndarray) -> float:
    """The log N at the bottom of a parabola fitted to an isoFLOP profile (Chinchilla's approach 2).

    Raises if the fitted parabola opens downwards: the profile then has no minimum inside the sweep.
    """
    x, y = np.asarray(log_n, dtype=np.float64), np.asarray(loss, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 3:
        raise ValueError("need at least three (log N, loss) points of one isoFLOP profile")
    design = np.stack([x**2, x, np.ones_like(x)], axis=1)
    (a, b, _), *_ = np.linalg.lstsq(design, y, rcond=None)
    if a <= 0:
        raise ValueError("the isoFLOP profile curves downwards: its minimum lies outside the sizes swept")
    return float(-b / (2 * a))


@dataclass(frozen=True)
class ScalingLaw:
    """L(N, D) = E + A/N^α + B/D^β (Hoffmann et al. 2022, Eq. 2): an entropy floor plus two finite-size terms."""

    E: float
    A: float
    alpha: float
    B: float
    beta: float

    def loss(self, n: float | np.ndarray, d: float | np.ndarray) -> float | np.ndarray:
        return self.E + self.A / np.power(n, self.alpha) + self.B / np.power(d, self.beta)

    @property
    def n_exponent(self) -> float:
        """a in N_opt ∝ C^a: β/(α+β). Kaplan et al. 2020 found 0.73, Hoffmann et al. 2022 about 0.5."""
        return self.beta / (self.alpha + self.beta)

    @property
    def d_exponent(self) -> float:
        """b in D_opt ∝ C^b: α/(α+β) (a + b = 1 because C = 6·N·D)."""
        return self.alpha / (self.alpha + self.beta)

    def compute_optimal(self, flops: float | np.ndarray) -> tuple[float | np.ndarray, float | np.ndarray]:
        """(N_opt, D_opt) minimising L under 6·N·D = C, in closed form.

        Setting dL/dN = 0 along D = C/(6N) gives α·A/N^α = β·B/D^β, so
        N_opt = G·(C/6)^(β/(α+β)) with G = (αA/(βB))^(1/(α+β)), and D_opt = (C/6)/N_opt.
        """
        c6 = np.asarray(flops, dtype=np.float64) / 6.0
        if np.any(c6 <= 0):
            raise ValueError("the compute budget must be positive")
        g = (self.alpha * self.A / (self.beta * self.B)) ** (1.0 / (self.alpha + self.beta))
        n_opt = g * np.power(c6, self.n_exponent)
        d_opt = c6 / n_opt
        if n_opt.ndim == 0:
            return float(n_opt), float(d_opt)
        return n_opt, d_opt

    def tokens_per_parameter(self, flops: float) -> float:
        """D_opt / N_opt at the budget ``flops`` (Chinchilla: about 20)."""
        n_opt, d_opt = self.compute_optimal(flops)
        return float(d_opt / n_opt)


def _huber(x: torch.Tensor, delta: float) -> torch.Tensor:
    small = x.abs() <= delta
    return torch.where(small, 0.5 * x**2, delta * (x.abs() - 0.5 * delta))


def _linear_starts(ln_n: np.ndarray, ln_d: np.ndarray, ln_l: np.ndarray, exponents: np.ndarray) -> np.ndarray:
    """Starting points (a, b, e, α, β): for each (α, β) of a grid, E, A and B by least squares on L itself.

    Why: with the exponents fixed the law is linear in (E, A, B), so one small solve per grid point finds
    the best of them; only starts with all three positive are kept (their logs are the parameters).
    """
    n, d, loss = np.exp(ln_n), np.exp(ln_d), np.exp(ln_l)
    starts = []
    for alpha, beta in itertools.product(exponents, exponents):
        design = np.stack([np.ones_like(loss), n**-alpha, d**-beta], axis=1)
        (e, a, b), *_ = np.linalg.lstsq(design, loss, rcond=None)
        if min(e, a, b) > 0:
            starts.append((math.log(a), math.log(b), math.log(e), alpha, beta))
    if not starts:  # no positive linear fit anywhere: fall back to a neutral start
        starts.append(
            (math.log(float(loss.mean())), math.log(float(loss.mean())), math.log(float(loss.min()) / 2), 0.5, 0.5)
        )
    return np.asarray(starts, dtype=np.float64)


def fit_scaling_law(
    n: Sequence[float] | np.ndarray,
    d: Sequence[float] | np.ndarray,
    loss: Sequence[float] | np.ndarray,
    delta: float = 0.02,
    polish: int = 8,
    iterations: int = 100,
) -> ScalingLaw:
    """Fit L(N, D) = E + A/N^α + B/D^β to measured losses, as Hoffmann et al. 2022 (approach 3) do.

    The parameters are (a, b, e, α, β) with A = eᵃ, B = eᵇ, E = eᵉ, so all stay positive; the objective is
    the Huber loss of log L̂ − log L, with log L̂ = logsumexp(a − α log N, b − β log D, e): scale-free, and a
    stray run beyond ``delta`` pulls only linearly. (Chinchilla's δ = 1e-3 suits hundreds of runs; with a few
    dozen whose residuals are percents it makes the objective nearly |r|, whose minimum L-BFGS finds slowly and
    not reproducibly, so the default is 0.02.) The surface has several basins: the fit starts from a grid of
    exponents, each with its best E, A, B by linear least squares, polishes the ``polish`` best starts with
    L-BFGS (``iterations`` each), then the best of those alone.
    """
    ln_n, ln_d, ln_l = (np.log(_positive_array(v, name)) for v, name in ((n, "n"), (d, "d"), (loss, "loss")))
    if not len(ln_n) == len(ln_d) == len(ln_l):
        raise ValueError(f"n, d and loss must have the same length, got {len(ln_n)}, {len(ln_d)}, {len(ln_l)}")
    if len(ln_l) < 5:
        raise ValueError(f"the law has five parameters: fit it to at least five runs, got {len(ln_l)}")
    if polish < 1:
        raise ValueError(f"polish must be at least 1, got {polish}")
    tn, td, tl = (torch.from_numpy(v) for v in (ln_n, ln_d, ln_l))

    def objective(theta: torch.Tensor) -> torch.Tensor:
        a, b, e, alpha, beta = theta.unbind(-1)
        terms = torch.stack([a[..., None] - alpha[..., None] * tn, b[..., None] - beta[..., None] * td,
                             e[..., None].expand(*e.shape, len(tn))])  # fmt: skip
        return _huber(torch.logsumexp(terms, dim=0) - tl, delta).sum(-1)

    def minimise(theta: torch.Tensor) -> torch.Tensor:
        """L-BFGS on every start at once: the starts are independent, so the sum's minimum is each one's."""
        theta = theta.clone().requires_grad_(True)
        opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=iterations, tolerance_grad=1e-12, tolerance_change=1e-14,
                                history_size=50, line_search_fn="strong_wolfe")  # fmt: skip

        def closure() -> torch.Tensor:
            opt.zero_grad()
            value = objective(theta).sum()
            value.backward()
            return value

        opt.step(closure)
        return theta.detach()

    starts = torch.from_numpy(_linear_starts(ln_n, ln_d, ln_l, np.arange(0.05, 1.5001, 0.05)))
    with torch.no_grad():
        chosen = starts[objective(starts).argsort()[:polish]]
    fits = minimise(chosen)
    fits = minimise(fits[objective(fits).nan_to_num(nan=math.inf).argmin()][None])[0]  # the best one, polished alone
    if not bool(torch.isfinite(fits).all()):
        raise RuntimeError("the scaling-law fit did not converge to finite parameters")
    a, b, e, alpha, beta = fits.tolist()
    return ScalingLaw(E=math.exp(e), A=math.exp(a), alpha=alpha, B=math.exp(b), beta=beta)
