"""Notebook 16's graders: each passes correct versions, names every known mistake, and survives stubs and junk."""

from __future__ import annotations

import pytest
import torch

from minillm.grading import nb16_modern_llm as nb16
from tests.grading_helpers import assert_fails, assert_passes, stub


# ----------------------------------------------------------------------------------------------- top-k routing
def route_correct(logits, top_k):
    probs = torch.softmax(logits.double(), dim=1)
    experts = probs.argsort(dim=1, descending=True)[:, :top_k]
    chosen = probs.gather(1, experts)
    return experts, chosen / chosen.sum(1, keepdim=True)


def route_raw(logits, top_k):
    probs = logits.softmax(-1)
    experts = probs.argsort(dim=1, descending=True)[:, :top_k]
    return experts, probs.gather(1, experts)


def route_over_tokens(logits, top_k):
    probs = logits.softmax(0)
    experts = probs.argsort(dim=1, descending=True)[:, :top_k]
    chosen = probs.gather(1, experts)
    return experts, chosen / chosen.sum(1, keepdim=True)


def route_smallest(logits, top_k):
    probs = logits.softmax(-1)
    experts = probs.argsort(dim=1)[:, :top_k]
    chosen = probs.gather(1, experts)
    return experts, chosen / chosen.sum(1, keepdim=True)


def route_equal_gates(logits, top_k):
    experts = logits.argsort(dim=1, descending=True)[:, :top_k]
    return experts, torch.ones(experts.shape, dtype=logits.dtype) / top_k


def test_route_correct_versions_pass(capsys):
    assert_passes(nb16.my_route, route_correct, capsys)
    assert_passes(nb16.my_route, nb16.ROUTE.fallback, capsys)
    # softmax over the top-k logits alone is the same renormalised distribution
    assert_passes(nb16.my_route, lambda lg, k: [lg.topk(k).indices, lg.topk(k).values.softmax(-1)], capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (route_raw, "gates not renormalised (the raw probabilities)"),
        (route_over_tokens, "the softmax taken over the tokens (dim 0) instead of the experts"),
        (route_smallest, "the k smallest probabilities"),
        (route_equal_gates, "equal gates 1/k"),
    ],
)
def test_route_names_the_mistake(wrong, name, capsys):
    assert_fails(nb16.my_route, wrong, capsys, says=f"Looks like {name}", fallback=nb16.ROUTE.fallback)


def test_route_stub_raising_and_wrong_type(capsys):
    assert_fails(nb16.my_route, stub("my_route"), capsys, says="my_route is not written yet")
    assert_fails(nb16.my_route, lambda lg, k: lg[99], capsys, says="raised IndexError")
    assert_fails(nb16.my_route, lambda lg, k: 3, capsys, says="expected a tuple")


# ------------------------------------------------------------------------------------------ the balancing loss
def aux_correct(probs, experts):
    n_experts = probs.shape[1]
    one_hot = torch.zeros(experts.numel(), n_experts, dtype=probs.dtype)
    one_hot[torch.arange(experts.numel()), experts.flatten()] = 1
    return n_experts * (one_hot.mean(0) * probs.mean(0)).sum()


def aux_without_e(probs, experts):
    return aux_correct(probs, experts) / probs.shape[1]


def aux_per_token(probs, experts):
    n_experts = probs.shape[1]
    counts = torch.stack([(experts == i).sum() for i in range(n_experts)]).to(probs.dtype)
    return n_experts * (counts / probs.shape[0] * probs.mean(0)).sum()


def aux_f_times_f(probs, experts):
    n_experts = probs.shape[1]
    f = torch.stack([(experts == i).sum() / experts.numel() for i in range(n_experts)])
    return n_experts * (f.to(probs.dtype) ** 2).sum()


def test_aux_correct_versions_pass(capsys):
    assert_passes(nb16.my_load_balancing_loss, aux_correct, capsys)
    assert_passes(nb16.my_load_balancing_loss, nb16.AUX.fallback, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (aux_without_e, "the factor E missing"),
        (aux_per_token, "f_i counted over the N tokens instead of the N·k choices"),
        (aux_f_times_f, "f_i · f_i instead of f_i · P_i"),
    ],
)
def test_aux_names_the_mistake(wrong, name, capsys):
    assert_fails(nb16.my_load_balancing_loss, wrong, capsys, says=f"Looks like {name}", fallback=nb16.AUX.fallback)


def test_aux_stub_raising_and_nan(capsys):
    assert_fails(nb16.my_load_balancing_loss, stub("my_load_balancing_loss"), capsys, says="is not written yet")
    assert_fails(nb16.my_load_balancing_loss, lambda p, e: p @ e, capsys, says="raised RuntimeError")
    assert_fails(
        nb16.my_load_balancing_loss, lambda p, e: torch.full((), float("nan"), dtype=p.dtype), capsys, says="NaN"
    )


# -------------------------------------------------------------------------------------------- Newton–Schulz
A, B, C = 3.4445, -4.7750, 2.0315


def ns_correct(g, steps=5):
    x = g / g.norm()
    for _ in range(steps):
        x = A * x + B * (x @ x.T @ x) + C * (x @ x.T @ x @ x.T @ x)  # works for tall and wide alike
    return x


def ns_unnormalised(g, steps=5):
    x = g.clone()
    for _ in range(steps):
        x = A * x + B * (x @ x.T @ x) + C * (x @ x.T @ x @ x.T @ x)
    return x


def ns_elementwise(g, steps=5):
    wide = g.T if g.shape[0] > g.shape[1] else g
    x = wide / wide.norm()
    for _ in range(steps):
        gram = x @ x.T
        x = A * x + B * gram @ x + C * (gram**2) @ x
    return x.T if g.shape[0] > g.shape[1] else x


def ns_reversed(g, steps=5):
    x = g / g.norm()
    for _ in range(steps):
        x = C * x + B * (x @ x.T @ x) + A * (x @ x.T @ x @ x.T @ x)
    return x


def ns_one_step(g, steps=5):
    x = g / g.norm()
    return A * x + B * (x @ x.T @ x) + C * (x @ x.T @ x @ x.T @ x)


def test_newton_schulz_correct_versions_pass(capsys):
    assert_passes(nb16.my_newton_schulz, ns_correct, capsys)
    assert_passes(nb16.my_newton_schulz, nb16.NEWTON_SCHULZ.fallback, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (ns_unnormalised, "G not divided by its Frobenius norm first"),
        (ns_elementwise, "(XXᵀ)² taken elementwise"),
        (ns_reversed, "the coefficients in reverse order"),
        (ns_one_step, "a single step whatever `steps` says"),
    ],
)
def test_newton_schulz_names_the_mistake(wrong, name, capsys):
    fallback = nb16.NEWTON_SCHULZ.fallback
    assert_fails(nb16.my_newton_schulz, wrong, capsys, says=f"Looks like {name}", fallback=fallback)


def test_newton_schulz_stub_and_wrong_shape(capsys):
    assert_fails(nb16.my_newton_schulz, stub("my_newton_schulz"), capsys, says="is not written yet")
    assert_fails(nb16.my_newton_schulz, lambda g, steps=5: g.T / g.norm(), capsys, says="shape")


# ------------------------------------------------------------------------------------------ sliding window
def window_correct(T, window):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j <= i) & (j > i - window)


def window_plus_one(T, window):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j <= i) & (j >= i - window)


def window_two_sided(T, window):
    return torch.tensor([[abs(i - j) < window for j in range(T)] for i in range(T)])


def window_inverted(T, window):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j > i) | (j <= i - window)


def test_window_correct_versions_pass(capsys):
    assert_passes(nb16.my_sliding_window_mask, window_correct, capsys)
    assert_passes(nb16.my_sliding_window_mask, nb16.WINDOW.fallback, capsys)
    assert_passes(
        nb16.my_sliding_window_mask,
        lambda T, w: torch.ones(T, T).tril().bool() & ~torch.ones(T, T).tril(-w).bool(),
        capsys,
    )


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (window_plus_one, "window + 1 keys (the window counted without the query itself)"),
        (window_two_sided, "the future visible (|i − j| < window, no causal part)"),
        (window_inverted, "True on the hidden keys"),
    ],
)
def test_window_names_the_mistake(wrong, name, capsys):
    fallback = nb16.WINDOW.fallback
    assert_fails(nb16.my_sliding_window_mask, wrong, capsys, says=f"Looks like {name}", fallback=fallback)


def test_window_stub_and_plain_causal(capsys):
    assert_fails(nb16.my_sliding_window_mask, stub("my_sliding_window_mask"), capsys, says="is not written yet")
    out = assert_fails(nb16.my_sliding_window_mask, lambda T, w: torch.ones(T, T).tril().bool(), capsys, says="differ")
    assert "Looks like" not in out
