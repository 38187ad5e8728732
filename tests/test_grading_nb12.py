"""Notebook 12's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong type or NaN get a clear line."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from grading_helpers import assert_fails, assert_passes, stub
from torch.utils.flop_counter import FlopCounterMode

from minillm import scaling
from minillm.grading import nb12_scaling_laws as nb12
from minillm.model import GPT, GPTConfig


# ----------------------------------------------------------------------------------- non_embedding_by_hand
def count_correct(n_layer, d):
    attention = (d * 3 * d + 3 * d) + (d * d + d)
    mlp = (d * 4 * d + 4 * d) + (4 * d * d + d)
    norms = 2 * (2 * d)
    return n_layer * (attention + mlp + norms) + 2 * d


def count_12ld2(n_layer, d):
    return 12 * n_layer * d**2


def count_without_biases(n_layer, d):
    return n_layer * (12 * d * d + 4 * d) + 2 * d


def count_norm_gain_only(n_layer, d):
    return n_layer * (12 * d * d + 9 * d + 2 * d) + d


def count_without_final_norm(n_layer, d):
    return n_layer * (12 * d * d + 9 * d + 4 * d)


def count_without_norms(n_layer, d):
    return n_layer * (12 * d * d + 9 * d)


def test_count_reference_library_and_a_learners_version_pass(capsys):
    assert_passes(nb12.non_embedding_by_hand, nb12.COUNT.truth, capsys)
    assert_passes(nb12.non_embedding_by_hand, nb12.COUNT.fallback, capsys)
    assert_passes(nb12.non_embedding_by_hand, count_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (count_12ld2, "the closed form 12·L·d²"),
        (count_without_biases, "the biases forgotten"),
        (count_norm_gain_only, "LayerNorm counted as d parameters"),
        (count_without_final_norm, "the final LayerNorm forgotten"),
        (count_without_norms, "the LayerNorms forgotten"),
    ],
)
def test_count_names_the_mistake(wrong, name, capsys):
    assert_fails(nb12.non_embedding_by_hand, wrong, capsys, says=f"Looks like {name}")


def test_count_stub_raising_nan_and_fractions(capsys):
    assert_fails(
        nb12.non_embedding_by_hand,
        stub("non_embedding_by_hand"),
        capsys,
        says="non_embedding_by_hand is not written yet",
        fallback=nb12.COUNT.fallback,
    )
    assert_fails(nb12.non_embedding_by_hand, lambda n_layer, d: d.bit_count(0), capsys, says="raised TypeError")
    assert_fails(
        nb12.non_embedding_by_hand,
        lambda n_layer, d: float("nan"),
        capsys,
        says="returned NaN",
    )
    assert_fails(
        nb12.non_embedding_by_hand, lambda n_layer, d: count_correct(n_layer, d) / 7, capsys, says="whole number"
    )


def test_count_fallback_is_the_notebooks_column(capsys):
    for shape in (scaling.ModelShape(1, 32, 2), scaling.ModelShape(4, 128, 4)):
        config = shape.config(2048, 64)
        assert nb12.COUNT.fallback(shape.n_layer, shape.d_model) == scaling.non_embedding_parameters(config)


# ------------------------------------------------------------------------------------------- flops_by_hand
def _matrices(model):
    return sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and not name.startswith("pos_emb"))


def flops_correct(model, batch_size, seq_len):
    c = model.config
    tokens = batch_size * seq_len
    return 6 * _matrices(model) * tokens + 12 * c.n_layer * c.d_model * seq_len * tokens


def flops_two_n(model, batch_size, seq_len):
    c = model.config
    return (2 * _matrices(model) + 12 * c.n_layer * c.d_model * seq_len) * batch_size * seq_len


def flops_no_attention(model, batch_size, seq_len):
    return 6 * _matrices(model) * batch_size * seq_len


def flops_head_twice(model, batch_size, seq_len):
    c = model.config
    weights = _matrices(model) + model.lm_head.weight.numel()  # the head listed again on top of tok_emb
    return (6 * weights + 12 * c.n_layer * c.d_model * seq_len) * batch_size * seq_len


def flops_with_positions(model, batch_size, seq_len):
    c = model.config
    weights = sum(p.numel() for p in model.parameters() if p.dim() == 2)
    return (6 * weights + 12 * c.n_layer * c.d_model * seq_len) * batch_size * seq_len


def flops_with_biases(model, batch_size, seq_len):
    return model.flops_per_token(seq_len) * batch_size * seq_len


def flops_over_context(model, batch_size, seq_len):
    c = model.config
    return (6 * _matrices(model) + 12 * c.n_layer * c.d_model * c.context_length) * batch_size * seq_len


def test_flops_reference_library_and_a_learners_version_pass(capsys):
    assert_passes(nb12.flops_by_hand, nb12.FLOPS.truth, capsys)
    assert_passes(nb12.flops_by_hand, nb12.FLOPS.fallback, capsys)
    assert_passes(nb12.flops_by_hand, flops_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (flops_two_n, "2·N per token instead of 6·N"),
        (flops_no_attention, "the attention term left out"),
        (flops_head_twice, "the tied head counted twice"),
        (flops_with_positions, "the position table counted as a matmul"),
        (flops_with_biases, "biases and norm gains counted as matmul weights"),
        (flops_over_context, "attention over context_length, not seq_len"),
    ],
)
def test_flops_names_the_mistake(wrong, name, capsys):
    assert_fails(nb12.flops_by_hand, wrong, capsys, says=f"Looks like {name}")


def test_flops_stub_raising_nan_and_wrong_type(capsys):
    assert_fails(nb12.flops_by_hand, stub("flops_by_hand"), capsys, says="flops_by_hand is not written yet")
    assert_fails(nb12.flops_by_hand, lambda model, b, t: model.config.n_embd, capsys, says="raised AttributeError")
    assert_fails(nb12.flops_by_hand, lambda model, b, t: math.nan, capsys, says="returned NaN")
    assert_fails(
        nb12.flops_by_hand, lambda model, b, t: str(flops_correct(model, b, t)), capsys, says="expected a number"
    )


def test_flops_fallback_counts_what_the_notebook_measures(capsys):
    """The notebook asserts FlopCounterMode == flops_by_hand(model, B, T) exactly, on the sweep's L2-d64 model."""
    assert_fails(nb12.flops_by_hand, flops_two_n, capsys, says="2·N", fallback=nb12.FLOPS.fallback)
    shape = scaling.ModelShape(2, 64, 4)
    config = GPTConfig.from_dict({**shape.config(2048, 64).to_dict(), "attn_impl": "manual"})
    torch.manual_seed(0)
    model = GPT(config)
    ids = torch.zeros(2, 64, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(ids).logsumexp(-1).mean().backward()
    assert nb12.FLOPS.fallback(model, 2, 64) == counter.get_total_flops()


# --------------------------------------------------------------------------------------- power_law_by_hand
def fit_correct(x, y):
    lx, ly = np.log(np.asarray(x)), np.log(np.asarray(y))
    p, log_k = np.linalg.lstsq(np.stack([lx, np.ones_like(lx)], axis=1), ly, rcond=None)[0]
    return float(np.exp(log_k)), float(p)


def _centred_slope(a, b):
    return np.sum((a - a.mean()) * (b - b.mean())) / np.sum((a - a.mean()) ** 2)


def fit_without_logs(x, y):
    x, y = np.array(x), np.array(y)
    p = _centred_slope(x, y)
    return math.exp(y.mean() - p * x.mean()), p


def fit_returns_log_k(x, y):
    lx, ly = np.log(x), np.log(y)
    p = _centred_slope(lx, ly)
    return ly.mean() - p * lx.mean(), p


def fit_through_origin(x, y):
    lx, ly = np.log(x), np.log(y)
    p = (lx * ly).sum() / (lx * lx).sum()
    return math.exp(ly.mean() - p * lx.mean()), p


def fit_x_on_y(x, y):
    lx, ly = np.log(x), np.log(y)
    p = np.sum((lx - lx.mean()) * (ly - ly.mean())) / np.sum((ly - ly.mean()) ** 2)
    return math.exp(ly.mean() - p * lx.mean()), p


def fit_log10_exp(x, y):
    lx, ly = np.log10(x), np.log10(y)
    p = _centred_slope(lx, ly)
    return math.exp(ly.mean() - p * lx.mean()), p


def test_power_law_reference_library_and_a_learners_version_pass(capsys):
    assert_passes(nb12.power_law_by_hand, nb12.POWER_LAW.truth, capsys)
    assert_passes(nb12.power_law_by_hand, nb12.POWER_LAW.fallback, capsys)
    assert_passes(nb12.power_law_by_hand, fit_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (fit_without_logs, "fitted in linear space"),
        (fit_returns_log_k, "the coefficient left in log space"),
        (fit_through_origin, "the slope without centring"),
        (fit_x_on_y, "log x regressed on log y"),
        (fit_log10_exp, "log10 for the fit, exp for the coefficient"),
    ],
)
def test_power_law_names_the_mistake(wrong, name, capsys):
    assert_fails(nb12.power_law_by_hand, wrong, capsys, says=f"Looks like {name}")


def test_power_law_stub_raising_nan_and_wrong_return(capsys):
    assert_fails(
        nb12.power_law_by_hand,
        stub("power_law_by_hand"),
        capsys,
        says="power_law_by_hand is not written yet",
        fallback=nb12.POWER_LAW.fallback,
    )
    assert_fails(nb12.power_law_by_hand, lambda x, y: scaling.fit_power_law(x, y), capsys, says="raised TypeError")

    def zero_variance(x, y):  # e.g. var(log x) computed on the wrong array: 0/0
        lx, ly = np.log(x), np.log(y)
        p = np.sum((lx - lx.mean()) * 0.0) / np.sum((lx - lx) ** 2)
        return math.exp(ly.mean()), float(p)

    with np.errstate(invalid="ignore"):
        assert_fails(nb12.power_law_by_hand, zero_variance, capsys, says="returned NaN")


def test_power_law_fallback_unpacks_as_the_notebook_does(capsys):
    assert_fails(nb12.power_law_by_hand, fit_x_on_y, capsys, says="regressed", fallback=nb12.POWER_LAW.fallback)
    budgets, best = [3e11, 6e11, 1.2e12, 2.4e12], [1.586, 1.17, 1.025, 0.909]
    k, p = nb12.POWER_LAW.fallback(budgets, best)
    assert abs(p - np.polyfit(np.log(budgets), np.log(best), 1)[0]) < 1e-12
    assert abs(k * 2.4e12**p / 0.909 - 1) < 0.05
