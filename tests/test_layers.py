"""Tests for minillm.layers: each component against its PyTorch counterpart and a float64 computation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from minillm import layers
from minillm.layers import GeluMLP, RMSNorm, SwiGLU

DTYPE_TOL = {torch.float32: 1e-6, torch.float64: 1e-12}


def randn(*shape, dtype=torch.float32, seed=0, scale=1.0):
    return scale * torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- softmax


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 7), min_size=1, max_size=3),
    scale=st.sampled_from([1.0, 30.0, 1000.0]),
    seed=st.integers(0, 10_000),
)
def test_softmax_matches_torch_and_float64(shape, scale, seed):
    x = randn(*shape, seed=seed, scale=scale)
    dim = seed % len(shape)
    got = layers.softmax(x, dim=dim)
    torch.testing.assert_close(got, torch.softmax(x, dim=dim), atol=1e-6, rtol=0)
    x64 = x.double()
    want = torch.exp(x64 - x64.max(dim=dim, keepdim=True).values)
    want = want / want.sum(dim=dim, keepdim=True)
    torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=0)


def test_softmax_survives_huge_logits_where_the_naive_formula_fails():
    x = torch.tensor([[1000.0, 999.0, -1000.0]])
    naive = x.exp() / x.exp().sum(-1, keepdim=True)
    assert torch.isnan(naive).any()  # the failure the shift prevents
    got = layers.softmax(x)
    want = torch.tensor([[1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1)), 0.0]])
    torch.testing.assert_close(got, want, atol=1e-7, rtol=0)


def test_softmax_gradient_matches_torch():
    x = randn(4, 9, dtype=torch.float64, seed=3).requires_grad_()
    w = randn(4, 9, dtype=torch.float64, seed=4)
    (g_ours,) = torch.autograd.grad((layers.softmax(x) * w).sum(), x)
    (g_ref,) = torch.autograd.grad((torch.softmax(x, -1) * w).sum(), x)
    torch.testing.assert_close(g_ours, g_ref, atol=1e-12, rtol=0)


# ---------------------------------------------------------------- activations


def erf_gelu_float64(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x.double().tolist()], dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gelu_exact_and_tanh(dtype):
    x = torch.linspace(-8, 8, 801, dtype=dtype)
    tol = DTYPE_TOL[dtype]
    torch.testing.assert_close(layers.gelu(x), F.gelu(x), atol=tol, rtol=0)
    torch.testing.assert_close(layers.gelu(x, "tanh"), F.gelu(x, approximate="tanh"), atol=tol, rtol=0)
    torch.testing.assert_close(layers.gelu(x).double(), erf_gelu_float64(x), atol=tol, rtol=0)
    # The tanh formula is an approximation: close to exact, but not equal.
    gap = (layers.gelu(x.double(), "tanh") - erf_gelu_float64(x)).abs().max().item()
    assert 1e-5 < gap < 1e-3


def test_silu():
    x = torch.linspace(-10, 10, 501)
    want = torch.tensor([v / (1 + math.exp(-v)) for v in x.double().tolist()], dtype=torch.float64)
    torch.testing.assert_close(layers.silu(x).double(), want, atol=1e-6, rtol=0)
    torch.testing.assert_close(layers.silu(x), F.silu(x), atol=1e-6, rtol=0)


# ---------------------------------------------------------------- norms


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_formula_matches_torch_and_float64(bias):
    x = randn(3, 5, 24, seed=1, scale=3.0) + 2.0
    weight, b = randn(24, seed=2), randn(24, seed=3) if bias else None
    ref = F.layer_norm(x, (24,), weight, b, 1e-5)
    torch.testing.assert_close(layers.layer_norm(x, weight, b), ref, atol=1e-5, rtol=0)
    x64 = x.double()
    mean = x64.mean(-1, keepdim=True)
    var = ((x64 - mean) ** 2).mean(-1, keepdim=True)
    want = (x64 - mean) / torch.sqrt(var + 1e-5) * weight.double() + (b.double() if bias else 0)
    torch.testing.assert_close(layers.layer_norm(x, weight, b).double(), want, atol=1e-5, rtol=0)


def test_rms_norm_matches_torch_and_float64():
    x = randn(4, 7, 32, seed=5, scale=2.0)
    ours, ref = RMSNorm(32, eps=1e-6), nn.RMSNorm(32, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(randn(32, seed=6))
        ref.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-6, rtol=1e-6)
    x64 = x.double()
    want = x64 / torch.sqrt((x64**2).mean(-1, keepdim=True) + 1e-6) * ours.weight.double()
    torch.testing.assert_close(ours(x).double(), want, atol=1e-5, rtol=0)


def test_make_norm_choices():
    assert isinstance(layers.make_norm("layernorm", 8), nn.LayerNorm)
    assert layers.make_norm("layernorm", 8, bias=False).bias is None
    assert isinstance(layers.make_norm("rmsnorm", 8), RMSNorm)
    with pytest.raises(ValueError, match="'batchnorm'"):
        layers.make_norm("batchnorm", 8)


# ---------------------------------------------------------------- linear and embedding


@pytest.mark.parametrize("bias", [True, False])
def test_linear_is_nn_linear_with_gpt2_init_drawing_only_its_weights(bias):
    """The model re-initialises its weights afterwards; what the constructor draws still moves the seeded stream."""
    torch.manual_seed(0)
    lin = layers.linear(512, 256, bias=bias)
    after = torch.randn(3)
    torch.manual_seed(0)
    want = torch.empty(256, 512).normal_(0.0, 0.02)
    assert type(lin) is nn.Linear and torch.equal(lin.weight, want) and torch.equal(torch.randn(3), after)
    assert (lin.bias is None) == (not bias) and (not bias or torch.all(lin.bias == 0))
    x = randn(2, 3, 512, seed=9)
    want = x.double() @ lin.weight.double().T + (lin.bias.double() if bias else 0)
    torch.testing.assert_close(lin(x).double(), want, atol=1e-5, rtol=0)


def test_embedding_is_a_row_lookup_and_a_one_hot_product():
    torch.manual_seed(0)
    emb = layers.embedding(10, 4)
    torch.manual_seed(0)
    assert type(emb) is nn.Embedding and torch.equal(emb.weight, torch.empty(10, 4).normal_(0.0, 0.02))
    ids = torch.tensor([[0, 9, 3], [3, 3, 1]])
    one_hot = F.one_hot(ids, 10).double()
    torch.testing.assert_close(emb(ids).double(), one_hot @ emb.weight.double(), atol=1e-7, rtol=0)


# ---------------------------------------------------------------- MLPs


def test_gelu_mlp_matches_float64():
    mlp = GeluMLP(8, 32)
    x = randn(2, 5, 8, seed=10)
    w1, b1, w2, b2 = (t.double() for t in (mlp.fc.weight, mlp.fc.bias, mlp.proj.weight, mlp.proj.bias))
    h = x.double() @ w1.T + b1
    h = h * 0.5 * (1 + torch.erf(h / math.sqrt(2)))
    torch.testing.assert_close(mlp(x).double(), h @ w2.T + b2, atol=1e-6, rtol=0)


@pytest.mark.parametrize("bias", [False, True])
def test_swiglu_matches_float64(bias):
    mlp = SwiGLU(8, 24, bias=bias)
    if bias:
        with torch.no_grad():
            for lin in (mlp.gate, mlp.up, mlp.down):
                lin.bias.normal_()
    x = randn(3, 8, seed=11, scale=3.0).double()
    g, u, d = mlp.gate, mlp.up, mlp.down

    def lin(m, t):
        return t @ m.weight.double().T + (m.bias.double() if bias else 0)

    gate = lin(g, x)
    want = lin(d, gate / (1 + torch.exp(-gate)) * lin(u, x))
    torch.testing.assert_close(mlp(x.float()).double(), want, atol=1e-6, rtol=0)


def test_gelu_names_a_bad_approximation():
    with pytest.raises(ValueError, match="'fast'"):
        layers.gelu(torch.zeros(2), approximate="fast")
