"""Notebook 14's graders: each passes correct versions, names every known mistake, and survives stubs and junk."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from minillm.evaluation import stats
from minillm.evaluation.likelihood import bits_per_byte
from minillm.grading import nb14_evaluation as nb14
from tests.grading_helpers import assert_fails, assert_passes, stub


# ---------------------------------------------------------------------------------------------- bits per byte
def bpb_correct(nll, text):
    bits = sum(float(x) for x in nll) * math.log2(math.e)
    return bits / len(bytes(text, "utf-8"))


def bpb_minillm(nll, text):
    return bits_per_byte(nll.sum().item(), len(text.encode()))


def bpb_nats(nll, text):
    return nll.sum().item() / len(text.encode("utf-8"))


def bpb_per_token(nll, text):
    return nll.mean().item() / math.log(2)


def bpb_characters(nll, text):
    return nll.sum().item() / math.log(2) / len(text)


def bpb_mean_over_bytes(nll, text):
    return nll.mean().item() / math.log(2) / len(text.encode("utf-8"))


def bpb_log10(nll, text):
    return nll.sum().item() / math.log(10) / len(text.encode("utf-8"))


def bpb_times_ln2(nll, text):
    return nll.sum().item() * math.log(2) / len(text.encode("utf-8"))


def test_bits_per_byte_reference_and_learners_versions_pass(capsys):
    assert_passes(nb14.my_bits_per_byte, bpb_correct, capsys)
    assert_passes(nb14.my_bits_per_byte, bpb_minillm, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (bpb_nats, "nats, not bits"),
        (bpb_per_token, "divided by tokens, not bytes"),
        (bpb_characters, "characters counted instead of UTF-8 bytes"),
        (bpb_mean_over_bytes, "the mean NLL per token divided by the bytes"),
        (bpb_log10, "log base 10"),
        (bpb_times_ln2, "multiplied by ln 2"),
    ],
)
def test_bits_per_byte_names_the_mistake(wrong, name, capsys):
    assert_fails(nb14.my_bits_per_byte, wrong, capsys, says=f"Looks like {name}", fallback=nb14.BITS_PER_BYTE.fallback)


def test_bits_per_byte_stub_raising_nan_and_wrong_type(capsys):
    assert_fails(nb14.my_bits_per_byte, stub("my_bits_per_byte"), capsys, says="my_bits_per_byte is not written yet")
    assert_fails(nb14.my_bits_per_byte, lambda nll, text: nll.sum() / text, capsys, says="raised TypeError")
    assert_fails(nb14.my_bits_per_byte, lambda nll, text: float("nan"), capsys, says="returned NaN")
    assert_fails(nb14.my_bits_per_byte, lambda nll, text: nll / 8, capsys, says="expected a number")


# ------------------------------------------------------------------------------------------ paired comparison
def paired_correct(a, b):
    d = [x - y for x, y in zip(a, b, strict=True)]
    mean = sum(d) / len(d)
    var = sum((x - mean) ** 2 for x in d) / (len(d) - 1)
    return mean, math.sqrt(var / len(d))


def paired_unpaired(a, b):
    sa, sb = np.std(a, ddof=1) / math.sqrt(len(a)), np.std(b, ddof=1) / math.sqrt(len(b))
    return float(np.mean(a) - np.mean(b)), float(math.sqrt(sa**2 + sb**2))


def paired_ddof0(a, b):
    d = np.subtract(a, b)
    return float(d.mean()), float(np.sqrt(((d - d.mean()) ** 2).mean() / len(d)))


def paired_sd(a, b):
    d = np.subtract(a, b)
    return float(d.mean()), float(d.std(ddof=1))


def paired_over_n(a, b):
    d = np.subtract(a, b)
    return float(d.mean()), float(d.std(ddof=1) / len(d))


def paired_sd_difference(a, b):
    return float(np.mean(a) - np.mean(b)), float(abs(np.std(a, ddof=1) - np.std(b, ddof=1)) / math.sqrt(len(a)))


def test_paired_reference_and_learners_versions_pass(capsys):
    assert_passes(nb14.my_paired_se, paired_correct, capsys)
    assert_passes(nb14.my_paired_se, stats.paired_difference, capsys)
    assert_passes(nb14.my_paired_se, lambda a, b: list(paired_correct(a, b)), capsys)  # a list is accepted


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (paired_unpaired, "the unpaired standard error"),
        (paired_ddof0, "the population standard deviation (ddof 0)"),
        (paired_sd, "the standard deviation instead of the standard error"),
        (paired_over_n, "divided by n instead of √n"),
        (paired_sd_difference, "the difference of the two standard deviations"),
    ],
)
def test_paired_names_the_mistake(wrong, name, capsys):
    assert_fails(nb14.my_paired_se, wrong, capsys, says=f"Looks like {name}", fallback=nb14.PAIRED.fallback)


def test_paired_stub_raising_nan_and_wrong_shape(capsys):
    assert_fails(nb14.my_paired_se, stub("my_paired_se"), capsys, says="my_paired_se is not written yet")
    assert_fails(nb14.my_paired_se, lambda a, b: a - b, capsys, says="raised TypeError")
    assert_fails(nb14.my_paired_se, lambda a, b: (float("nan"), 0.1), capsys, says="returned NaN")
    assert_fails(nb14.my_paired_se, lambda a, b: paired_correct(a, b)[0], capsys, says="expected a tuple")
    assert_fails(nb14.my_paired_se, lambda a, b: (*paired_correct(a, b), 0.0), capsys, says="returned 3 items")


# -------------------------------------------------------------------------------------------------- bootstrap
def bootstrap_correct(values, n_resamples, seed):
    rng = random.Random(seed)
    return [sum(rng.choice(values) for _ in values) / len(values) for _ in range(n_resamples)]


def bootstrap_torch(values, n_resamples, seed):
    x = torch.tensor(values, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    return x[torch.randint(len(values), (n_resamples, len(values)), generator=g)].mean(dim=1)


def bootstrap_permuted(values, n_resamples, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n_resamples):
        v = list(values)
        rng.shuffle(v)
        out.append(sum(v) / len(v))
    return out


def bootstrap_one_value(values, n_resamples, seed):
    rng = random.Random(seed)
    return [float(rng.choice(values)) for _ in range(n_resamples)]


def bootstrap_sums(values, n_resamples, seed):
    rng = random.Random(seed)
    return [float(sum(rng.choice(values) for _ in values)) for _ in range(n_resamples)]


def bootstrap_half(values, n_resamples, seed):
    rng = random.Random(seed)
    m = len(values) // 2
    return [sum(rng.choice(values) for _ in range(m)) / m for _ in range(n_resamples)]


def bootstrap_gaussian(values, n_resamples, seed):
    rng = random.Random(seed)
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values) / len(values))
    return [rng.gauss(mean, sd) for _ in range(n_resamples)]


def test_bootstrap_reference_and_learners_versions_pass(capsys):
    assert_passes(nb14.my_bootstrap_means, bootstrap_correct, capsys)
    assert_passes(nb14.my_bootstrap_means, bootstrap_torch, capsys)  # a tensor is accepted
    assert_passes(nb14.my_bootstrap_means, stats.bootstrap_means, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (bootstrap_permuted, "resampled without replacement"),
        (bootstrap_one_value, "single values drawn instead of means of n"),
        (bootstrap_sums, "sums instead of means"),
        (bootstrap_half, "resamples smaller than the sample"),
        (bootstrap_gaussian, "normal draws instead of resampling"),
    ],
)
def test_bootstrap_names_the_mistake(wrong, name, capsys):
    assert_fails(nb14.my_bootstrap_means, wrong, capsys, says=f"Looks like {name}", fallback=nb14.BOOTSTRAP.fallback)


def test_bootstrap_stub_raising_nan_and_wrong_shape(capsys):
    assert_fails(nb14.my_bootstrap_means, stub("my_bootstrap_means"), capsys, says="not written yet")
    assert_fails(nb14.my_bootstrap_means, lambda v, n, s: v[len(v)], capsys, says="raised IndexError")
    assert_fails(nb14.my_bootstrap_means, lambda v, n, s: [float("nan")] * n, capsys, says="at key 'finite'")
    assert_fails(nb14.my_bootstrap_means, lambda v, n, s: bootstrap_correct(v, n, s)[:-1], capsys, says="key 'shape'")


# ---------------------------------------------------------------------------------------------------- pass@k
def pass_correct(n, c, k):
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_plug_in(n, c, k):
    return 1.0 - (1.0 - c / n) ** k


def pass_all_correct(n, c, k):
    return math.comb(c, k) / math.comb(n, k)


def pass_without_one_minus(n, c, k):
    return math.comb(n - c, k) / math.comb(n, k)


def pass_k_times(n, c, k):
    return min(1.0, k * (c / n))


def pass_ignoring_k(n, c, k):
    return c / n


def test_pass_at_k_reference_and_learners_versions_pass(capsys):
    assert_passes(nb14.my_pass_at_k, pass_correct, capsys)
    assert_passes(nb14.my_pass_at_k, stats.pass_at_k, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (pass_plug_in, "the plug-in estimate 1 − (1 − c/n)^k"),
        (pass_all_correct, "the chance that all k are correct"),
        (pass_without_one_minus, "the 1 − left out"),
        (pass_k_times, "k × pass@1"),
        (pass_ignoring_k, "pass@1 whatever k"),
    ],
)
def test_pass_at_k_names_the_mistake(wrong, name, capsys):
    assert_fails(nb14.my_pass_at_k, wrong, capsys, says=f"Looks like {name}", fallback=stats.pass_at_k)


def test_pass_at_k_stub_raising_nan_and_wrong_type(capsys):
    assert_fails(nb14.my_pass_at_k, stub("my_pass_at_k"), capsys, says="my_pass_at_k is not written yet")
    assert_fails(nb14.my_pass_at_k, lambda n, c, k: 1 / (n - n), capsys, says="raised ZeroDivisionError")
    assert_fails(nb14.my_pass_at_k, lambda n, c, k: float("nan"), capsys, says="returned NaN")
    assert_fails(nb14.my_pass_at_k, lambda n, c, k: "high", capsys, says="raised ValueError")
