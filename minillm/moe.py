"""Mixture of experts: each token is processed by k of E expert MLPs, chosen per token by a learned router.

    probs   = softmax(x · W_routerᵀ)                 [N, E]   one distribution over experts per token
    top-k   = the k largest probs: experts e_1..e_k with gate weights w_1..w_k
    y       = Σ_j w_j · expert_{e_j}(x)                        only k experts run for each token

The layer holds E times the MLP parameters but spends only k MLPs of compute per token: parameters and
FLOPs come apart, which is why the large 2024–2026 models are mixtures.

**Gate weights.** With ``renormalize=True`` the k chosen probabilities are divided by their sum, so they add to
1 (Mixtral, and GShard's top-2). With ``renormalize=False`` they are the raw probabilities (Switch Transformer).
For k = 1 renormalising makes every weight exactly 1, and the router then gets no gradient from the language-model
loss, only from the balancing loss below: that is why Switch (k = 1) keeps the raw probability.

**Load balancing** (Switch Transformer, Fedus et al. 2021, eq. 4): ``aux = E · Σ_i f_i · P_i`` with f_i the fraction
of the N·k routing choices that went to expert i (counted, no gradient) and P_i the mean router probability of
expert i (differentiable). With Σ f = Σ P = 1 it is exactly 1 when routing is uniform, and E when every token goes to
one expert with probability 1; the training loop adds ``coefficient · aux`` (Switch: 0.01) to its loss.

**Capacity.** An expert processes at most ``ceil(capacity_factor · N · k / E)`` choices per batch (a fixed buffer
size on real hardware). Choices beyond it are *dropped*: they add nothing, and a token with every choice dropped
passes through the block's residual connection unchanged. Priority goes to first choices (all tokens' top-1,
in token order, then all top-2, ...), as in GShard. Weights are renormalised before dropping, not after.
``capacity_factor=None`` means no limit (nothing is dropped).

**Idle experts.** While gradients are recorded, an expert that no token chose still runs, on zero tokens, so its
gradient is zero rather than missing: data-parallel ranks (DDP, FSDP), whose tokens choose different experts, then
all reduce the same set of gradients, and the optimizer treats every expert alike at every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from minillm.layers import GeluMLP, SwiGLU, linear

__all__ = [
    "Routing",
    "MoEStats",
    "MoE",
    "route",
    "load_balancing_loss",
    "expert_capacity",
    "capacity_keep_mask",
    "moe_stats",
]

_EXPERT_MLPS = ("gelu", "swiglu")


@dataclass(frozen=True)
class Routing:
    """The router's decision for N tokens: ``probs`` [N, E], chosen ``experts`` [N, k] (best first) and their
    gate ``weights`` [N, k]."""

    probs: torch.Tensor
    experts: torch.Tensor
    weights: torch.Tensor


@dataclass(frozen=True)
class MoEStats:
    """What one MoE forward did: per-expert counts of routing choices, before (``routed``) and after (``kept``) the
    capacity limit, that limit (None = unlimited), and how many choices and whole tokens were dropped."""

    n_tokens: int
    routed: torch.Tensor
    kept: torch.Tensor
    capacity: int | None
    dropped_tokens: int

    @property
    def dropped(self) -> int:
        """Routing choices dropped because their expert was full."""
        return int((self.routed - self.kept).sum())

    @property
    def usage(self) -> torch.Tensor:
        """Fraction of the routing choices each expert received (the f_i of the balancing loss); sums to 1."""
        return self.routed.float() / self.routed.sum().clamp(min=1)


def route(logits: torch.Tensor, top_k: int, renormalize: bool = True) -> Routing:
    """Top-k of the softmax of router ``logits`` [N, E]; see the module docstring for ``renormalize``."""
    probs = torch.softmax(logits, dim=-1)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return Routing(probs, experts, weights)


def load_balancing_loss(probs: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """Switch Transformer's auxiliary loss E · Σ_i f_i · P_i for ``probs`` [N, E] and chosen ``experts`` [N, k].

    f_i (fraction of the N·k choices sent to expert i) is a count and carries no gradient; P_i (mean probability)
    does, so minimising the product pushes probability away from the experts that are chosen too often.
    """
    n_experts = probs.shape[-1]
    counts = torch.bincount(experts.reshape(-1), minlength=n_experts)
    fraction = counts.to(probs.dtype) / experts.numel()
    return n_experts * (fraction * probs.mean(dim=0)).sum()


def expert_capacity(n_tokens: int, n_experts: int, top_k: int, capacity_factor: float) -> int:
    """How many routing choices one expert may process: ``ceil(capacity_factor · n_tokens · top_k / n_experts)``.

    Factor 1 is exactly a fair share; Switch Transformer trains with 1.0–1.25 and evaluates with 2.0.
    """
    if not (isinstance(capacity_factor, (int, float)) and not isinstance(capacity_factor, bool)) or not (
        capacity_factor > 0 and math.isfinite(capacity_factor)
    ):
        raise ValueError(f"capacity_factor must be a positive number (e.g. 1.25), got {capacity_factor!r}")
    return math.ceil(capacity_factor * n_tokens * top_k / n_experts)


def capacity_keep_mask(experts: torch.Tensor, n_experts: int, capacity: int | None) -> torch.Tensor:
    """Boolean [N, k]: which routing choices fit their expert's capacity (all of them when ``capacity`` is None).

    Each expert fills its buffer first-come first-served in priority order: choice 1 of tokens 0..N−1, then choice 2
    of tokens 0..N−1, ... A choice is kept when fewer than ``capacity`` choices came before it in that order.
    """
    if capacity is None:
        return torch.ones_like(experts, dtype=torch.bool)
    n_tokens, top_k = experts.shape
    in_priority_order = experts.t().reshape(-1)  # [k·N]: all first choices, then all second choices, ...
    one_hot = F.one_hot(in_priority_order, n_experts)
    queue_position = (one_hot.cumsum(dim=0) * one_hot).sum(dim=-1) - 1  # 0 for the first choice an expert gets
    return (queue_position < capacity).view(top_k, n_tokens).t()


def moe_stats(experts: torch.Tensor, keep: torch.Tensor, n_experts: int, capacity: int | None) -> MoEStats:
    """Counts of a routing decision ``experts`` [N, k] with its capacity ``keep`` mask [N, k]."""
    routed = torch.bincount(experts.reshape(-1), minlength=n_experts)
    kept = torch.bincount(experts[keep], minlength=n_experts)
    dropped_tokens = int((~keep.any(dim=-1)).sum())
    return MoEStats(experts.shape[0], routed.cpu(), kept.cpu(), capacity, dropped_tokens)


class MoE(nn.Module):
    """A mixture-of-experts feed-forward layer: x [..., d_model] → [..., d_model], a drop-in for the dense MLP.

    Submodules: ``router`` (d_model → n_experts, no bias) and ``experts`` (n_experts MLPs of the course's
    :class:`~minillm.layers.GeluMLP` or :class:`~minillm.layers.SwiGLU`, each d_model → d_ff → d_model). After each
    forward, ``aux_loss`` holds the load-balancing loss (a differentiable scalar) and ``stats`` a :class:`MoEStats`.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        n_experts: int,
        top_k: int = 2,
        mlp: str = "gelu",
        bias: bool = True,
        dropout: float = 0.0,
        capacity_factor: float | None = None,
        renormalize: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("d_ff", d_ff), ("n_experts", n_experts)):
            if not _is_positive_int(value):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not _is_positive_int(top_k):
            raise ValueError(f"top_k must be an int ≥ 1 (experts per token), got {top_k!r}")
        if top_k > n_experts:
            raise ValueError(f"top_k={top_k} exceeds n_experts={n_experts}: a token cannot use more experts than exist")
        if mlp not in _EXPERT_MLPS:
            raise ValueError(f"mlp must be one of {_EXPERT_MLPS}, got {mlp!r}")
        if capacity_factor is not None:
            expert_capacity(1, 1, 1, capacity_factor)  # the same check and message as at forward time
        self.d_model, self.n_experts, self.top_k = d_model, n_experts, top_k
        self.capacity_factor, self.renormalize = capacity_factor, renormalize
        self.router = linear(d_model, n_experts, bias=False)
        expert = GeluMLP if mlp == "gelu" else SwiGLU
        self.experts = nn.ModuleList(expert(d_model, d_ff, bias=bias, dropout=dropout) for _ in range(n_experts))
        self.aux_loss: torch.Tensor | None = None
        self.stats: MoEStats | None = None

    def capacity(self, n_tokens: int) -> int | None:
        """Per-expert capacity for a batch of ``n_tokens`` tokens (None = unlimited)."""
        if self.capacity_factor is None:
            return None
        return expert_capacity(n_tokens, self.n_experts, self.top_k, self.capacity_factor)

    def route(self, x: torch.Tensor) -> tuple[Routing, torch.Tensor]:
        """Routing of the flattened tokens ``x`` [N, d_model] and its capacity mask [N, k]; records aux loss and
        stats (the expert-parallel simulation calls this too, so both paths route identically)."""
        routing = route(self.router(x), self.top_k, self.renormalize)
        capacity = self.capacity(x.shape[0])
        keep = capacity_keep_mask(routing.experts, self.n_experts, capacity)
        self.aux_loss = load_balancing_loss(routing.probs, routing.experts)
        self.stats = moe_stats(routing.experts, keep, self.n_experts, capacity)
        return routing, keep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        routing, keep = self.route(flat)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, choice = torch.nonzero((routing.experts == e) & keep, as_tuple=True)
            if token.numel() == 0 and not torch.is_grad_enabled():
                continue  # in training an idle expert still runs, on no tokens (see the module docstring)
            y = expert(flat[token]) * routing.weights[token, choice, None]
            out = out.index_add(0, token, y.to(out.dtype))  # under autocast y may be bf16, out the input dtype
        return out.view(shape)

    def extra_repr(self) -> str:
        return (
            f"n_experts={self.n_experts}, top_k={self.top_k}, capacity_factor={self.capacity_factor}, "
            f"renormalize={self.renormalize}"
        )


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
