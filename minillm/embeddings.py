"""Positions: how a transformer learns where each token sits (a token's own vector is a row of ``nn.Embedding``).

Attention on its own treats its input as a *set*: permute the tokens and the outputs are permuted the
same way. Order has to be injected. Two families:

* **absolute** positions — a vector per position that is *added* to the token vector before the first
  block: learned (``LearnedPositionalEmbedding``, GPT-2) or fixed sinusoids
  (``sinusoidal_positions``, "Attention Is All You Need", §3.5);
* **rotary** positions (RoPE, Su et al. 2021) — queries and keys are *rotated* by an angle proportional
  to their position inside every attention layer, so the score q·k depends only on the offset between
  the two positions (``RotaryEmbedding``, ``apply_rope``).

RoPE pairs the coordinates of a head and turns pair ``i`` by the angle ``pos · base^(−2i/head_dim)``. Two
pairings are in use, chosen by ``style`` (:data:`ROPE_STYLES`):

* ``"half"`` (the default): coordinate ``i`` with ``i + head_dim/2`` — GPT-NeoX and Hugging Face Llama;
* ``"interleaved"``: neighbours ``2i`` and ``2i+1`` — the RoFormer paper, GPT-J and Meta's original Llama code.

They are the same rotation up to a fixed permutation of the head's coordinates (even ones first, then odd
ones), so a model trained with one can be converted to the other by permuting its q and k projection rows
(``minillm.interop`` does this to export an interleaved model as a half-split Llama).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "LearnedPositionalEmbedding",
    "SinusoidalPositionalEmbedding",
    "sinusoidal_positions",
    "rope_angles",
    "apply_rope",
    "RotaryEmbedding",
    "POSITION_SCHEMES",
    "ROPE_STYLES",
    "rope_permutation",
]

#: Position schemes the model accepts.
POSITION_SCHEMES = ("learned", "sinusoidal", "rope", "none")

#: RoPE pairings: "half" pairs coordinate i with i + head_dim/2, "interleaved" pairs 2i with 2i+1.
ROPE_STYLES = ("half", "interleaved")


def _check_style(style: str) -> None:
    if style not in ROPE_STYLES:
        raise ValueError(f"RoPE style must be one of {ROPE_STYLES}, got {style!r}")


def _angles(start: int, length: int, dim: int, base: float) -> torch.Tensor:
    """[length, dim/2] float64 angles p·base^(−2i/dim) of positions p = start..start+length−1 and pairs i:
    the clock frequencies shared by the sinusoidal encodings and RoPE."""
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return torch.arange(start, start + length, dtype=torch.float64)[:, None] * inv_freq[None, :]


def sinusoidal_positions(length: int, dim: int, base: float = 10000.0) -> torch.Tensor:
    """The original Transformer's fixed encodings, a [length, dim] float32 tensor.

    PE[p, 2i] = sin(p / base^(2i/dim)),  PE[p, 2i+1] = cos(p / base^(2i/dim)). Each pair of columns is a
    clock at its own frequency, from one turn per 2π positions down to one per 2π·base positions.
    """
    if not isinstance(dim, int) or dim <= 0 or dim % 2:
        raise ValueError(f"sinusoidal positions need a positive even dim, got {dim!r}")
    if not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be a non-negative int, got {length!r}")
    angles = _angles(0, length, dim, base)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2).float()  # columns sin, cos, sin, ...


class LearnedPositionalEmbedding(nn.Module):
    """A trained vector per position (GPT-2's ``wpe``): ``weight`` [context_length, d_model]."""

    def __init__(self, context_length: int, d_model: int) -> None:
        super().__init__()
        self.context_length = context_length
        self.weight = nn.Parameter(torch.empty(context_length, d_model))
        nn.init.normal_(self.weight, mean=0.0, std=0.02)

    def forward(self, length: int, start: int = 0) -> torch.Tensor:
        """Vectors for positions start..start+length−1, shape [length, d_model] (add to token vectors).

        Not checked per call (a slice past the table is shorter than ``length``): the model checks once per
        call that its positions fit the context.
        """
        return self.weight[start : start + length]


class SinusoidalPositionalEmbedding(nn.Module):
    """Fixed sinusoidal vectors (no parameters); same call as :class:`LearnedPositionalEmbedding`."""

    def __init__(self, context_length: int, d_model: int, base: float = 10000.0) -> None:
        super().__init__()
        self.context_length = context_length
        # Not persistent: it is a pure function of the shape, so checkpoints need not store it.
        self.register_buffer("table", sinusoidal_positions(context_length, d_model, base), persistent=False)

    def forward(self, length: int, start: int = 0) -> torch.Tensor:
        return self.table[start : start + length]


def rope_angles(
    length: int, head_dim: int, base: float = 10000.0, start: int = 0, style: str = "half"
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoPE's angles for positions start..start+length−1, each [length, head_dim].

    Angle of position p in pair i is p·base^(−2i/head_dim). Each column gets the angle of the pair it
    belongs to: the half-split layout repeats the head_dim/2 angles as two blocks (column i and column
    i + head_dim/2 share one angle), the interleaved layout repeats each angle twice in a row.
    """
    if not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        raise ValueError(f"RoPE needs a positive even head_dim, got {head_dim!r}")
    _check_style(style)
    angles = _angles(start, length, head_dim, base)
    if style == "half":
        angles = torch.cat([angles, angles], dim=-1)
    else:
        angles = angles.repeat_interleave(2, dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str = "half") -> torch.Tensor:
    """Rotate each pair of the last dimension by its angle: (x_i, x_{i+h/2}) for "half", (x_2i, x_2i+1)
    for "interleaved".

    ``x`` is [..., T, head_dim]; ``cos``/``sin`` are [T, head_dim] from :func:`rope_angles` with the same
    ``style``. In pair form: (a, b) → (a·cosθ − b·sinθ, a·sinθ + b·cosθ).
    """
    if x.shape[-2:] != cos.shape:
        raise ValueError(f"RoPE angles of shape {tuple(cos.shape)} do not match x of shape {tuple(x.shape)}")
    _check_style(style)
    return _rotate(x, cos, sin, style)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str) -> torch.Tensor:
    """:func:`apply_rope` of checked inputs (what :class:`RotaryEmbedding` runs, twice per layer per call)."""
    if style == "half":
        half = x.shape[-1] // 2
        partner = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    else:
        partner = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    return x * cos.to(x.dtype) + partner * sin.to(x.dtype)


def rope_permutation(head_dim: int) -> torch.Tensor:
    """The coordinate order that turns the interleaved pairing into the half-split one: even coordinates,
    then odd ones. ``apply_rope(x[..., p], style="half") == apply_rope(x, style="interleaved")[..., p]``.

    Permuting q and k the same way leaves every score q·k unchanged, which is why one pairing converts
    into the other by reordering the rows of the q and k projections of each head.
    """
    if not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        raise ValueError(f"RoPE needs a positive even head_dim, got {head_dim!r}")
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


class RotaryEmbedding(nn.Module):
    """Precomputed RoPE tables for one head width; ``forward(x, start)`` rotates x [B, H, T, head_dim].

    ``style`` is the pairing ("half" or "interleaved", see :data:`ROPE_STYLES`), checked when the tables are
    built; ``forward`` checks nothing (it runs twice per layer per token): the model checks once per call that
    its positions fit the context.
    """

    def __init__(self, head_dim: int, context_length: int, base: float = 10000.0, style: str = "half") -> None:
        super().__init__()
        self.head_dim, self.context_length, self.base, self.style = head_dim, context_length, base, style
        cos, sin = rope_angles(context_length, head_dim, base, style=style)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        length = x.shape[-2]
        return _rotate(x, self.cos[start : start + length], self.sin[start : start + length], self.style)
