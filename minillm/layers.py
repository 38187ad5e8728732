"""The small building blocks of a transformer, each usable on its own.

Every component here is either a written-out formula (``softmax``, ``gelu``, ``silu``, ``rms_norm``,
``layer_norm``) or a module that computes the same formula with PyTorch's fused kernel for speed
(``Linear``, ``Embedding``, ``LayerNorm``, ``GELU``, ...). The tests check each one against PyTorch's own
version and against a float64 computation, so the written-out formula and the fast module agree.
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
    "Linear",
    "Embedding",
    "LayerNorm",
    "RMSNorm",
    "GELU",
    "GeluMLP",
    "SwiGLU",
    "make_norm",
    "check_float",
]


def check_float(x: torch.Tensor, name: str = "input") -> None:
    """Raise a TypeError naming ``name`` unless ``x`` is a floating-point tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


# ----------------------------------------------------------------------------------------------------
# Written-out formulas
# ----------------------------------------------------------------------------------------------------


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x_i) / sum_j exp(x_j), made safe for large logits by subtracting the row maximum first.

    Subtracting a constant leaves the result unchanged but keeps every exponent ≤ 0, so exp never
    overflows (a logit of 1000 would otherwise give inf/inf = nan). A row that is entirely -inf (fully
    masked) has no valid maximum; it gives nan, as PyTorch's softmax does.
    """
    check_float(x, "x")
    shifted = x - x.amax(dim=dim, keepdim=True).detach()
    exps = shifted.exp()
    return exps / exps.sum(dim=dim, keepdim=True)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU(x) = x·Φ(x), Φ the standard normal CDF; ``approximate="tanh"`` is GPT-2's tanh formula.

    exact: 0.5·x·(1 + erf(x/√2)); tanh: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
    """
    check_float(x, "x")
    if approximate == "none":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if approximate == "tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU(x) = x·σ(x) (also called swish), the gate activation of SwiGLU."""
    check_float(x, "x")
    return x * torch.sigmoid(x)


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float = 1e-5
) -> torch.Tensor:
    """(x − mean) / √(var + eps) · weight + bias over the last dimension (biased variance, as PyTorch)."""
    check_float(x, "x")
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
    check_float(x, "x")
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


# ----------------------------------------------------------------------------------------------------
# Modules (fused PyTorch kernels where they exist; same formulas as above)
# ----------------------------------------------------------------------------------------------------


class Linear(nn.Module):
    """y = x·Wᵀ + b with ``weight`` of shape [out_features, in_features] (the nn.Linear layout).

    Parameters are initialised N(0, 0.02²) with a zero bias (GPT-2's choice); the model may rescale.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        nn.init.normal_(self.weight, mean=0.0, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"Linear expects last dimension {self.in_features}, got shape {tuple(x.shape)}")
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(nn.Module):
    """A lookup table: row ``i`` of ``weight`` [num_embeddings, dim] is the vector of id ``i``.

    Equivalent to one-hot(id) @ weight, without building the one-hot matrix. Ids are checked: an id
    outside [0, num_embeddings) raises a ValueError that names it, instead of an opaque index error.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        for name, value in (("num_embeddings", num_embeddings), ("embedding_dim", embedding_dim)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim))
        nn.init.normal_(self.weight, mean=0.0, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor):
            raise TypeError(f"ids must be a torch.Tensor of integer ids, got {type(ids).__name__}")
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"ids must be an integer tensor (torch.long or torch.int32), got dtype {ids.dtype}")
        if ids.numel() > 0:
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= self.num_embeddings:
                bad = low if low < 0 else high
                raise ValueError(f"token id {bad} is outside the vocabulary [0, {self.num_embeddings})")
        return F.embedding(ids, self.weight)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(nn.Module):
    """Normalise each vector to zero mean and unit variance, then scale (and shift, if ``bias``)."""

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, bias={self.bias is not None}"


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


class GELU(nn.Module):
    """GELU activation (exact by default, ``approximate="tanh"`` for GPT-2's formula)."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate=self.approximate)


class GeluMLP(nn.Module):
    """GPT-2's feed-forward: ``proj(GELU(fc(x)))``, width d_model → d_ff → d_model."""

    def __init__(self, d_model: int, d_ff: int, bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc = Linear(d_model, d_ff, bias=bias)
        self.act = GELU()
        self.proj = Linear(d_ff, d_model, bias=bias)
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
        self.gate = Linear(d_model, d_ff, bias=bias)
        self.up = Linear(d_model, d_ff, bias=bias)
        self.down = Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.silu(self.gate(x)) * self.up(x)))


def make_norm(kind: str, dim: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """Build "layernorm" (with a bias when ``bias``) or "rmsnorm" (never has a bias)."""
    if kind == "layernorm":
        return LayerNorm(dim, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return RMSNorm(dim, eps=eps)
    raise ValueError(f"norm must be 'layernorm' or 'rmsnorm', got {kind!r}")
