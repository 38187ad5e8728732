"""How sure is a score? Standard errors, paired comparisons, the bootstrap, and pass@k.

An accuracy measured on 48 prompts is one draw: other prompts would give another number. Its **standard
error** ``s/√n`` (``s`` the sample standard deviation, ``ddof = 1``) says how far that draw typically lands
from the accuracy over all possible prompts. Two models scored on the *same* prompts are compared by the
per-prompt differences: prompts that are hard for one are usually hard for the other, so the SE of the
differences is smaller than the two separate SEs combined — the **paired** comparison sees effects the
unpaired one cannot.

The **percentile bootstrap** makes no normal approximation: resample the prompts with replacement, recompute
the mean, read the interval off the resampled means' percentiles.

**pass@k** (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", §2.1): the chance that at
least one of ``k`` samples is correct. Estimated from ``n ≥ k`` samples of which ``c`` are correct by
``1 − C(n−c, k)/C(n, k)`` — the share of k-subsets of the n samples that hold a correct one, which is unbiased;
the plug-in ``1 − (1 − c/n)^k`` is not. The binomials overflow floats for large ``n``, so the product form
``1 − Π_{i=n−c+1}^{n} (1 − k/i)`` is used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "bootstrap_interval",
    "bootstrap_means",
    "mean_and_se",
    "paired_difference",
    "pass_at_k",
    "pass_at_k_mean",
]


def _as_values(values: Sequence[float] | np.ndarray, name: str = "values", minimum: int = 2) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or len(array) < minimum:
        raise ValueError(f"{name} must be a 1-D sequence of at least {minimum} numbers, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} holds NaN or inf")
    return array


def mean_and_se(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """The mean and its standard error ``s/√n`` with the sample standard deviation (``ddof = 1``)."""
    x = _as_values(values)
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x)))


def paired_difference(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean of ``a[i] − b[i]`` over the same prompts, and its standard error (the SE of the differences)."""
    x, y = _as_values(a, "a"), _as_values(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"a paired comparison needs the same prompts: {len(x)} vs {len(y)} scores")
    return mean_and_se(x - y)


def bootstrap_means(values: Sequence[float] | np.ndarray, n_resamples: int = 10_000, seed: int = 0) -> np.ndarray:
    """Means of ``n_resamples`` resamples of ``values`` drawn with replacement, each of the same size.

    Seeded (``numpy.random.default_rng(seed)``), so an interval printed in a notebook is the same every run.
    """
    x = _as_values(values)
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive int, got {n_resamples!r}")
    picks = np.random.default_rng(seed).integers(0, len(x), size=(n_resamples, len(x)))
    return x[picks].mean(axis=1)


def bootstrap_interval(
    values: Sequence[float] | np.ndarray, level: float = 0.95, n_resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean: the (1 − level)/2 and (1 + level)/2 quantiles of
    :func:`bootstrap_means`."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    means = bootstrap_means(values, n_resamples, seed)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k from ``n`` samples with ``c`` correct: ``1 − C(n−c, k)/C(n, k)``, as a stable product."""
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 ≤ c ≤ n and 1 ≤ k ≤ n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_at_k_mean(correct_counts: Sequence[int], n: int, k: int) -> float:
    """pass@k averaged over prompts, each with ``n`` samples of which ``correct_counts[i]`` are correct."""
    if not correct_counts:
        raise ValueError("pass_at_k_mean needs at least one prompt")
    return sum(pass_at_k(n, int(c), k) for c in correct_counts) / len(correct_counts)
