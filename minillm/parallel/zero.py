"""ZeRO (Rajbhandari et al. 2019): shard the model states over the data-parallel ranks.

Stage 1 shards the optimizer states, stage 2 the gradients too, stage 3 the weights as well. The
accounting below gives the per-rank bytes of each stage; :class:`SimulatedZeRO1` runs a real stage-1
step on simulated ranks: reduce-scatter the gradients, each rank updates only its shard with its own
optimizer, all-gather the updated weights — the same step as unsharded data parallelism, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from minillm.parallel.collectives import CommLedger, ring_all_gather, ring_reduce_scatter
from minillm.parallel.data_parallel import LossFn, flat_grads, local_backward, replicate
from minillm.parallel.memory import ModelStateBytes, bytes_per_param


def zero_model_state_bytes(
    num_params: int, world_size: int, stage: int, optimizer: str = "adamw", precision: str = "mixed"
) -> ModelStateBytes:
    """Per-rank bytes of weights, gradients and optimizer states under ZeRO stage 0 (plain DP) to 3.

    Mixed precision with AdamW gives ZeRO's 2Ψ + 2Ψ + 12Ψ; stage 1 divides the 12Ψ by N_d, stage 2 the
    gradients too, stage 3 everything.
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(num_params, int) or num_params < 1:
        raise ValueError(f"num_params must be a positive int, got {num_params!r}")
    w, g, o = bytes_per_param(optimizer, precision)
    n = world_size
    return ModelStateBytes(
        weights=w * num_params // (n if stage >= 3 else 1),
        grads=g * num_params // (n if stage >= 2 else 1),
        optimizer=o * num_params // (n if stage >= 1 else 1),
    )


def _shard_bounds(total: int, world_size: int) -> list[tuple[int, int]]:
    """[start, end) of each rank's slice of a flat vector, as ``torch.tensor_split`` cuts it."""
    sizes = [t.numel() for t in torch.tensor_split(torch.empty(total, device="meta"), world_size)]
    bounds, start = [], 0
    for size in sizes:
        bounds.append((start, start + size))
        start += size
    return bounds


class SimulatedZeRO1:
    """Data parallelism whose optimizer states are sharded: rank r owns a flat slice of the parameters.

    ``make_optimizer`` builds an element-wise optimizer (AdamW, SGD) over one flat shard tensor.
    """

    def __init__(
        self,
        model: nn.Module,
        world_size: int,
        make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    ) -> None:
        self.world_size = world_size
        self.replicas = replicate(model, world_size)
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        self.bounds = _shard_bounds(flat.numel(), world_size)
        self.shards = [nn.Parameter(flat[a:b].clone()) for a, b in self.bounds]
        self.optimizers = [make_optimizer([shard]) for shard in self.shards]
        self.ledger = CommLedger(world_size)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor, loss_fn: LossFn) -> float:
        """Backward on each rank's batch shard, reduce-scatter grads, local shard update, all-gather."""
        losses = local_backward(self.replicas, inputs, targets, loss_fn)
        grad_shards = ring_reduce_scatter([flat_grads(r) for r in self.replicas], ledger=self.ledger)
        for shard, grad, optimizer in zip(self.shards, grad_shards, self.optimizers, strict=True):
            shard.grad = grad / self.world_size
            optimizer.step()
        gathered = ring_all_gather([s.detach() for s in self.shards], ledger=self.ledger)
        for replica, flat in zip(self.replicas, gathered, strict=True):
            offset = 0
            with torch.no_grad():
                for p in replica.parameters():
                    p.copy_(flat[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
        return sum(losses) / len(losses)

    def optimizer_state_bytes(self) -> list[int]:
        """Bytes of per-element optimizer state each rank holds (scalar counters excluded)."""
        out = []
        for shard, optimizer in zip(self.shards, self.optimizers, strict=True):
            state = optimizer.state.get(shard, {})
            out.append(
                sum(
                    v.numel() * v.element_size()
                    for v in state.values()
                    if isinstance(v, torch.Tensor) and v.shape == shard.shape
                )
            )
        return out
