"""The small building blocks of a transformer, each usable on its own.

The written-out formulas (``softmax``, ``gelu``, ``silu``, ``layer_norm``, ``rms_norm``) are the references:
the tests check each against PyTorch's own kernel and a float64 computation. The model itself uses
``torch.nn``'s modules (``nn.Linear``, ``nn.Embedding``, ``nn.LayerNorm``, ``nn.GELU``) — built here with
GPT-2's initialisation by :func:`linear` and :func:`embedding` — plus the two ``torch.nn`` lacks in older
releases or altogether: :class:`RMSNorm` and the MLPs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "softmax",
    "gelu",
    "silu",
    "layer_norm",
    "rms_norm",
    "linear",
    "embedding",
    "RMSNorm",
    "GeluMLP",
    "SwiGLU",
    "make_norm",
]


# ----------------------------------------------------------------------------------------------------
# Written-out formulas
# ----------------------------------------------------------------------------------------------------


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x_i) / sum_j exp(x_j), made safe for large logits by subtracting the row maximum first.

    Subtracting a constant leaves the result unchanged but keeps every exponent ≤ 0, so exp never
    overflows (a logit of 1000 would otherwise give inf/inf = nan). A row that is entirely -inf (fully
    masked) has no valid maximum; it gives nan, as PyTorch's softmax does.
    """
    shifted = x - x.amax(dim=dim, keepdim=True).detach()
    exps = shifted.exp()
    return exps / exps.sum(dim=dim, keepdim=True)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU(x) = x·Φ(x), Φ the standard normal CDF; ``approximate="tanh"`` is GPT-2's tanh formula.

    exact: 0.5·x·(1 + erf(x/√2)); tanh: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
    """
    if approximate == "none":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if approximate == "tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU(x) = x·σ(x) (also called swish), the gate activation of SwiGLU."""
    return x * torch.sigmoid(x)


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float = 1e-5
) -> torch.Tensor:
    """(x − mean) / √(var + eps) · weight + bias over the last dimension (biased variance, as PyTorch)."""
    mean = x.mean(dim=-1, keepdim=True)
    var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-5) -> torch.Tensor:
    """x / √(mean(x²) + eps) · weight: LayerNorm without centring and without a bias (Llama's norm)."""
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


# ----------------------------------------------------------------------------------------------------
# Modules (fused PyTorch kernels where they exist; same formulas as above)
# ----------------------------------------------------------------------------------------------------


def linear(in_features: int, out_features: int, bias: bool = True) -> nn.Linear:
    """``nn.Linear`` (y = x·Wᵀ + b, W [out, in]) with GPT-2's init: W ~ N(0, 0.02²), b = 0.

    Built with ``skip_init`` so that only the N(0, 0.02²) draw touches the random stream: a seeded model
    gets the same weights whatever PyTorch's own default init does.
    """
    layer = nn.utils.skip_init(nn.Linear, in_features, out_features, bias=bias)
    nn.init.normal_(layer.weight, mean=0.0, std=0.02)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


def embedding(num_embeddings: int, embedding_dim: int) -> nn.Embedding:
    """``nn.Embedding`` (row ``i`` of ``weight`` is the vector of id ``i``: one-hot(id) @ weight) with N(0, 0.02²)."""
    table = nn.utils.skip_init(nn.Embedding, num_embeddings, embedding_dim)
    nn.init.normal_(table.weight, mean=0.0, std=0.02)
    return table


class RMSNorm(nn.Module):
    """Scale each vector by 1/RMS(x) and a learned gain: cheaper than LayerNorm, used by Llama."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class GeluMLP(nn.Module):
    """GPT-2's feed-forward: ``proj(GELU(fc(x)))``, width d_model → d_ff → d_model."""

    def __init__(self, d_model: int, d_ff: int, bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc = linear(d_model, d_ff, bias=bias)
        self.act = nn.GELU()
        self.proj = linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(self.act(self.fc(x))))


class SwiGLU(nn.Module):
    """Llama's gated feed-forward: ``down(SiLU(gate(x)) * up(x))``, width d_model → d_ff → d_model.

    The gate lets each hidden unit decide, per token, how much of ``up(x)`` passes. It has three matrices
    instead of two, which is why its d_ff is usually 8/3·d_model instead of 4·d_model (same count).
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.gate = linear(d_model, d_ff, bias=bias)
        self.up = linear(d_model, d_ff, bias=bias)
        self.down = linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.silu(self.gate(x)) * self.up(x)))


def make_norm(kind: str, dim: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """Build "layernorm" (with a bias when ``bias``) or "rmsnorm" (never has a bias)."""
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return RMSNorm(dim, eps=eps)
    raise ValueError(f"norm must be 'layernorm' or 'rmsnorm', got {kind!r}")
