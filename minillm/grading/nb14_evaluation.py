"""Graders for notebook 14: bits per byte, the paired comparison's mean difference and standard error, the
bootstrap's resampled means, and the unbiased pass@k.

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.
"""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import combinations
from typing import Any

import numpy as np
import torch

from minillm.evaluation import stats
from minillm.evaluation.likelihood import bits_per_byte
from minillm.grading.core import Build, Mistake, Probe, grade

BUILDS = ("my_bits_per_byte", "my_paired_se", "my_bootstrap_means", "my_pass_at_k")


# ---------------------------------------------------------------------------------------------- bits per byte
def _nll_case(name: str, seed: int, text: str, n_tokens: int) -> Probe:
    nll = torch.rand(n_tokens, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 4

    def run(my_bits_per_byte: Any) -> Any:
        return my_bits_per_byte(nll.clone(), text)

    return Probe(name, run)


def _float64_bits(nll: torch.Tensor, text: str) -> float:
    """The reference: log2 of each token's probability summed in float64, over the UTF-8 bytes."""
    return float(-torch.log2(torch.exp(-nll.double())).sum().item()) / len(text.encode("utf-8"))


def _minillm_bits_per_byte(nll, text):
    return bits_per_byte(float(nll.double().sum()), len(text.encode("utf-8")))


def _nats(nll, text):
    return float(nll.sum()) / len(text.encode("utf-8"))


def _per_token(nll, text):
    return float(nll.sum()) / math.log(2) / len(nll)


def _characters(nll, text):
    return float(nll.sum()) / math.log(2) / len(text)


def _mean_over_bytes(nll, text):
    return float(nll.mean()) / math.log(2) / len(text.encode("utf-8"))


def _log10(nll, text):
    return float(nll.sum()) / math.log(10) / len(text.encode("utf-8"))


def _times_ln2(nll, text):
    return float(nll.sum()) * math.log(2) / len(text.encode("utf-8"))


BITS_PER_BYTE = Build(
    name="my_bits_per_byte",
    what="bits per byte",
    truth=_float64_bits,
    truth_name="−Σ log2 p over the UTF-8 bytes, in float64",
    fallback=_minillm_bits_per_byte,
    fallback_name="minillm.evaluation.likelihood.bits_per_byte",
    probes=(
        _nll_case("30 tokens of plain ASCII text", 0, "Lily found a red ball in the park. She was happy.", 30),
        _nll_case("12 tokens of accented text and an emoji (bytes ≠ characters)", 1, "Él comió paella 🥘 allí.", 12),
        _nll_case("one token of one byte", 2, "a", 1),
    ),
    mistakes=(
        Mistake("nats, not bits", "divide the summed NLL (natural log) by ln 2 to turn nats into bits.", _nats),
        Mistake(
            "divided by tokens, not bytes",
            "divide by the text's UTF-8 bytes: a token count depends on the tokenizer, the bytes do not.",
            _per_token,
        ),
        Mistake(
            "characters counted instead of UTF-8 bytes",
            "count len(text.encode('utf-8')): 'é' is 2 bytes, an emoji 4, though each is one character.",
            _characters,
        ),
        Mistake(
            "the mean NLL per token divided by the bytes",
            "sum the NLL over the tokens first (the text's total surprise), then divide by the bytes.",
            _mean_over_bytes,
        ),
        Mistake("log base 10", "bits are log base 2: divide nats by ln 2, not ln 10.", _log10),
        Mistake("multiplied by ln 2", "nats → bits divides by ln 2 (1 nat ≈ 1.443 bits).", _times_ln2),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="bits per byte",
)


def my_bits_per_byte(learner: Any) -> Any:
    """Grade ``my_bits_per_byte(nll, text) -> float``: per-token NLLs (nats) → bits per UTF-8 byte of ``text``."""
    return grade(BITS_PER_BYTE, learner)


# ------------------------------------------------------------------------------------------ paired comparison
def _paired_case(name: str, a: list[float], b: list[float]) -> Probe:
    def run(my_paired_se: Any) -> Any:
        got = my_paired_se(list(a), list(b))
        return tuple(float(x) for x in got) if isinstance(got, tuple | list) else got

    return Probe(name, run)


def _fractions_paired(a, b):
    """The reference: exact rational arithmetic for the mean difference and the sample variance (n − 1)."""
    d = [Fraction(x) - Fraction(y) for x, y in zip(a, b, strict=True)]
    n = len(d)
    mean = sum(d) / n
    variance = sum((x - mean) ** 2 for x in d) / (n - 1)
    return float(mean), math.sqrt(float(variance) / n)


def _minillm_paired(a, b):
    return stats.paired_difference(a, b)


def _unpaired(a, b):
    x, y = np.asarray(a, float), np.asarray(b, float)
    se = math.sqrt(x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y))
    return float(x.mean() - y.mean()), se


def _population_sd(a, b):
    d = np.asarray(a, float) - np.asarray(b, float)
    return float(d.mean()), float(d.std(ddof=0) / math.sqrt(len(d)))


def _sd_not_se(a, b):
    d = np.asarray(a, float) - np.asarray(b, float)
    return float(d.mean()), float(d.std(ddof=1))


def _over_n(a, b):
    d = np.asarray(a, float) - np.asarray(b, float)
    return float(d.mean()), float(d.std(ddof=1) / len(d))


def _difference_of_ses(a, b):
    x, y = np.asarray(a, float), np.asarray(b, float)
    return float(x.mean() - y.mean()), abs(x.std(ddof=1) - y.std(ddof=1)) / math.sqrt(len(x))


def _rng_scores(seed: int, n: int) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(seed)
    hard = rng.random(n)  # a shared per-prompt difficulty makes the two models' scores correlated
    a = np.clip(hard + rng.normal(0, 0.2, n), 0, 1)
    b = np.clip(hard - 0.1 + rng.normal(0, 0.2, n), 0, 1)
    return [round(float(x), 3) for x in a], [round(float(x), 3) for x in b]


PAIRED = Build(
    name="my_paired_se",
    what="the mean difference and its standard error",
    truth=_fractions_paired,
    truth_name="exact fractions: the differences' mean and sample variance (n − 1)",
    fallback=_minillm_paired,
    fallback_name="minillm.evaluation.stats.paired_difference",
    probes=(
        _paired_case("five prompts", [1.0, 0.0, 1.0, 1.0, 0.5], [0.0, 0.0, 1.0, 0.5, 0.5]),
        _paired_case("40 prompts whose scores share a difficulty", *_rng_scores(3, 40)),
        _paired_case("three prompts, b better", [0.2, 0.4, 0.1], [0.5, 0.9, 0.3]),
    ),
    mistakes=(
        Mistake(
            "the unpaired standard error",
            "take the differences a[i] − b[i] first: the same prompts make the two scores move together.",
            _unpaired,
        ),
        Mistake(
            "the population standard deviation (ddof 0)",
            "the sample standard deviation divides by n − 1 (numpy: std(ddof=1)).",
            _population_sd,
        ),
        Mistake(
            "the standard deviation instead of the standard error",
            "divide the differences' standard deviation by √n.",
            _sd_not_se,
        ),
        Mistake("divided by n instead of √n", "the standard error is s/√n.", _over_n),
        Mistake(
            "the difference of the two standard deviations",
            "standard errors do not subtract: compute the SD of the per-prompt differences.",
            _difference_of_ses,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="(mean difference, standard error)",
)


def my_paired_se(learner: Any) -> Any:
    """Grade ``my_paired_se(a, b) -> (mean of a − b, its standard error)`` for scores on the same prompts."""
    return grade(PAIRED, learner)


# -------------------------------------------------------------------------------------------------- bootstrap
_RESAMPLES = 4000


def _bootstrap_verdict(means: Any, values: np.ndarray) -> Any:
    """What is observable of a set of resampled means, in words the grader can compare: how many, where they
    centre, how widely they spread against the closed form sqrt(population variance / n)."""
    if isinstance(means, torch.Tensor):
        means = means.detach().numpy()
    means = np.asarray(means, dtype=np.float64)
    unknown = {"centre": None, "spread": None, "means of n": None}
    if means.shape != (_RESAMPLES,):
        return {"shape": tuple(means.shape), "finite": None, **unknown}
    if not np.all(np.isfinite(means)):
        return {"shape": (_RESAMPLES,), "finite": False, **unknown}
    n = len(values)
    expected_sd = values.std(ddof=0) / math.sqrt(n)
    sd = means.std(ddof=1)
    centre_ok = abs(means.mean() - values.mean()) <= 5 * expected_sd / math.sqrt(_RESAMPLES)
    ratio = sd / expected_sd
    if sd < 1e-12:
        spread = "none"
    elif 0.9 <= ratio <= 1.1:
        spread = "right"
    elif ratio < 0.9:
        spread = "too narrow"
    else:  # how much too wide tells a resample of one value (×√n) from one of half the values (×√2)
        spread = f"too wide, about ×{ratio:.1f}" if ratio < 2 else f"too wide, about ×{ratio:.0f}"
    grid = bool(np.allclose(means * n, np.round(means * n), atol=1e-6))  # a mean of n of the values × n is whole
    return {"shape": (_RESAMPLES,), "finite": True, "centre": bool(centre_ok), "spread": spread, "means of n": grid}


def _bootstrap_case(name: str, values: list[int], seed: int) -> Probe:
    array = np.asarray(values, dtype=np.float64)

    def run(my_bootstrap_means: Any) -> Any:
        return _bootstrap_verdict(my_bootstrap_means(list(values), _RESAMPLES, seed), array)

    return Probe(name, run)


def _rng_resampled_means(values, n_resamples, seed):
    """The reference: each resample is n draws with replacement (numpy's choice), then its mean."""
    rng = np.random.default_rng(seed + 10_000)  # not the learner's stream: only the statistics must agree
    x = np.asarray(values, dtype=np.float64)
    return np.array([rng.choice(x, size=len(x), replace=True).mean() for _ in range(n_resamples)])


def _minillm_bootstrap(values, n_resamples, seed):
    return stats.bootstrap_means(values, n_resamples, seed)


def _without_replacement(values, n_resamples, seed):
    rng = np.random.default_rng(seed)
    x = np.asarray(values, dtype=np.float64)
    return np.array([rng.permutation(x).mean() for _ in range(n_resamples)])


def _single_draws(values, n_resamples, seed):
    rng = np.random.default_rng(seed)
    return rng.choice(np.asarray(values, dtype=np.float64), size=n_resamples)


def _sums(values, n_resamples, seed):
    rng = np.random.default_rng(seed)
    x = np.asarray(values, dtype=np.float64)
    return x[rng.integers(0, len(x), size=(n_resamples, len(x)))].sum(axis=1)


def _half_size(values, n_resamples, seed):
    rng = np.random.default_rng(seed)
    x = np.asarray(values, dtype=np.float64)
    return x[rng.integers(0, len(x), size=(n_resamples, len(x) // 2))].mean(axis=1)


def _normal_draws(values, n_resamples, seed):
    rng = np.random.default_rng(seed)
    x = np.asarray(values, dtype=np.float64)
    return rng.normal(x.mean(), x.std(ddof=0) / math.sqrt(len(x)), size=n_resamples)


BOOTSTRAP = Build(
    name="my_bootstrap_means",
    what="the resampled means",
    truth=_rng_resampled_means,
    truth_name="n draws with replacement per resample (numpy), against the closed-form spread √(σ²/n)",
    fallback=_minillm_bootstrap,
    fallback_name="minillm.evaluation.stats.bootstrap_means",
    probes=(
        _bootstrap_case("20 scores of 0 or 1", [1, 0, 0, 1, 1, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 1, 1, 1], 0),
        _bootstrap_case("12 scores from 0 to 10", [0, 3, 7, 10, 2, 2, 5, 9, 1, 4, 6, 8], 1),
        _bootstrap_case("48 scores, most of them 0", [0] * 40 + [1, 1, 1, 1, 1, 1, 1, 1], 2),
    ),
    mistakes=(
        Mistake(
            "resampled without replacement",
            "draw n indices with replacement (rng.integers(0, n, size=n)): a permutation has the same mean every time.",
            _without_replacement,
        ),
        Mistake(
            "single values drawn instead of means of n",
            "each resample is n draws; keep the mean of those n, not one value.",
            _single_draws,
        ),
        Mistake("sums instead of means", "divide each resample's sum by n: the bootstrap is of the mean.", _sums),
        Mistake(
            "resamples smaller than the sample",
            "each resample has as many draws as the sample has values (n), or its spread is too wide.",
            _half_size,
        ),
        Mistake(
            "normal draws instead of resampling",
            "the bootstrap resamples the observed values; drawing from a normal assumes what it should measure.",
            _normal_draws,
        ),
    ),
    what_is_compared="resampled means (count, centre, spread against √(σ²/n))",
)


def my_bootstrap_means(learner: Any) -> Any:
    """Grade ``my_bootstrap_means(values, n_resamples, seed) -> array of n_resamples resampled means``."""
    return grade(BOOTSTRAP, learner)


# ---------------------------------------------------------------------------------------------------- pass@k
def _brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """The reference for small n: the share of all k-subsets of n samples (c correct) holding a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def _exact_pass_at_k(n: int, c: int, k: int) -> float:
    """For large n: 1 − C(n − c, k)/C(n, k) in exact rational arithmetic (math.comb is exact)."""
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def _reference_pass_at_k(n, c, k):
    return _brute_force_pass_at_k(n, c, k) if math.comb(n, k) <= 20_000 else _exact_pass_at_k(n, c, k)


_PASS_CASES = {
    "n = 8 samples, c from 0 to 8, k = 1, 2, 5": [(8, c, k) for c in range(9) for k in (1, 2, 5)],
    "n = 10, c = 3: every k from 1 to 10": [(10, 3, k) for k in range(1, 11)],
    "n = 500, c = 40, k = 1, 10, 100 (the binomials are 10^200)": [(500, 40, 1), (500, 40, 10), (500, 40, 100)],
}


def _pass_case(name: str) -> Probe:
    cases = _PASS_CASES[name]

    def run(my_pass_at_k: Any) -> Any:
        return tuple(float(my_pass_at_k(n, c, k)) for n, c, k in cases)

    return Probe(name, run)


def _pass_truth(n, c, k):
    return _reference_pass_at_k(n, c, k)


def _plug_in(n, c, k):
    return 1 - (1 - c / n) ** k


def _all_k_correct(n, c, k):
    return math.comb(c, k) / math.comb(n, k)


def _no_one_minus(n, c, k):
    return math.comb(n - c, k) / math.comb(n, k)


def _k_times_pass_one(n, c, k):
    return min(1.0, k * c / n)


def _pass_at_one(n, c, k):
    return c / n


PASS_AT_K = Build(
    name="my_pass_at_k",
    what="pass@k",
    truth=_pass_truth,
    truth_name="every k-subset enumerated (exact fractions for large n)",
    fallback=stats.pass_at_k,
    fallback_name="minillm.evaluation.stats.pass_at_k",
    probes=tuple(_pass_case(name) for name in _PASS_CASES),
    mistakes=(
        Mistake(
            "the plug-in estimate 1 − (1 − c/n)^k",
            "that samples with replacement and is biased; count k-subsets without replacement: 1 − C(n−c, k)/C(n, k).",
            _plug_in,
        ),
        Mistake(
            "the chance that all k are correct",
            "pass@k needs at least one correct sample: 1 − P(all k wrong) = 1 − C(n−c, k)/C(n, k).",
            _all_k_correct,
        ),
        Mistake(
            "the 1 − left out", "C(n−c, k)/C(n, k) is the chance all k fail; pass@k is one minus it.", _no_one_minus
        ),
        Mistake("k × pass@1", "chances of overlapping events do not add; count the k-subsets.", _k_times_pass_one),
        Mistake("pass@1 whatever k", "k matters: more samples, more chances that one is correct.", _pass_at_one),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="pass@k values",
)


def my_pass_at_k(learner: Any) -> Any:
    """Grade ``my_pass_at_k(n, c, k) -> float``: the unbiased pass@k from n samples with c correct."""
    return grade(PASS_AT_K, learner)
