"""Muon and its Newton–Schulz orthogonalisation against the SVD (float64), and the Muon/AdamW parameter split."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from minillm.model import GPT, GPTConfig
from minillm.optim import MUON_NS_COEFFICIENTS, AdamW, Muon, muon_param_groups, muon_with_adamw, newton_schulz

F64 = 1e-10  # float64 against float64 (five quintic steps lose a few digits)


def matrix_with_singular_values(rows: int, cols: int, singular: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """U · diag(singular) · Vᵀ with random orthonormal U, V (from QR), in float64."""
    gen = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(rows, len(singular), generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(cols, len(singular), generator=gen, dtype=torch.float64))
    return u @ torch.diag(singular.double()) @ v.t()


def polynomial_reference(g: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """What the iteration must give: U · φ^steps(Σ / (‖G‖_F + eps)) · Vᵀ, φ(σ) = aσ + bσ³ + cσ⁵ on the SVD's values."""
    a, b, c = MUON_NS_COEFFICIENTS
    u, s, vh = torch.linalg.svd(g, full_matrices=False)
    s = s / (torch.linalg.matrix_norm(g) + eps)
    for _ in range(steps):
        s = a * s + b * s**3 + c * s**5
    return u @ torch.diag(s) @ vh


WELL = torch.linspace(1.0, 4.0, 16)  # condition number 4
ILL = torch.logspace(0, -6, 16)  # condition number 1e6


@pytest.mark.parametrize("shape", [(16, 16), (24, 16), (16, 40)])
@pytest.mark.parametrize("singular", [WELL, ILL], ids=["well", "ill"])
def test_newton_schulz_applies_the_quintic_to_each_singular_value(shape, singular):
    g = matrix_with_singular_values(*shape, singular)
    torch.testing.assert_close(newton_schulz(g), polynomial_reference(g), atol=F64, rtol=0)


@pytest.mark.parametrize("shape", [(16, 16), (24, 16), (16, 40)])
def test_well_conditioned_lands_in_the_band_with_the_svd_singular_vectors(shape):
    g = matrix_with_singular_values(*shape, WELL)
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    x = newton_schulz(g)
    # x = U · diag(s') · Vᵀ: its singular vectors are G's, so Uᵀ x V is diagonal ...
    core = u.t() @ x @ vh.t()
    assert (core - torch.diag(torch.diagonal(core))).abs().max() < 1e-9
    # ... and the values sit in the quintic's band around 1, not at 1.
    s = torch.diagonal(core)
    assert s.min() > 0.6 and s.max() < 1.21
    distance = torch.linalg.matrix_norm(x - u @ vh, ord=2)  # = max |s' − 1|
    assert abs(distance - (s - 1).abs().max()) < 1e-9
    assert distance < 0.35


def test_ill_conditioned_small_singular_values_are_still_on_their_way():
    g = matrix_with_singular_values(16, 16, ILL)
    u, sigma, vh = torch.linalg.svd(g)
    s = torch.diagonal(u.t() @ newton_schulz(g) @ vh.t())
    relative = sigma / torch.linalg.matrix_norm(g)
    assert torch.all((s > 0.6) & (s < 1.21) | (relative < 3e-3))  # every value ≥ 0.003·‖G‖ reached the band
    assert s[relative < 1e-4].max() < 0.05  # five steps multiply a tiny σ by only ≈ 3.4445⁵ ≈ 480
    torch.testing.assert_close(s[relative < 1e-5], relative[relative < 1e-5] * 3.4445**5, rtol=1e-3, atol=0)


def test_newton_schulz_refuses_a_vector():
    with pytest.raises(ValueError, match="2-D matrix"):
        newton_schulz(torch.ones(4))


# ---------------------------------------------------------------- the optimizer


def test_muon_refuses_a_vector_clearly():
    with pytest.raises(ValueError, match=r"Muon updates 2-D weight matrices only, got a parameter of shape \(5,\)"):
        Muon([nn.Parameter(torch.ones(3, 5)), nn.Parameter(torch.ones(5))])


@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("shape", [(6, 4), (4, 6)])
def test_muon_steps_equal_the_written_out_update(nesterov, shape):
    lr, momentum, decay = 0.05, 0.9, 0.1
    p = nn.Parameter(torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    expected = p.detach().clone()
    opt = Muon([p], lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=decay)
    buf = torch.zeros_like(expected)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        g = torch.randn(*shape, dtype=torch.float64, generator=gen)
        p.grad = g.clone()
        opt.step()
        buf = momentum * buf + g
        u = g + momentum * buf if nesterov else buf
        expected = expected * (1 - lr * decay) - lr * math.sqrt(max(1, shape[0] / shape[1])) * polynomial_reference(u)
    torch.testing.assert_close(p.detach(), expected, atol=1e-9, rtol=0)


@pytest.mark.parametrize("seed", range(5))
def test_muon_decreases_a_least_squares_loss(seed):
    gen = torch.Generator().manual_seed(seed)
    x, w_true = torch.randn(64, 16, generator=gen), torch.randn(8, 16, generator=gen)
    y = x @ w_true.t()
    w = nn.Parameter(torch.zeros(8, 16))
    opt = Muon([w], lr=0.2)  # final/initial is 0.05–0.10 over seeds 0–4: the 0.2 bound holds by 2×
    losses = []
    for _ in range(30):
        loss = (x @ w.t() - y).square().mean()
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < 0.2 * losses[0]


# ---------------------------------------------------------------- the Muon / AdamW split


CONFIGS = [
    dict(),
    dict(tie_embeddings=False),
    dict(norm="rmsnorm", mlp="swiglu", pos="rope", bias=False, tie_embeddings=False, qk_norm=True),
    dict(n_experts=3, moe_every=2, pos="sinusoidal"),
]


@pytest.mark.parametrize("overrides", CONFIGS)
def test_the_split_assigns_each_gpt_parameter_to_exactly_one_group(overrides):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=37, context_length=16, n_layer=2, n_head=2, d_model=16, **overrides))
    muon, adamw = muon_param_groups(model)
    ids = [id(p) for p in muon + adamw]
    assert len(ids) == len(set(ids)) and set(ids) == {id(p) for p in model.parameters()}
    name_of = {id(p): n for n, p in model.named_parameters()}  # a tied head is listed as tok_emb.weight
    muon_names = {name_of[id(p)] for p in muon}
    expected = {n for n, p in model.named_parameters() if p.dim() == 2 and n.startswith("blocks.")}
    assert muon_names == expected  # every hidden matrix (qkv, proj, MLP or experts and router), nothing else
    assert {"tok_emb.weight"} <= {name_of[id(p)] for p in adamw}
    assert all(p.dim() == 1 for p in adamw if name_of[id(p)].startswith("blocks."))


def test_muon_with_adamw_trains_a_tiny_gpt():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=37, context_length=16, n_layer=2, n_head=2, d_model=16, tie_embeddings=False))
    muon, adamw = muon_with_adamw(model, lr=0.02, adamw_lr=3e-3)
    assert isinstance(muon, Muon) and isinstance(adamw, AdamW)
    idx = torch.randint(0, 37, (4, 16), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(15):
        logits = model(idx[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 37), idx[:, 1:].reshape(-1))
        losses.append(loss.item())
        for opt in (muon, adamw):
            opt.zero_grad()
        loss.backward()
        for opt in (muon, adamw):
            opt.step()
    assert losses[-1] < losses[0] - 0.5
