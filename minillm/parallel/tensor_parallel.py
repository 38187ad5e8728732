"""Simulated tensor parallelism (Megatron-LM): linear layers split across ranks inside one process.

- Column-parallel: rank r holds rows r of W (a slice of the *output* features); its output is a slice.
- Row-parallel: rank r holds columns r of W (a slice of the *input* features) and sees the matching
  slice of the input; the partial outputs are summed by an all-reduce and the bias is added **once**.
- MLP = column-parallel fc → local GELU → row-parallel proj: one all-reduce forward.
- Attention = heads split across ranks (q, k, v column-parallel by head) → row-parallel out-projection.

Every rank's weights are separate leaf tensors, so after ``backward`` each rank holds its own gradient
shard; :meth:`gather_grads` reassembles them for comparison with the unsplit layer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from minillm.attention import fused_attention
from minillm.parallel.collectives import CommLedger, ring_all_reduce


def _check_divisible(size: int, world_size: int, what: str) -> None:
    if world_size < 1:
        raise ValueError(f"world_size must be ≥ 1, got {world_size}")
    if size % world_size:
        raise ValueError(f"{what} = {size} is not divisible by world_size {world_size}")


def _leaf(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t.detach().clone())


def _split_heads(fused: torch.Tensor, world_size: int) -> list[nn.Parameter]:
    """Rank r's shard of a fused [q | k | v] weight or bias: [its q rows | its k rows | its v rows]."""
    q, k, v = fused.chunk(3)
    return [_leaf(torch.cat([t.chunk(world_size)[r] for t in (q, k, v)])) for r in range(world_size)]


def _join_heads(shards: list[torch.Tensor]) -> torch.Tensor:
    """The inverse of :func:`_split_heads`: per-rank [q_r | k_r | v_r] shards back into [q | k | v]."""
    parts = [shard.chunk(3) for shard in shards]
    return torch.cat([torch.cat([p[i] for p in parts]) for i in range(3)])


class ColumnParallelLinear:
    """``linear`` split by output features: rank r computes ``x @ W_r.T + b_r``."""

    def __init__(self, linear: nn.Module, world_size: int) -> None:
        _check_divisible(linear.weight.shape[0], world_size, "out_features")
        self.world_size = world_size
        self.weights = [_leaf(w) for w in linear.weight.chunk(world_size, dim=0)]
        self.biases = None if linear.bias is None else [_leaf(b) for b in linear.bias.chunk(world_size)]

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Per-rank output slices (every rank sees the full input)."""
        return [F.linear(x, w, b) for w, b in zip(self.weights, self.biases or [None] * self.world_size, strict=True)]

    def gather_grads(self) -> dict[str, torch.Tensor]:
        grads = {"weight": torch.cat([w.grad for w in self.weights], dim=0)}
        if self.biases is not None:
            grads["bias"] = torch.cat([b.grad for b in self.biases])
        return grads


class RowParallelLinear:
    """``linear`` split by input features: rank r computes ``x_r @ W_r.T``; the sum is all-reduced."""

    def __init__(self, linear: nn.Module, world_size: int) -> None:
        _check_divisible(linear.weight.shape[1], world_size, "in_features")
        self.world_size = world_size
        self.weights = [_leaf(w) for w in linear.weight.chunk(world_size, dim=1)]
        self.bias = None if linear.bias is None else _leaf(linear.bias)

    def forward(
        self, x_shards: list[torch.Tensor], ledger: CommLedger | None = None, bias_on_every_rank: bool = False
    ) -> torch.Tensor:
        """Full output from per-rank input slices. ``bias_on_every_rank=True`` is the classic bug (t·b)."""
        if len(x_shards) != self.world_size:
            raise ValueError(f"expected {self.world_size} input shards, got {len(x_shards)}")
        partials = [F.linear(x, w) for x, w in zip(x_shards, self.weights, strict=True)]
        if self.bias is not None and bias_on_every_rank:
            partials = [p + self.bias for p in partials]
        out = ring_all_reduce(partials, ledger=ledger)[0]  # every rank holds the same sum; take rank 0's
        if self.bias is not None and not bias_on_every_rank:
            out = out + self.bias
        return out

    def gather_grads(self) -> dict[str, torch.Tensor]:
        grads = {"weight": torch.cat([w.grad for w in self.weights], dim=1)}
        if self.bias is not None:
            grads["bias"] = self.bias.grad
        return grads


class TensorParallelMLP:
    """Megatron MLP: column-parallel ``fc`` → GELU on each rank's slice → row-parallel ``proj``."""

    def __init__(
        self,
        fc: nn.Module,
        proj: nn.Module,
        world_size: int,
        activation: Callable[[torch.Tensor], torch.Tensor] = F.gelu,
    ) -> None:
        self.fc = ColumnParallelLinear(fc, world_size)
        self.proj = RowParallelLinear(proj, world_size)
        self.activation = activation

    def forward(self, x: torch.Tensor, ledger: CommLedger | None = None) -> torch.Tensor:
        hidden = [self.activation(h) for h in self.fc.forward(x)]  # element-wise: no communication
        return self.proj.forward(hidden, ledger=ledger)

    def gather_grads(self) -> dict[str, torch.Tensor]:
        fc, proj = self.fc.gather_grads(), self.proj.gather_grads()
        return {**{f"fc.{k}": v for k, v in fc.items()}, **{f"proj.{k}": v for k, v in proj.items()}}


def causal_self_attention(x: torch.Tensor, qkv: nn.Module, proj: nn.Module, n_head: int) -> torch.Tensor:
    """The unsplit reference: fused qkv projection ([q | k | v] along the output), causal softmax, proj."""
    batch, seq, width = x.shape
    q, k, v = qkv(x).split(width, dim=-1)
    q, k, v = (t.view(batch, seq, n_head, width // n_head).transpose(1, 2) for t in (q, k, v))
    y = fused_attention(q, k, v, is_causal=True)
    return proj(y.transpose(1, 2).reshape(batch, seq, width))


class TensorParallelAttention:
    """Heads split across ranks: rank r owns heads [r·H/t, (r+1)·H/t) of q, k and v and the matching
    input columns of the output projection; one all-reduce after the projection."""

    def __init__(self, qkv: nn.Module, proj: nn.Module, n_head: int, world_size: int) -> None:
        _check_divisible(n_head, world_size, "n_head")
        width = proj.weight.shape[1]
        if qkv.weight.shape[0] != 3 * width:
            raise ValueError(f"qkv has {qkv.weight.shape[0]} output features, expected 3 × {width}")
        self.n_head, self.world_size, self.width = n_head, world_size, width
        # A column-parallel split by head of the fused qkv projection.
        self.qkv_weights = _split_heads(qkv.weight, world_size)
        self.qkv_biases = None if qkv.bias is None else _split_heads(qkv.bias, world_size)
        self.proj = RowParallelLinear(proj, world_size)

    def forward(self, x: torch.Tensor, ledger: CommLedger | None = None) -> torch.Tensor:
        batch, seq, _ = x.shape
        local_width, local_heads = self.width // self.world_size, self.n_head // self.world_size
        outputs = []
        for r in range(self.world_size):
            bias = None if self.qkv_biases is None else self.qkv_biases[r]
            q, k, v = F.linear(x, self.qkv_weights[r], bias).split(local_width, dim=-1)
            q, k, v = (t.view(batch, seq, local_heads, -1).transpose(1, 2) for t in (q, k, v))
            y = fused_attention(q, k, v, is_causal=True)
            outputs.append(y.transpose(1, 2).reshape(batch, seq, local_width))
        return self.proj.forward(outputs, ledger=ledger)

    def gather_grads(self) -> dict[str, torch.Tensor]:
        """Reassemble the qkv gradient in the unsplit [q | k | v] layout, plus the projection's."""
        grads = {"qkv.weight": _join_heads([w.grad for w in self.qkv_weights])}
        if self.qkv_biases is not None:
            grads["qkv.bias"] = _join_heads([b.grad for b in self.qkv_biases])
        grads.update({f"proj.{k}": v for k, v in self.proj.gather_grads().items()})
        return grads
