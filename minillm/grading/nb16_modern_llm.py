"""Graders for notebook 16: top-k routing with renormalised gates, the Switch balancing loss, Muon's Newton–Schulz
orthogonalisation, and the sliding-window mask.

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, the course's otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.

The references are independent of :mod:`minillm`: routing and the balancing loss token by token in float64
Python, Newton–Schulz through the SVD (the iteration maps each singular value σ to φ(σ) and keeps U and V), the
mask from its definition position by position.
"""

from __future__ import annotations

from typing import Any

import torch

from minillm.attention import sliding_window_mask
from minillm.grading.core import Build, Mistake, Probe, grade
from minillm.moe import load_balancing_loss, route
from minillm.optim import MUON_NS_COEFFICIENTS, newton_schulz

BUILDS = ("my_route", "my_load_balancing_loss", "my_newton_schulz", "my_sliding_window_mask")


def _logits(n: int, e: int, seed: int, scale: float = 2.0) -> torch.Tensor:
    return torch.randn(n, e, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale


# ----------------------------------------------------------------------------------------------- top-k routing
def _route_truth(logits, top_k):
    """Token by token: softmax in float64, the k largest (best first), their probabilities over their sum."""
    experts, weights = [], []
    for row in logits.tolist():
        peak = max(row)
        exps = [pow(2.718281828459045, v - peak) for v in row]
        probs = [v / sum(exps) for v in exps]
        order = sorted(range(len(row)), key=lambda i: -probs[i])[:top_k]
        chosen = sum(probs[i] for i in order)
        experts.append(order)
        weights.append([probs[i] / chosen for i in order])
    return torch.tensor(experts), torch.tensor(weights, dtype=torch.float64)


def _route_minillm(logits, top_k):
    routing = route(logits, top_k, renormalize=True)
    return routing.experts, routing.weights


def _route_variant(*, renormalize=True, dim=-1, largest=True, uniform=False):
    def my_route(logits, top_k):
        probs = torch.softmax(logits, dim=dim)
        weights, experts = torch.topk(probs, top_k, dim=-1, largest=largest)
        if uniform:
            weights = torch.full_like(weights, 1 / top_k)
        elif renormalize:
            weights = weights / weights.sum(-1, keepdim=True)
        return experts, weights

    return my_route


def _route_case(name: str, n: int, e: int, top_k: int, seed: int) -> Probe:
    def run(my_route: Any) -> Any:
        got = my_route(_logits(n, e, seed), top_k)
        return tuple(got) if isinstance(got, list | tuple) else got

    return Probe(name, run)


ROUTE = Build(
    name="my_route",
    what="the chosen experts and their gate weights",
    truth=_route_truth,
    truth_name="a per-token float64 loop",
    fallback=_route_minillm,
    fallback_name="minillm.moe.route (renormalize=True)",
    probes=(
        _route_case("8 tokens, 4 experts, top-2", 8, 4, 2, 0),
        _route_case("6 tokens, 8 experts, top-3", 6, 8, 3, 1),
        _route_case("5 tokens, 4 experts, top-1", 5, 4, 1, 2),
    ),
    mistakes=(
        Mistake(
            "gates not renormalised (the raw probabilities)",
            "divide the k chosen probabilities by their sum, so each token's gates add to 1.",
            _route_variant(renormalize=False),
        ),
        Mistake(
            "the softmax taken over the tokens (dim 0) instead of the experts",
            "each token gets its own distribution over experts: softmax over the last dimension.",
            _route_variant(dim=0),
        ),
        Mistake(
            "the k smallest probabilities",
            "torch.topk picks the largest by default; the router sends a token to its most probable experts.",
            _route_variant(largest=False),
        ),
        Mistake(
            "equal gates 1/k",
            "weight each expert's output by its (renormalised) probability, not equally.",
            _route_variant(uniform=True),
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="(experts, weights)",
)


def my_route(learner: Any) -> Any:
    """Grade ``my_route(logits [N, E], top_k) -> (experts [N, k] long, weights [N, k])``."""
    return grade(ROUTE, learner)


# ------------------------------------------------------------------------------------------ the balancing loss
def _aux_truth(probs, experts):
    """E · Σ_i f_i · P_i, counted in Python: f_i over the N·k choices, P_i the mean probability of expert i."""
    n, e = probs.shape
    choices = [int(x) for x in experts.reshape(-1)]
    rows = probs.tolist()
    total = 0.0
    for i in range(e):
        f = choices.count(i) / len(choices)
        p = sum(row[i] for row in rows) / n
        total += f * p
    return torch.tensor(e * total, dtype=torch.float64)


def _aux_no_e(probs, experts):
    return load_balancing_loss(probs, experts) / probs.shape[-1]


def _aux_per_token(probs, experts):
    return load_balancing_loss(probs, experts) * experts.shape[-1]  # counts over N tokens, not N·k choices


def _aux_f_squared(probs, experts):
    e = probs.shape[-1]
    f = torch.bincount(experts.reshape(-1), minlength=e).to(probs.dtype) / experts.numel()
    return e * (f * f).sum()


def _aux_case(name: str, n: int, e: int, top_k: int, seed: int, scale: float = 2.0) -> Probe:
    def run(my_load_balancing_loss: Any) -> Any:
        probs = torch.softmax(_logits(n, e, seed, scale), -1)
        experts = torch.topk(probs, top_k, dim=-1).indices
        return my_load_balancing_loss(probs, experts)

    return Probe(name, run)


AUX = Build(
    name="my_load_balancing_loss",
    what="the Switch balancing loss",
    truth=_aux_truth,
    truth_name="E · Σ f_i P_i counted in Python",
    fallback=load_balancing_loss,
    fallback_name="minillm.moe.load_balancing_loss",
    probes=(
        _aux_case("16 tokens, 4 experts, top-1", 16, 4, 1, 3),
        _aux_case("12 tokens, 8 experts, top-2", 12, 8, 2, 4),
        _aux_case("10 tokens, 4 experts, top-1, a peaked router", 10, 4, 1, 5, scale=6.0),
    ),
    mistakes=(
        Mistake(
            "the factor E missing",
            "multiply Σ f_i·P_i by the number of experts, so uniform routing gives exactly 1.",
            _aux_no_e,
        ),
        Mistake(
            "f_i counted over the N tokens instead of the N·k choices",
            "divide the counts by experts.numel() (N·k), so the fractions f_i add to 1.",
            _aux_per_token,
        ),
        Mistake(
            "f_i · f_i instead of f_i · P_i",
            "the second factor is the mean router probability P_i = probs.mean(0): the only part with a gradient.",
            _aux_f_squared,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="loss",
)


def my_load_balancing_loss(learner: Any) -> Any:
    """Grade ``my_load_balancing_loss(probs [N, E], experts [N, k]) -> scalar tensor``."""
    return grade(AUX, learner)


# -------------------------------------------------------------------------------------------- Newton–Schulz
def _ns_truth(g, steps=5):
    """Through the SVD: G/‖G‖_F = U·Σ·Vᵀ, and each step maps every σ to φ(σ) = aσ + bσ³ + cσ⁵."""
    a, b, c = MUON_NS_COEFFICIENTS
    u, s, vh = torch.linalg.svd(g / torch.linalg.matrix_norm(g), full_matrices=False)
    for _ in range(steps):
        s = a * s + b * s**3 + c * s**5
    return u @ torch.diag(s) @ vh


def _ns_variant(*, normalise=True, elementwise=False, reverse=False, one_step=False):
    def my_newton_schulz(g, steps=5):
        a, b, c = MUON_NS_COEFFICIENTS[::-1] if reverse else MUON_NS_COEFFICIENTS
        tall = g.shape[0] > g.shape[1]
        x = g.t() if tall else g
        if normalise:
            x = x / (torch.linalg.matrix_norm(x) + 1e-7)
        for _ in range(1 if one_step else steps):
            gram = x @ x.t()
            x = a * x + (b * gram + c * (gram * gram if elementwise else gram @ gram)) @ x
        return x.t() if tall else x

    return my_newton_schulz


def _ns_case(name: str, rows: int, cols: int, seed: int, steps: int = 5, scale: float = 1.0) -> Probe:
    def run(my_newton_schulz: Any) -> Any:
        g = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale
        return my_newton_schulz(g, steps)

    return Probe(name, run)


NEWTON_SCHULZ = Build(
    name="my_newton_schulz",
    what="the orthogonalised matrix",
    truth=_ns_truth,
    truth_name="U·φ⁵(Σ)·Vᵀ from an SVD in float64",
    fallback=newton_schulz,
    fallback_name="minillm.optim.newton_schulz",
    probes=(
        _ns_case("a 6 × 10 matrix, 5 steps", 6, 10, 6),
        _ns_case("a 12 × 5 matrix (tall), 5 steps", 12, 5, 7),
        _ns_case("an 8 × 8 matrix scaled by 50, 3 steps", 8, 8, 8, steps=3, scale=50.0),
    ),
    mistakes=(
        Mistake(
            "G not divided by its Frobenius norm first",
            "start from X = G / ‖G‖_F, so every singular value lies in [0, 1] where φ pushes it towards 1.",
            _ns_variant(normalise=False),
        ),
        Mistake(
            "(XXᵀ)² taken elementwise",
            "the quintic term is (XXᵀ)·(XXᵀ)·X: a matrix product (gram @ gram), not gram * gram.",
            _ns_variant(elementwise=True),
        ),
        Mistake(
            "the coefficients in reverse order",
            "a multiplies X, b the cubic (XXᵀ)X and c the quintic (XXᵀ)²X: (3.4445, −4.7750, 2.0315).",
            _ns_variant(reverse=True),
        ),
        Mistake(
            "a single step whatever `steps` says",
            "repeat the update `steps` times.",
            _ns_variant(one_step=True),
        ),
    ),
    rtol=1e-5,  # five steps amplify a rounding (or an eps added to the norm) at most 3.4445⁵ ≈ 480 times
    atol=1e-6,
    what_is_compared="matrix",
)


def my_newton_schulz(learner: Any) -> Any:
    """Grade ``my_newton_schulz(g [m, n], steps=5) -> [m, n]``."""
    return grade(NEWTON_SCHULZ, learner)


# ------------------------------------------------------------------------------------------ sliding window
def _window_truth(T, window):
    """Position by position: query i sees key j when j ≤ i and i − j < window."""
    return torch.tensor([[j <= i and i - j < window for j in range(T)] for i in range(T)])


def _window_minillm(T, window):
    return sliding_window_mask(T, T, window)


def _window_wider(T, window):
    return sliding_window_mask(T, T, window + 1)


def _window_not_causal(T, window):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (i - j).abs() < window


def _window_inverted(T, window):
    return ~sliding_window_mask(T, T, window)


def _window_case(name: str, T: int, window: int) -> Probe:
    return Probe(name, lambda my_sliding_window_mask: my_sliding_window_mask(T, window))


WINDOW = Build(
    name="my_sliding_window_mask",
    what="the sliding-window mask",
    truth=_window_truth,
    truth_name="the definition, position by position",
    fallback=_window_minillm,
    fallback_name="minillm.attention.sliding_window_mask",
    probes=(
        _window_case("T = 8, window 3", 8, 3),
        _window_case("T = 6, window 1 (each token sees itself only)", 6, 1),
        _window_case("T = 5, window 9 (≥ T: plain causal)", 5, 9),
    ),
    mistakes=(
        Mistake(
            "window + 1 keys (the window counted without the query itself)",
            "a query sees itself and the window − 1 keys before it: i − j < window.",
            _window_wider,
        ),
        Mistake(
            "the future visible (|i − j| < window, no causal part)",
            "keep the causal condition j ≤ i as well.",
            _window_not_causal,
        ),
        Mistake(
            "True on the hidden keys",
            "the mask is True where a query may look.",
            _window_inverted,
        ),
    ),
    what_is_compared="mask",
)


def my_sliding_window_mask(learner: Any) -> Any:
    """Grade ``my_sliding_window_mask(T, window) -> bool [T, T]``."""
    return grade(WINDOW, learner)
