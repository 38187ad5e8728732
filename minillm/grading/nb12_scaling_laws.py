"""Graders for notebook 12: the non-embedding parameter count, the training FLOP count, the power-law fit.

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from minillm import scaling
from minillm.grading.core import Build, Mistake, Probe, grade
from minillm.model import GPT, GPTConfig

BUILDS = ("non_embedding_by_hand", "flops_by_hand", "power_law_by_hand")

PROBE_VOCAB, PROBE_CONTEXT = 50, 24


def _config(n_layer: int, d_model: int, n_head: int, vocab_size: int = PROBE_VOCAB, context: int = PROBE_CONTEXT):
    """The notebook's model family (gpt2-style: LayerNorm, GELU MLP of 4d, learned positions, tied head)."""
    return GPTConfig.preset(
        "gpt2-style",
        vocab_size=vocab_size,
        context_length=context,
        n_layer=n_layer,
        n_head=n_head,
        d_model=d_model,
        attn_impl="manual",  # FlopCounterMode has no formula for the fused CPU attention kernel
    )


def _gpt(config: GPTConfig) -> GPT:
    """A GPT built without disturbing the notebook's random stream (its initial weights draw from it)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return GPT(config)


# ---------------------------------------------------------------------------------- non_embedding_by_hand
def _count_case(n_layer: int, d: int) -> Probe:
    def run(count: Any) -> Any:
        return count(n_layer, d)

    return Probe(f"n_layer {n_layer}, d {d}", run)


def _tensors_of_a_gpt(n_layer, d):
    """PyTorch's count: the numel of every tensor of a real GPT of that shape but the two tables."""
    model = _gpt(_config(n_layer, d, 1))
    tables = ("tok_emb.weight", "pos_emb.weight")
    return sum(p.numel() for name, p in model.named_parameters() if name not in tables)


def _library_count(n_layer, d):
    """minillm.scaling.non_embedding_parameters with the build's interface (any vocabulary: it cancels)."""
    return scaling.non_embedding_parameters(scaling.ModelShape(n_layer, d, 1).config(PROBE_VOCAB, PROBE_CONTEXT))


def _block_count(n_layer, d, *, biases=True, norm=2, final_norm=True):
    matrices = 3 * d * d + d * d + 4 * d * d + 4 * d * d
    bias = (3 * d + d + 4 * d + d) if biases else 0
    return n_layer * (matrices + bias + 2 * norm * d) + (norm * d if final_norm else 0)


def _closed_form(n_layer, d):
    return 12 * n_layer * d * d


def _no_biases(n_layer, d):
    return _block_count(n_layer, d, biases=False)


def _norms_gain_only(n_layer, d):
    return _block_count(n_layer, d, norm=1)


def _no_final_norm(n_layer, d):
    return _block_count(n_layer, d, final_norm=False)


def _no_norms(n_layer, d):
    return _block_count(n_layer, d, norm=0, final_norm=False)


COUNT = Build(
    name="non_embedding_by_hand",
    what="the non-embedding parameter count",
    truth=_tensors_of_a_gpt,
    truth_name="the numel of a GPT's tensors but tok_emb and pos_emb",
    fallback=_library_count,
    fallback_name="minillm.scaling.non_embedding_parameters",
    probes=(_count_case(1, 8), _count_case(3, 16), _count_case(2, 40)),
    mistakes=(
        Mistake(
            "the closed form 12·L·d²",
            "12·L·d² counts the weight matrices only: add every bias and the LayerNorms' gains and biases.",
            _closed_form,
        ),
        Mistake(
            "the biases forgotten",
            "qkv, the attention output and both MLP layers each have a bias: 3d + d + 4d + d per block.",
            _no_biases,
        ),
        Mistake(
            "LayerNorm counted as d parameters",
            "a LayerNorm has a gain AND a bias: 2d per norm.",
            _norms_gain_only,
        ),
        Mistake(
            "the final LayerNorm forgotten",
            "after the last block comes one more LayerNorm (2d) before the head.",
            _no_final_norm,
        ),
        Mistake(
            "the LayerNorms forgotten",
            "each block has two LayerNorms (2d each), and one more follows the last block.",
            _no_norms,
        ),
    ),
    rtol=0.0,
    atol=0.0,
    what_is_compared="count",
)


def non_embedding_by_hand(learner: Any) -> Any:
    """Grade ``non_embedding_by_hand(n_layer, d) -> int`` (the gpt2-style model without its two tables)."""
    return grade(COUNT, learner)


# ------------------------------------------------------------------------------------------ flops_by_hand
def _flops_case(n_layer: int, d: int, n_head: int, batch_size: int, seq_len: int, vocab: int, context: int) -> Probe:
    def run(count: Any) -> Any:
        model = _gpt(_config(n_layer, d, n_head, vocab, context))
        return count(model, batch_size, seq_len)

    where = f"a GPT (n_layer {n_layer}, d {d}, vocabulary {vocab}, context {context})"
    return Probe(f"{where}, a batch of {batch_size}×{seq_len} tokens", run)


def _flop_counter(model, batch_size, seq_len):
    """What PyTorch counts: every matmul FLOP of one forward and backward pass on a [batch_size, seq_len] batch."""
    ids = torch.zeros(batch_size, seq_len, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(ids).logsumexp(-1).mean().backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def _library_flops(model, batch_size, seq_len):
    """minillm's GPT.flops_per_token for a [batch_size, seq_len] batch, less the 6 FLOPs per token it adds for each
    bias and norm gain (elementwise, not matmuls: FlopCounterMode does not count them)."""
    elementwise = sum(p.numel() for p in model.parameters() if p.ndim == 1)
    return (model.flops_per_token(seq_len) - 6 * elementwise) * batch_size * seq_len


def _flops(model, batch_size, seq_len, *, per_weight=6, attention=True, extra=0, context=False, with_bias=False):
    c = model.config
    if with_bias:  # what GPT.flops_per_token counts: every parameter but the lookup tables
        weights = scaling.matmul_parameters(c)
    else:
        weights = sum(p.numel() for n, p in model.named_parameters() if p.ndim == 2 and n != "pos_emb.weight")
    span = c.context_length if context else seq_len
    per_token = per_weight * (weights + extra) + (12 * c.n_layer * c.d_model * span if attention else 0)
    return per_token * batch_size * seq_len


def _two_n(model, batch_size, seq_len):
    return _flops(model, batch_size, seq_len, per_weight=2)


def _no_attention(model, batch_size, seq_len):
    return _flops(model, batch_size, seq_len, attention=False)


def _head_twice(model, batch_size, seq_len):
    return _flops(model, batch_size, seq_len, extra=model.config.vocab_size * model.config.d_model)


def _positions_as_matmul(model, batch_size, seq_len):
    return _flops(model, batch_size, seq_len, extra=model.config.context_length * model.config.d_model)


def _biases_as_matmul(model, batch_size, seq_len):
    return _flops(model, batch_size, seq_len, with_bias=True)


def _attention_over_context(model, batch_size, seq_len):
    return _flops(model, batch_size, seq_len, context=True)


FLOPS = Build(
    name="flops_by_hand",
    what="the training FLOP count",
    truth=_flop_counter,
    truth_name="torch.utils.flop_counter.FlopCounterMode",
    fallback=_library_flops,
    fallback_name="minillm's GPT.flops_per_token less its 6 per bias and norm gain",
    probes=(
        _flops_case(1, 8, 2, 2, 24, 50, 24),
        _flops_case(2, 16, 2, 3, 10, 40, 32),
        _flops_case(3, 12, 3, 1, 16, 64, 16),
    ),
    mistakes=(
        Mistake(
            "2·N per token instead of 6·N",
            "2 FLOPs per weight and token forward (a multiply and an add), 4 more backward: 6·N per token.",
            _two_n,
        ),
        Mistake(
            "the attention term left out",
            "QKᵀ and the weighted sum are matmuls without weights: add 12·L·d·T per token (T = seq_len).",
            _no_attention,
        ),
        Mistake(
            "the tied head counted twice",
            "the output head IS the token table (tied): count its V·d weights once.",
            _head_twice,
        ),
        Mistake(
            "the position table counted as a matmul",
            "the position table is read by index, no multiply: leave pos_emb out of N.",
            _positions_as_matmul,
        ),
        Mistake(
            "biases and norm gains counted as matmul weights",
            "count the 2-D weight matrices only: biases and norm gains are added or multiplied elementwise, not "
            "matmuls, and FlopCounterMode counts matmuls.",
            _biases_as_matmul,
        ),
        Mistake(
            "attention over context_length, not seq_len",
            "a token attends to the seq_len positions of its own batch, whatever the model's longest context.",
            _attention_over_context,
        ),
    ),
    rtol=0.0,
    atol=0.0,
    what_is_compared="FLOP count",
)


def flops_by_hand(learner: Any) -> Any:
    """Grade ``flops_by_hand(model, batch_size, seq_len) -> int`` (one forward + backward, matmuls only)."""
    return grade(FLOPS, learner)


# -------------------------------------------------------------------------------------- power_law_by_hand
def _power_law_case(seed: int, x: list[float], coefficient: float, exponent: float, noise: float, what: str) -> Probe:
    g = torch.Generator().manual_seed(seed)
    wiggle = torch.exp(torch.randn(len(x), generator=g, dtype=torch.float64) * noise).tolist()
    y = [coefficient * xi**exponent * w for xi, w in zip(x, wiggle, strict=True)]

    def run(fit: Any) -> dict:
        k, p = fit(list(x), list(y))
        return {"exponent": p, "coefficient": k}

    return Probe(f"{what} ({len(x)} points)", run)


def _polyfit(x, y):
    """numpy's least-squares line through (log x, log y): (e^intercept, slope)."""
    slope, intercept = np.polyfit(np.log(x), np.log(y), 1)
    return float(math.exp(intercept)), float(slope)


def _library_fit(x, y):
    """minillm.scaling.fit_power_law, returning (coefficient, exponent) as the build does."""
    law = scaling.fit_power_law(x, y)
    return law.coefficient, law.exponent


def _line(x, y, *, logs=True, centre=True, regress="y on x", log_k=False, log10=False):
    log = np.log10 if log10 else np.log
    x, y = (
        (log(np.asarray(x, dtype=float)), log(np.asarray(y, dtype=float))) if logs else (np.asarray(x), np.asarray(y))
    )
    if not centre:
        p = np.sum(x * y) / np.sum(x**2)
    elif regress == "x on y":
        p = np.sum((x - x.mean()) * (y - y.mean())) / np.sum((y - y.mean()) ** 2)
    else:
        p = np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2)
    intercept = y.mean() - p * x.mean()
    return (float(intercept) if log_k else float(np.exp(intercept))), float(p)


def _linear_space(x, y):
    return _line(x, y, logs=False)


def _coefficient_in_logs(x, y):
    return _line(x, y, log_k=True)


def _not_centred(x, y):
    return _line(x, y, centre=False)


def _x_on_y(x, y):
    return _line(x, y, regress="x on y")


def _log10_then_exp(x, y):
    return _line(x, y, log10=True)


POWER_LAW = Build(
    name="power_law_by_hand",
    what="the power-law fit",
    truth=_polyfit,
    truth_name="numpy.polyfit on (log x, log y)",
    fallback=_library_fit,
    fallback_name="minillm.scaling.fit_power_law",
    probes=(
        _power_law_case(0, [3e11, 6e11, 1.2e12, 2.4e12], 1.45e3, -0.26, 0.03, "four compute budgets"),
        _power_law_case(1, [1.0, 2.0, 5.0, 10.0, 30.0, 100.0], 3.0, 0.5, 0.1, "a rising law"),
        _power_law_case(2, [1e3, 1e4, 1e5, 1e6, 1e7], 40.0, -0.076, 0.02, "a slow law over four decades"),
    ),
    mistakes=(
        Mistake(
            "fitted in linear space",
            "take the logs first: log y = log k + p·log x is the straight line; y against x is not.",
            _linear_space,
        ),
        Mistake(
            "the coefficient left in log space",
            "the line's intercept is log k: return k = exp(intercept).",
            _coefficient_in_logs,
        ),
        Mistake(
            "the slope without centring",
            "p = Σ(x − x̄)(y − ȳ) / Σ(x − x̄)² in log space; Σxy/Σx² forces the line through the origin.",
            _not_centred,
        ),
        Mistake(
            "log x regressed on log y",
            "the denominator is the variance of log x (the variable the law is a function of), not of log y.",
            _x_on_y,
        ),
        Mistake(
            "log10 for the fit, exp for the coefficient",
            "use one base: with np.log the coefficient is exp(intercept), with np.log10 it is 10**intercept.",
            _log10_then_exp,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="fit",
)


def power_law_by_hand(learner: Any) -> Any:
    """Grade ``power_law_by_hand(x, y) -> (k, p)`` with y ≈ k·x^p, fitted by least squares in log space."""
    return grade(POWER_LAW, learner)
