"""Tests for minillm.embeddings: token lookup, learned/sinusoidal positions and RoPE."""

from __future__ import annotations

import math

import pytest
import torch

from minillm.embeddings import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEmbedding,
    apply_rope,
    rope_angles,
    sinusoidal_positions,
)


def test_sinusoidal_matches_the_paper_formula_in_float64():
    length, dim = 50, 16
    pe = sinusoidal_positions(length, dim)
    assert pe.shape == (length, dim) and pe.dtype == torch.float32
    want = torch.tensor(
        [
            [
                math.sin(p / 10000 ** (c / dim)) if c % 2 == 0 else math.cos(p / 10000 ** ((c - 1) / dim))
                for c in range(dim)
            ]
            for p in range(length)
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(pe.double(), want, atol=1e-6, rtol=0)
    assert torch.equal(pe[0, 0::2], torch.zeros(8)) and torch.equal(pe[0, 1::2], torch.ones(8))


def test_sinusoidal_offsets_are_a_linear_rotation():
    # The paper's motivation: PE[p + k] is a fixed linear map (a rotation per pair) of PE[p]:
    # [sin a, cos a] @ [[cos b, -sin b], [sin b, cos b]] = [sin(a + b), cos(a + b)].
    pe = sinusoidal_positions(40, 8).double()
    k = 5
    freqs = 10000 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    for i, w in enumerate(freqs.tolist()):
        rot = torch.tensor(
            [[math.cos(k * w), -math.sin(k * w)], [math.sin(k * w), math.cos(k * w)]], dtype=torch.float64
        )
        pair = pe[:, 2 * i : 2 * i + 2]
        torch.testing.assert_close(pair[:-k] @ rot, pair[k:], atol=1e-6, rtol=0)


def test_position_modules_slice_by_start():
    learned = LearnedPositionalEmbedding(16, 8)
    assert torch.equal(learned(4, start=3), learned.weight[3:7])
    fixed = SinusoidalPositionalEmbedding(16, 8)
    assert list(fixed.parameters()) == [] and fixed.state_dict() == {}
    torch.testing.assert_close(fixed(5, start=2), sinusoidal_positions(16, 8)[2:7], atol=0, rtol=0)
    for module in (learned, fixed):
        with pytest.raises(ValueError, match="positions 14..17 exceed the context length 16"):
            module(4, start=14)


def test_bad_shapes_are_clear_errors():
    with pytest.raises(ValueError, match="positive even dim, got 7"):
        sinusoidal_positions(4, 7)
    with pytest.raises(ValueError, match="positive even head_dim, got 5"):
        rope_angles(4, 5)


def rope_complex_float64(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE as complex multiplication: pair (i, i+h/2) is a + ib, multiplied by e^{i·p·base^(-2i/h)}."""
    h = x.shape[-1]
    theta = base ** (-torch.arange(0, h, 2, dtype=torch.float64) / h)
    rot = torch.polar(torch.ones(len(positions), h // 2, dtype=torch.float64), positions.double()[:, None] * theta)
    z = torch.complex(x[..., : h // 2].double(), x[..., h // 2 :].double()) * rot
    return torch.cat([z.real, z.imag], dim=-1)


def test_rope_matches_complex_rotation_and_keeps_norms():
    x = torch.randn(2, 3, 10, 8, generator=torch.Generator().manual_seed(0))
    rope = RotaryEmbedding(8, 32)
    got = rope(x, start=5)
    torch.testing.assert_close(got.double(), rope_complex_float64(x, torch.arange(5, 15)), atol=1e-5, rtol=0)
    torch.testing.assert_close(got.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(rope(x, 0)[..., :1, :], x[..., :1, :], atol=0, rtol=0)  # position 0: no turn
    cos, sin = rope_angles(10, 8, start=5)
    torch.testing.assert_close(apply_rope(x, cos, sin), got, atol=1e-6, rtol=0)


def test_rope_scores_depend_only_on_relative_position():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(16, generator=g), torch.randn(16, generator=g)
    rope = RotaryEmbedding(16, 64)

    def score(m: int, n: int) -> float:
        qm = rope(q.view(1, 16), start=m)
        kn = rope(k.view(1, 16), start=n)
        return float((qm * kn).sum())

    for m, n in [(3, 1), (10, 10), (7, 20)]:
        for shift in (1, 5, 30):
            assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-5)
    assert score(3, 1) != pytest.approx(score(4, 1), abs=1e-3)  # but it does depend on the offset


def test_rope_rejects_mismatched_angles():
    cos, sin = rope_angles(4, 8)
    with pytest.raises(ValueError, match="do not match"):
        apply_rope(torch.zeros(5, 8), cos, sin)
