"""Graders for notebook 02: the token-embedding lookup, sinusoidal positions, RoPE, and exercise 2's RoPE with
the paper's interleaved pairing.

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s (or PyTorch's) otherwise. The wrong variants below
are the mistakes the graders recognise by their results; they are written here only to be recognised.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from minillm import embeddings
from minillm.grading.core import Build, Mistake, Probe, grade

BUILDS = ("embed", "sinusoidal", "rope", "rope_interleaved")

F64 = torch.float64


# ---------------------------------------------------------------------------------------------- the lookup
def _table(seed: int, vocab: int, dim: int) -> torch.Tensor:
    return torch.randn(vocab, dim, generator=torch.Generator().manual_seed(seed), dtype=F64)


def _lookup_case(seed: int, vocab: int, dim: int, ids: list[list[int]], what: str) -> Probe:
    def run(embed: Any) -> torch.Tensor:
        return embed(_table(seed, vocab, dim), torch.tensor(ids))

    return Probe(f"a {vocab}×{dim} table, {what}", run)


def _lookup_gradient(seed: int) -> Probe:
    """The vectors and the table's gradient: only the rows of ids that occur get one, repeated ids add up."""

    def run(embed: Any) -> dict[str, torch.Tensor | None]:
        table = _table(seed, 10, 4).requires_grad_()
        ids = torch.tensor([[3, 1, 4, 1, 5]])
        out = embed(table, ids)
        weights = torch.randn(1, 5, 4, generator=torch.Generator().manual_seed(seed + 1), dtype=F64)
        (out * weights).sum().backward()
        return {"vectors": out.detach(), "gradient of E": table.grad}

    return Probe("a 10×4 table, the vectors and the table's gradient (id 1 twice)", run)


def _reference_lookup(E: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.embedding(ids, E)


def _transposed(E, ids):
    return E.T[ids]


def _flattened(E, ids):
    return E[ids.flatten()]


def _from_one(E, ids):
    return E[ids - 1]


EMBED = Build(
    name="embed",
    what="the token-embedding lookup",
    truth=_reference_lookup,
    truth_name="torch.nn.functional.embedding",
    fallback=_reference_lookup,
    fallback_name="torch.nn.functional.embedding (nn.Embedding's lookup)",
    probes=(
        _lookup_case(1, 6, 6, [[0, 5, 5, 2], [1, 1, 3, 4]], "ids [2, 4] with repeats"),
        _lookup_case(2, 50, 8, [[7, 49, 0], [13, 13, 21], [2, 30, 44]], "ids [3, 3]"),
        _lookup_gradient(3),
    ),
    mistakes=(
        Mistake(
            "rows and columns swapped",
            "token id t owns ROW t of E [V, d]: E[ids], not E.T[ids] (nor E[:, ids]).",
            _transposed,
        ),
        Mistake(
            "the batch axis flattened away",
            "index with ids as they are: E[ids] of ids [B, T] is already [B, T, d].",
            _flattened,
        ),
        Mistake(
            "ids counted from 1",
            "ids start at 0 and index E directly: E[ids], not E[ids - 1].",
            _from_one,
        ),
    ),
    rtol=0.0,
    atol=1e-12,
    what_is_compared="vectors",
)


def embed(learner: Any) -> Any:
    """Grade ``embed(E, ids)``: E [V, d], ids [B, T] int64 → [B, T, d], row ids[b, t] of E (differentiable)."""
    return grade(EMBED, learner)


# -------------------------------------------------------------------------------------------- sinusoidal
def _sinusoid_case(num_positions: int, dim: int) -> Probe:
    def run(sinusoidal: Any) -> torch.Tensor:
        return sinusoidal(num_positions, dim)

    return Probe(f"{num_positions} positions, dim {dim}", run)


def _reference_sinusoids(num_positions: int, dim: int) -> torch.Tensor:
    """The paper's formula column by column in float64: column c uses the pair's exponent c − c mod 2."""
    p = torch.arange(num_positions, dtype=F64)[:, None]
    column = torch.arange(dim)
    exponent = (column - column % 2).to(F64) / dim  # 2i/d for both columns 2i and 2i + 1
    angle = p / 10000.0**exponent
    return torch.where(column % 2 == 0, torch.sin(angle), torch.cos(angle)).float()


def _sinusoids(num_positions, dim, *, swap=False, halves=False, exponent_i=False, times=False, start=0):
    p = torch.arange(start, start + num_positions, dtype=F64)[:, None]
    i = torch.arange(dim // 2, dtype=F64)
    exponent = i / dim if exponent_i else 2 * i / dim
    angle = p * 10000.0**exponent if times else p / 10000.0**exponent
    first, second = (angle.cos(), angle.sin()) if swap else (angle.sin(), angle.cos())
    if halves:
        return torch.cat([first, second], dim=-1).float()
    return torch.stack([first, second], dim=-1).flatten(-2).float()


def _sin_cos_swapped(num_positions, dim):
    return _sinusoids(num_positions, dim, swap=True)


def _sin_cos_halves(num_positions, dim):
    return _sinusoids(num_positions, dim, halves=True)


def _exponent_i_over_d(num_positions, dim):
    return _sinusoids(num_positions, dim, exponent_i=True)


def _frequency_inverted(num_positions, dim):
    return _sinusoids(num_positions, dim, times=True)


def _positions_from_one(num_positions, dim):
    return _sinusoids(num_positions, dim, start=1)


SINUSOIDAL = Build(
    name="sinusoidal",
    what="the sinusoidal position table",
    truth=_reference_sinusoids,
    truth_name="the paper's formula in float64",
    fallback=embeddings.sinusoidal_positions,
    fallback_name="minillm.embeddings.sinusoidal_positions",
    probes=(_sinusoid_case(12, 8), _sinusoid_case(40, 32), _sinusoid_case(7, 6)),
    mistakes=(
        Mistake("sin and cos swapped", "even columns hold sin(p·ω_i), odd columns cos(p·ω_i).", _sin_cos_swapped),
        Mistake(
            "sin and cos in two halves, not interleaved",
            "pair i sits in columns 2i (sin) and 2i + 1 (cos), side by side, not in the first and second half.",
            _sin_cos_halves,
        ),
        Mistake(
            "the frequency exponent i/d, not 2i/d",
            "pair i (columns 2i and 2i + 1) turns at ω_i = 1 / 10000^(2i/d).",
            _exponent_i_over_d,
        ),
        Mistake(
            "the frequency inverted",
            "the angle is p / 10000^(2i/d): divide by the power of 10000, do not multiply.",
            _frequency_inverted,
        ),
        Mistake("positions counted from 1", "the first row is position 0: sin 0 = 0, cos 0 = 1.", _positions_from_one),
    ),
    rtol=0.0,
    atol=2e-5,  # the notebook's float32 angles p·ω are off by up to ~p·6e-8
    what_is_compared="table",
)


def sinusoidal(learner: Any) -> Any:
    """Grade ``sinusoidal(num_positions, dim)`` → [num_positions, dim] float32, sin/cos interleaved."""
    return grade(SINUSOIDAL, learner)


# -------------------------------------------------------------------------------------------------- RoPE
def _rope_case(seed: int, shape: tuple[int, ...], positions: list[int], base: float | None = None) -> Probe:
    def run(rope: Any) -> torch.Tensor:
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)
        where = torch.tensor(positions)
        return rope(x, where) if base is None else rope(x, where, base=base)

    described = f"x {list(shape)} float64, positions {positions}"
    return Probe(described + (f", base {base:g}" if base is not None else ""), run)


def _reference_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Half-split RoPE as a complex multiplication in float64: (a + ib)·e^{ipθ_i}, a = x[:h/2], b = x[h/2:]."""
    h = x.shape[-1]
    theta = base ** (-torch.arange(0, h, 2, dtype=F64) / h)
    turn = torch.polar(torch.ones(len(positions), h // 2, dtype=F64), positions.to(F64)[:, None] * theta)
    z = torch.complex(x[..., : h // 2].to(F64), x[..., h // 2 :].to(F64)) * turn
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)


def _library_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """minillm's tables and rotation at arbitrary positions (``RotaryEmbedding`` takes a contiguous range)."""
    positions = torch.as_tensor(positions)
    cos, sin = embeddings.rope_angles(int(positions.max()) + 1 if positions.numel() else 0, x.shape[-1], base)
    return embeddings.apply_rope(x, cos[positions], sin[positions])


def _rotate(x, positions, base=10000.0, *, interleaved=False, sign=1.0, exponent_i=False, ignore_positions=False):
    h = x.shape[-1]
    exponent = torch.arange(h // 2, dtype=F64) / h if exponent_i else torch.arange(0, h, 2, dtype=F64) / h
    theta = base**-exponent
    where = torch.arange(x.shape[-2]) if ignore_positions else positions
    angle = where.to(F64)[:, None] * theta[None, :]
    cos, sin = angle.cos(), sign * angle.sin()
    a, b = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., : h // 2], x[..., h // 2 :])
    first, second = a * cos - b * sin, a * sin + b * cos
    if interleaved:
        return torch.stack([first, second], dim=-1).flatten(-2)
    return torch.cat([first, second], dim=-1)


def _interleaved(x, positions, base=10000.0):
    return _rotate(x, positions, base, interleaved=True)


def _backwards(x, positions, base=10000.0):
    return _rotate(x, positions, base, sign=-1.0)


def _rope_exponent_i(x, positions, base=10000.0):
    return _rotate(x, positions, base, exponent_i=True)


def _positions_ignored(x, positions, base=10000.0):
    return _rotate(x, positions, base, ignore_positions=True)


ROPE = Build(
    name="rope",
    what="the rotary position embedding",
    truth=_reference_rope,
    truth_name="RoPE as complex multiplication in float64",
    fallback=_library_rope,
    fallback_name="minillm.embeddings.apply_rope",
    probes=(
        _rope_case(1, (2, 3, 6, 8), [0, 1, 2, 3, 4, 5]),
        _rope_case(2, (5, 16), [0, 7, 3, 12, 30]),
        _rope_case(3, (1, 2, 4, 10), [10, 11, 12, 13], base=500.0),
    ),
    mistakes=(
        Mistake(
            "RoPE pairs in the interleaved layout",
            "this notebook pairs x[i] with x[i + h/2] (half-split), not neighbours x[2i], x[2i + 1].",
            _interleaved,
        ),
        Mistake(
            "rotating by −θ",
            "(a, b) → (a·cos − b·sin, a·sin + b·cos): −sin in the first half, +sin in the second.",
            _backwards,
        ),
        Mistake(
            "the frequency exponent i/h, not 2i/h",
            "θ_i = base^(−2i/h) for i = 0 … h/2 − 1, i.e. base ** (−arange(0, h, 2) / h).",
            _rope_exponent_i,
        ),
        Mistake(
            "the positions argument ignored",
            "rotate row t by positions[t]·θ: the positions need not be 0, 1, …, T − 1.",
            _positions_ignored,
        ),
    ),
    rtol=0.0,
    atol=1e-5,  # the notebook computes the angles in float32
    what_is_compared="rotated vectors",
)


def rope(learner: Any) -> Any:
    """Grade ``rope(x, positions, base=10000.0)``: x [..., T, h], positions [T] → x rotated, same shape and dtype."""
    return grade(ROPE, learner)


# ------------------------------------------------------------------------ exercise 2: interleaved RoPE
def _reference_rope_interleaved(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Neighbours (x[2i], x[2i + 1]) as one complex number x[2i] + i·x[2i + 1], times e^{ipθ_i}, in float64."""
    h = x.shape[-1]
    theta = base ** (-torch.arange(0, h, 2, dtype=F64) / h)
    turn = torch.polar(torch.ones(len(positions), h // 2, dtype=F64), positions.to(F64)[:, None] * theta)
    z = torch.view_as_complex(x.to(F64).reshape(*x.shape[:-1], h // 2, 2).contiguous()) * turn
    return torch.view_as_real(z).flatten(-2).to(x.dtype)


def _library_rope_interleaved(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """minillm's interleaved tables and rotation (``style="interleaved"``) at arbitrary positions."""
    positions = torch.as_tensor(positions)
    length = int(positions.max()) + 1 if positions.numel() else 0
    cos, sin = embeddings.rope_angles(length, x.shape[-1], base, style="interleaved")
    return embeddings.apply_rope(x, cos[positions], sin[positions], style="interleaved")


def _half_split(x, positions, base=10000.0):
    return _rotate(x, positions, base)


def _pairs_left_in_halves(x, positions, base=10000.0):
    """Neighbours rotated, but the results concatenated (all first coordinates, then all second ones)."""
    return _rotate(torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1), positions, base)


def _interleaved_backwards(x, positions, base=10000.0):
    return _rotate(x, positions, base, interleaved=True, sign=-1.0)


def _interleaved_exponent_i(x, positions, base=10000.0):
    return _rotate(x, positions, base, interleaved=True, exponent_i=True)


def _angles_in_halves(x, positions, base=10000.0):
    """The neighbours' partner (−x[2i + 1], x[2i]) with the half-split angle table cat([θ, θ]), not each θ twice."""
    h = x.shape[-1]
    theta = base ** (-torch.arange(0, h, 2, dtype=F64) / h)
    angle = positions.to(F64)[:, None] * theta[None, :]
    angle = torch.cat([angle, angle], dim=-1)
    partner = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    return x * angle.cos() + partner * angle.sin()


ROPE_INTERLEAVED = Build(
    name="rope_interleaved",
    what="RoPE with the interleaved pairing",
    truth=_reference_rope_interleaved,
    truth_name="neighbour pairs as complex numbers (torch.view_as_complex) in float64",
    fallback=_library_rope_interleaved,
    fallback_name='minillm.embeddings.apply_rope(..., style="interleaved")',
    probes=(
        _rope_case(4, (2, 3, 20, 16), list(range(20))),
        _rope_case(2, (5, 16), [0, 7, 3, 12, 30]),
        _rope_case(3, (1, 2, 4, 10), [10, 11, 12, 13], base=500.0),
    ),
    mistakes=(
        Mistake(
            "RoPE pairs in the half-split layout",
            "this exercise pairs neighbours x[2i], x[2i + 1], not x[i] with x[i + h/2] as the notebook's rope does.",
            _half_split,
        ),
        Mistake(
            "the rotated pairs left in two halves",
            "put each pair back where it came from: out[..., 0::2] = a·cos − b·sin, out[..., 1::2] = a·sin + b·cos.",
            _pairs_left_in_halves,
        ),
        Mistake(
            "the angles laid out in halves, not per pair",
            "coordinates 2i and 2i + 1 share the angle p·θ_i: repeat each angle twice in a row (repeat_interleave).",
            _angles_in_halves,
        ),
        Mistake(
            "rotating by −θ",
            "(a, b) → (a·cos − b·sin, a·sin + b·cos): −sin in the even coordinates, +sin in the odd ones.",
            _interleaved_backwards,
        ),
        Mistake(
            "the frequency exponent i/h, not 2i/h",
            "θ_i = base^(−2i/h) for i = 0 … h/2 − 1, i.e. base ** (−arange(0, h, 2) / h).",
            _interleaved_exponent_i,
        ),
    ),
    rtol=0.0,
    atol=1e-5,  # the exercise computes the angles in float32
    what_is_compared="rotated vectors",
)


def rope_interleaved(learner: Any) -> Any:
    """Grade exercise 2's ``rope_interleaved(x, positions, base=10000.0)``: x [..., T, h], positions [T] → x with
    each neighbour pair (x[2i], x[2i + 1]) of row t turned by positions[t]·θ_i, same shape and dtype."""
    return grade(ROPE_INTERLEAVED, learner)
