"""Simulated data parallelism: N model replicas, one shard of the batch each, a ring all-reduce of grads.

With equal shards and a mean-reduced loss, the average of the replicas' gradients is the full-batch
gradient, so every replica takes exactly the step a single model would take on the whole batch.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from minillm.parallel.collectives import CommLedger, ring_all_reduce

LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def shard_batch(inputs: torch.Tensor, targets: torch.Tensor, world_size: int) -> list[tuple]:
    """Split a global batch into ``world_size`` equal shards along dim 0 (rank r gets the r-th block)."""
    if world_size < 1:
        raise ValueError(f"world_size must be ≥ 1, got {world_size}")
    if inputs.shape[0] != targets.shape[0]:
        raise ValueError(f"inputs have {inputs.shape[0]} rows but targets have {targets.shape[0]}")
    if inputs.shape[0] % world_size:
        raise ValueError(
            f"global batch {inputs.shape[0]} is not divisible by world_size {world_size}: "
            "unequal shards would weight some examples more than others"
        )
    return list(zip(inputs.chunk(world_size), targets.chunk(world_size), strict=True))


def flat_grads(module: nn.Module) -> torch.Tensor:
    """All parameter gradients of ``module`` concatenated into one flat vector (one "bucket")."""
    return torch.cat([p.grad.reshape(-1) for p in module.parameters()])


def set_flat_grads(module: nn.Module, flat: torch.Tensor) -> None:
    """Write a flat gradient vector back into the parameters' ``.grad`` tensors."""
    offset = 0
    for p in module.parameters():
        p.grad = flat[offset : offset + p.numel()].reshape(p.shape).clone()
        offset += p.numel()
    if offset != flat.numel():
        raise ValueError(f"flat vector has {flat.numel()} elements, the module has {offset} parameters")


def replicate(model: nn.Module, world_size: int) -> list[nn.Module]:
    """``world_size`` identical copies of ``model``: the simulated counterpart of broadcasting rank 0's weights."""
    if world_size < 1:
        raise ValueError(f"world_size must be ≥ 1, got {world_size}")
    return [copy.deepcopy(model) for _ in range(world_size)]


def local_backward(
    replicas: list[nn.Module], inputs: torch.Tensor, targets: torch.Tensor, loss_fn: LossFn
) -> list[float]:
    """Rank r back-propagates the mean loss of the r-th batch shard into its own replica; returns the losses.

    No communication happens here: this is the part of a data-parallel step every rank does alone.
    """
    losses = []
    for replica, (x, y) in zip(replicas, shard_batch(inputs, targets, len(replicas)), strict=True):
        replica.zero_grad(set_to_none=True)
        loss = loss_fn(replica, x, y)
        loss.backward()
        losses.append(loss.item())
    return losses


class SimulatedDataParallel:
    """``world_size`` replicas of one model, trained in lock-step on shards of each global batch.

    ``make_optimizer`` builds one optimizer per replica (e.g. ``lambda ps: torch.optim.AdamW(ps)``).
    """

    def __init__(
        self,
        model: nn.Module,
        world_size: int,
        make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    ) -> None:
        self.world_size = world_size
        self.replicas = replicate(model, world_size)
        self.optimizers = [make_optimizer(list(r.parameters())) for r in self.replicas]
        self.ledger = CommLedger(world_size)

    def backward(self, inputs: torch.Tensor, targets: torch.Tensor, loss_fn: LossFn) -> list[float]:
        """Each replica back-propagates its shard's mean loss; then grads are averaged by a ring all-reduce.

        Returns the per-rank losses.
        """
        losses = local_backward(self.replicas, inputs, targets, loss_fn)
        reduced = ring_all_reduce([flat_grads(r) for r in self.replicas], op="sum", ledger=self.ledger)
        for replica, flat in zip(self.replicas, reduced, strict=True):
            set_flat_grads(replica, flat / self.world_size)
        return losses

    def step(self, inputs: torch.Tensor, targets: torch.Tensor, loss_fn: LossFn) -> float:
        """One data-parallel training step; returns the global-batch loss (mean of the rank losses)."""
        losses = self.backward(inputs, targets, loss_fn)
        for optimizer in self.optimizers:
            optimizer.step()
        return sum(losses) / len(losses)
