"""Notebook 02's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong shape or NaN get a clear line."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from grading_helpers import assert_fails, assert_passes, stub

from minillm import embeddings
from minillm.grading import nb02_embeddings_and_positions as nb02


# ------------------------------------------------------------------------------------------- the lookup
def embed_one_hot(E, ids):
    return F.one_hot(ids, E.shape[0]).to(E.dtype) @ E


def embed_columns(E, ids):
    return E[:, ids].permute(1, 2, 0)  # column t of E instead of row t


def embed_flat(E, ids):
    return E[ids.reshape(-1)]


def embed_one_based(E, ids):
    return E[(ids - 1) % E.shape[0]]


def test_embed_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb02.embed, lambda E, ids: F.embedding(ids, E), capsys)
    assert_passes(nb02.embed, lambda E, ids: E[ids], capsys)
    assert_passes(nb02.embed, embed_one_hot, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (embed_columns, "rows and columns swapped"),
        (embed_flat, "the batch axis flattened away"),
        (embed_one_based, "ids counted from 1"),
    ],
)
def test_embed_names_the_mistake(wrong, name, capsys):
    assert_fails(nb02.embed, wrong, capsys, says=f"Looks like {name}")


def test_embed_stub_raising_shape_nan_and_no_gradient(capsys):
    assert_fails(nb02.embed, stub("embed"), capsys, says="embed is not written yet", fallback=nb02.EMBED.fallback)
    assert_fails(nb02.embed, lambda E, ids: E.lookup(ids), capsys, says="raised AttributeError")
    assert_fails(nb02.embed, lambda E, ids: E[ids][..., :-1], capsys, says="returned shape")
    assert_fails(nb02.embed, lambda E, ids: E[ids] * math.nan, capsys, says="returned NaN")
    out = assert_fails(nb02.embed, lambda E, ids: E[ids].detach(), capsys, says="raised RuntimeError")
    assert "gradient" in out


def test_embed_fallback_runs_the_notebooks_call(capsys):
    returned, _ = nb02.embed(stub("embed")), capsys.readouterr()
    E, ids = torch.randn(10, 4), torch.tensor([[3, 1, 4, 1, 5]])
    x = returned(E, ids)
    assert x.shape == (1, 5, 4) and torch.equal(x, E[ids])


# ------------------------------------------------------------------------------------------- sinusoidal
def sinusoidal_vectorised(num_positions, dim):
    p = torch.arange(num_positions, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    pe = torch.empty(num_positions, dim, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(p * freq), torch.cos(p * freq)
    return pe.float()


def sinusoidal_cos_first(num_positions, dim):
    pe = sinusoidal_vectorised(num_positions, dim)
    return pe.view(num_positions, dim // 2, 2).flip(-1).reshape(num_positions, dim)


def sinusoidal_halves(num_positions, dim):
    p = torch.arange(num_positions).float()[:, None]
    freq = 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim)
    return torch.cat([torch.sin(p * freq), torch.cos(p * freq)], dim=1)


def sinusoidal_exponent_i(num_positions, dim):
    pe = torch.zeros(num_positions, dim)
    p = torch.arange(num_positions).float()
    for i in range(dim // 2):
        freq = 1.0 / 10000 ** (i / dim)
        pe[:, 2 * i], pe[:, 2 * i + 1] = torch.sin(p * freq), torch.cos(p * freq)
    return pe


def sinusoidal_times_power(num_positions, dim):
    p = torch.arange(num_positions, dtype=torch.float64)[:, None]
    angle = p * 10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(num_positions, dim).float()


def sinusoidal_one_based(num_positions, dim):
    return sinusoidal_vectorised(num_positions + 1, dim)[1:]


def test_sinusoidal_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb02.sinusoidal, embeddings.sinusoidal_positions, capsys)
    assert_passes(nb02.sinusoidal, sinusoidal_vectorised, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (sinusoidal_cos_first, "sin and cos swapped"),
        (sinusoidal_halves, "sin and cos in two halves, not interleaved"),
        (sinusoidal_exponent_i, "the frequency exponent i/d, not 2i/d"),
        (sinusoidal_times_power, "the frequency inverted"),
        (sinusoidal_one_based, "positions counted from 1"),
    ],
)
def test_sinusoidal_names_the_mistake(wrong, name, capsys):
    assert_fails(nb02.sinusoidal, wrong, capsys, says=f"Looks like {name}")


def test_sinusoidal_stub_shape_dtype_nan(capsys):
    assert_fails(
        nb02.sinusoidal,
        stub("sinusoidal"),
        capsys,
        says="is not written yet",
        fallback=embeddings.sinusoidal_positions,
    )
    assert_fails(nb02.sinusoidal, lambda n, d: sinusoidal_vectorised(n, d).T, capsys, says="returned shape")
    assert_fails(nb02.sinusoidal, lambda n, d: sinusoidal_vectorised(n, d).double(), capsys, says="returned dtype")
    assert_fails(nb02.sinusoidal, lambda n, d: sinusoidal_vectorised(n, d) / 0 * 0, capsys, says="returned NaN")
    assert_fails(nb02.sinusoidal, lambda n, d: [[0.0] * d] * n, capsys, says="expected a tensor")


# ------------------------------------------------------------------------------------------------- RoPE
def rope_half(x, positions, base=10000.0):
    """A learner's half-split RoPE, written with rotate_half."""
    h = x.shape[-1]
    theta = 1.0 / base ** (torch.arange(0, h, 2, dtype=torch.float64) / h)
    angle = torch.cat([positions[:, None] * theta] * 2, dim=-1)
    rotated = torch.cat([-x[..., h // 2 :], x[..., : h // 2]], dim=-1)
    return (x * angle.cos() + rotated * angle.sin()).to(x.dtype)


def rope_notebook(x, positions, base=10000.0):
    h = x.shape[-1]
    theta = base ** (-torch.arange(0, h, 2).float() / h)
    angle = positions.float()[:, None] * theta[None, :]
    a, b = x[..., : h // 2], x[..., h // 2 :]
    return torch.cat([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], dim=-1)


def rope_neighbours(x, positions, base=10000.0):
    h = x.shape[-1]
    theta = base ** (-torch.arange(0, h, 2, dtype=torch.float64) / h)
    angle = positions[:, None] * theta
    out = x.clone()
    out[..., 0::2] = x[..., 0::2] * angle.cos() - x[..., 1::2] * angle.sin()
    out[..., 1::2] = x[..., 0::2] * angle.sin() + x[..., 1::2] * angle.cos()
    return out


def rope_clockwise(x, positions, base=10000.0):
    h = x.shape[-1]
    theta = base ** (-torch.arange(0, h, 2, dtype=torch.float64) / h)
    c, s = (positions[:, None] * theta).cos(), (positions[:, None] * theta).sin()
    a, b = x[..., : h // 2], x[..., h // 2 :]
    return torch.cat([a * c + b * s, b * c - a * s], dim=-1)


def rope_slow_clocks(x, positions, base=10000.0):
    h = x.shape[-1]
    theta = base ** (-torch.arange(h // 2, dtype=torch.float64) / h)
    c, s = (positions[:, None] * theta).cos(), (positions[:, None] * theta).sin()
    a, b = x[..., : h // 2], x[..., h // 2 :]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)


def rope_counts_rows(x, positions, base=10000.0):
    return rope_half(x, torch.arange(x.shape[-2]), base)


def test_rope_reference_and_learners_versions_pass(capsys):
    assert_passes(nb02.rope, nb02.ROPE.fallback, capsys)
    assert_passes(nb02.rope, rope_half, capsys)
    assert_passes(nb02.rope, rope_notebook, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (rope_neighbours, "RoPE pairs in the interleaved layout"),
        (rope_clockwise, "rotating by −θ"),
        (rope_slow_clocks, "the frequency exponent i/h, not 2i/h"),
        (rope_counts_rows, "the positions argument ignored"),
    ],
)
def test_rope_names_the_mistake(wrong, name, capsys):
    assert_fails(nb02.rope, wrong, capsys, says=f"Looks like {name}")


def test_rope_stub_raising_shape_nan(capsys):
    assert_fails(nb02.rope, stub("rope"), capsys, says="rope is not written yet", fallback=nb02.ROPE.fallback)
    assert_fails(nb02.rope, lambda x, positions, base=1e4: x @ x, capsys, says="raised RuntimeError")
    assert_fails(nb02.rope, lambda x, positions, base=1e4: rope_half(x, positions)[..., 0], capsys, says="shape")
    assert_fails(nb02.rope, lambda x, positions, base=1e4: rope_half(x, positions) * math.nan, capsys, says="NaN")


def test_rope_fallback_runs_the_notebooks_calls(capsys):
    fallback, _ = nb02.rope(stub("rope")), capsys.readouterr()
    q = torch.randn(16)
    for m in (0, 5, 105):  # the notebook rotates one vector at an arbitrary position
        where = torch.tensor([m])
        assert torch.allclose(fallback(q[None], where), rope_notebook(q[None], where), atol=1e-5)
    x = torch.randn(2, 3, 20, 16)
    got = fallback(x, torch.arange(20))
    assert got.dtype == torch.float32 and torch.allclose(got, embeddings.RotaryEmbedding(16, 20)(x), atol=1e-6)


# ------------------------------------------------------------------------------ exercise 2: interleaved RoPE
def interleaved_notebook(x, positions, base=10000.0):
    """The exercise's solution: float32 angles, neighbours written back into their own coordinates."""
    h = x.shape[-1]
    theta = base ** (-torch.arange(0, h, 2).float() / h)
    angle = positions.float()[:, None] * theta[None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * angle.cos() - b * angle.sin()
    out[..., 1::2] = a * angle.sin() + b * angle.cos()
    return out


def interleaved_via_half_split(x, positions, base=10000.0):
    """A learner's version that reorders the coordinates and reuses the half-split rotation."""
    h = x.shape[-1]
    perm = torch.cat([torch.arange(0, h, 2), torch.arange(1, h, 2)])
    return rope_half(x[..., perm], positions, base)[..., torch.argsort(perm)]


def interleaved_complex(x, positions, base=10000.0):
    h = x.shape[-1]
    theta = 1.0 / base ** (torch.arange(0, h, 2, dtype=torch.float64) / h)
    turn = torch.polar(torch.ones(len(positions), h // 2, dtype=torch.float64), positions[:, None] * theta)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous()) * turn
    return torch.view_as_real(z).reshape(x.shape).to(x.dtype)


def interleaved_not_put_back(x, positions, base=10000.0):
    h = x.shape[-1]
    theta = base ** (-torch.arange(0, h, 2, dtype=torch.float64) / h)
    c, s = (positions[:, None] * theta).cos(), (positions[:, None] * theta).sin()
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)


def interleaved_angles_as_blocks(x, positions, base=10000.0):
    h = x.shape[-1]
    theta = base ** (-torch.arange(0, h, 2, dtype=torch.float64) / h)
    angle = (positions[:, None] * theta).repeat(1, 2)  # [θ_0 … θ_{h/2-1}, θ_0 …], not θ_0, θ_0, θ_1, θ_1, …
    partner = torch.empty_like(x)
    partner[..., 0::2], partner[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    return x * angle.cos() + partner * angle.sin()


def interleaved_clockwise(x, positions, base=10000.0):
    h = x.shape[-1]
    theta = base ** (-torch.arange(0, h, 2, dtype=torch.float64) / h)
    c, s = (positions[:, None] * theta).cos(), (positions[:, None] * theta).sin()
    out = x.clone()
    out[..., 0::2] = x[..., 0::2] * c + x[..., 1::2] * s
    out[..., 1::2] = x[..., 1::2] * c - x[..., 0::2] * s
    return out


def interleaved_slow_clocks(x, positions, base=10000.0):
    h = x.shape[-1]
    out = x.clone()
    for i in range(h // 2):
        angle = positions.double() * base ** (-i / h)
        a, b = x[..., 2 * i], x[..., 2 * i + 1]
        out[..., 2 * i], out[..., 2 * i + 1] = a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()
    return out


def test_rope_interleaved_reference_and_learners_versions_pass(capsys):
    assert_passes(nb02.rope_interleaved, nb02.ROPE_INTERLEAVED.fallback, capsys)
    assert_passes(nb02.rope_interleaved, interleaved_notebook, capsys)
    assert_passes(nb02.rope_interleaved, interleaved_via_half_split, capsys)
    assert_passes(nb02.rope_interleaved, interleaved_complex, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (rope_notebook, "RoPE pairs in the half-split layout"),
        (interleaved_not_put_back, "the rotated pairs left in two halves"),
        (interleaved_angles_as_blocks, "the angles laid out in halves, not per pair"),
        (interleaved_clockwise, "rotating by −θ"),
        (interleaved_slow_clocks, "the frequency exponent i/h, not 2i/h"),
    ],
)
def test_rope_interleaved_names_the_mistake(wrong, name, capsys):
    assert_fails(nb02.rope_interleaved, wrong, capsys, says=f"Looks like {name}")


def test_rope_interleaved_stub_raising_shape_nan(capsys):
    fallback = nb02.ROPE_INTERLEAVED.fallback
    grader = nb02.rope_interleaved
    assert_fails(
        grader, stub("rope_interleaved"), capsys, says="rope_interleaved is not written yet", fallback=fallback
    )
    assert_fails(grader, lambda x, positions, base=1e4: x.view(-1, 2, 2) @ x, capsys, says="raised RuntimeError")
    assert_fails(
        grader, lambda x, positions, base=1e4: interleaved_notebook(x, positions)[..., ::2], capsys, says="shape"
    )
    assert_fails(
        grader, lambda x, positions, base=1e4: interleaved_notebook(x, positions).float(), capsys, says="dtype"
    )
    assert_fails(
        grader, lambda x, positions, base=1e4: interleaved_notebook(x, positions) * math.nan, capsys, says="NaN"
    )


def test_rope_interleaved_fallback_runs_the_exercises_check(capsys):
    fallback, _ = nb02.rope_interleaved(stub("rope_interleaved")), capsys.readouterr()
    x, positions = torch.randn(2, 3, 20, 16), torch.arange(20)
    perm = torch.cat([torch.arange(0, 16, 2), torch.arange(1, 16, 2)])  # the solution cell's comparison
    got = fallback(x, positions)
    assert got.dtype == torch.float32 and got.shape == x.shape
    assert (got - rope_notebook(x[..., perm], positions)[..., torch.argsort(perm)]).abs().max() < 1e-5
    assert torch.allclose(got, embeddings.RotaryEmbedding(16, 20, style="interleaved")(x), atol=1e-6)
