"""Sharded checkpoints of an FSDP run: every rank writes its own shards, nothing is gathered to one process.

Why: gathering full tensors on rank 0 needs the whole model and its AdamW states in one process's memory at
every save — what FSDP was chosen to avoid. Here each rank writes the local pieces of its ``fully_shard``-ed
parameters and optimizer states (``DTensor.to_local()``, plain tensors) to a file of its own, and rank 0 writes
the rest of the run's state with a manifest naming every shard file and the digest of its contents, last — so a
save interrupted half-way leaves the previous checkpoint whole. Every file is an ordinary
:func:`minillm.checkpoint.save_checkpoint` file (``weights_only=True``, no pickled DTensors, no PyTorch
distributed-checkpoint metadata).

Reading back: the same number of FSDP ranks each load their own file (:func:`read_local_shards`); any other
layout — one process for sampling or export, DDP, another world size — joins the pieces into full tensors
(:func:`read_full_state`). FSDP2 splits dimension 0 of every parameter like ``torch.chunk``, so the full
tensor is the ranks' pieces concatenated in rank order.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor

from minillm.checkpoint import CheckpointError, load_checkpoint, save_checkpoint, state_digest

SHARDS_KEY = "shards"  # the manifest entry in the main checkpoint file


def shard_file(path: Path, step: int, rank: int, world_size: int) -> Path:
    """``checkpoint.pt`` → ``checkpoint.step00000120.rank1-of-2.pt``: the step in the name keeps old shards
    intact until the manifest of the new save is written."""
    return path.with_name(f"{path.stem}.step{step:08d}.rank{rank}-of-{world_size}{path.suffix}")


def shard_name_pattern(path: Path) -> str:
    """The file names :func:`shard_file` gives the shards of ``path``, as a regular expression."""
    return rf"{re.escape(path.stem)}\.step\d+\.rank\d+-of-\d+{re.escape(path.suffix)}"


def shard_files_of(path: Path) -> list[Path]:
    """Every shard file written beside ``path`` by any save (to clean up, or to list a run's outputs)."""
    pattern = re.compile(shard_name_pattern(path))
    return sorted(p for p in path.parent.glob(f"{path.stem}.step*") if pattern.fullmatch(p.name))


def _local(tree: Any, shapes: dict[str, list[int]], prefix: str = "") -> Any:
    """``tree`` with every DTensor replaced by its local piece; the global shapes are noted in ``shapes``."""
    if isinstance(tree, DTensor):
        shapes[prefix] = list(tree.shape)
        return tree.to_local().detach().cpu().clone()
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu().clone()
    if isinstance(tree, dict):
        return {key: _local(value, shapes, f"{prefix}/{key}") for key, value in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_local(value, shapes, f"{prefix}/{i}") for i, value in enumerate(tree))
    return tree


def save_sharded(
    model: nn.Module, optimizer: torch.optim.Optimizer, rest: dict[str, Any], path: str | Path, step: int
) -> None:
    """Every rank writes its shards; rank 0 then writes ``rest`` plus the manifest to ``path``. Collective."""
    path, rank, world = Path(path), dist.get_rank(), dist.get_world_size()
    shapes: dict[str, list[int]] = {}
    local = {
        "model": _local(get_model_state_dict(model), shapes, "model"),
        "optimizer": _local(get_optimizer_state_dict(model, optimizer), shapes, "optimizer"),
        "global_shapes": shapes,
    }
    mine = shard_file(path, step, rank, world)
    save_checkpoint(local, mine)
    digests: list[Any] = [None] * world
    dist.all_gather_object(digests, state_digest(local))
    if rank == 0:
        files = [shard_file(path, step, r, world).name for r in range(world)]
        save_checkpoint({**rest, SHARDS_KEY: {"world_size": world, "files": files, "digests": digests}}, path)
        for old in shard_files_of(path):
            if old.name not in files:
                old.unlink()
    dist.barrier()


def _read_shard(path: Path, manifest: dict, rank: int) -> dict[str, Any]:
    shard_path = path.with_name(manifest["files"][rank])
    state = load_checkpoint(shard_path)
    if state_digest(state) != manifest["digests"][rank]:
        raise CheckpointError(
            f"{shard_path}: its contents are not the shard {path.name} recorded (another save's file?); "
            "the checkpoint is incomplete"
        )
    return state


def read_full_state(path: str | Path, manifest: dict) -> tuple[dict, dict]:
    """The full model and optimizer state dicts (tensors by name) joined from every rank's shard file."""
    path = Path(path)
    shards = [_read_shard(path, manifest, r) for r in range(manifest["world_size"])]

    def join(trees: list[Any], prefix: str) -> Any:
        first = trees[0]
        if prefix in shards[0]["global_shapes"]:
            full = torch.cat(trees, dim=0)
            if list(full.shape) != shards[0]["global_shapes"][prefix]:
                raise CheckpointError(f"{path}: shards of {prefix} do not add up to its shape")
            return full
        if isinstance(first, dict):
            return {key: join([t[key] for t in trees], f"{prefix}/{key}") for key in first}
        if isinstance(first, list | tuple):
            return type(first)(join([t[i] for t in trees], f"{prefix}/{i}") for i in range(len(first)))
        return first

    return join([s["model"] for s in shards], "model"), join([s["optimizer"] for s in shards], "optimizer")


def _like(tree: Any, template: Any) -> Any:
    """Local pieces back into DTensors laid out like ``template`` (this rank's current state)."""
    if isinstance(template, DTensor):
        return DTensor.from_local(
            tree.to(template.device),
            template.device_mesh,
            template.placements,
            shape=template.shape,
            stride=template.stride(),
            run_check=False,
        )
    if isinstance(tree, dict):
        return {
            key: _like(value, template.get(key) if isinstance(template, dict) else None) for key, value in tree.items()
        }
    return tree


def read_local_shards(path: str | Path, manifest: dict, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load this rank's own shard file into its ``fully_shard``-ed model and optimizer (same world size)."""
    shard = _read_shard(Path(path), manifest, dist.get_rank())
    model_template = get_model_state_dict(model)
    set_model_state_dict(model, _like(shard["model"], model_template))
    # AdamW's states have their parameter's layout; the optimizer may hold none yet, so lay each out like it.
    state = {
        name: {
            key: _like(value, model_template[name] if isinstance(value, torch.Tensor) and value.dim() else None)
            for key, value in entry.items()
        }
        for name, entry in shard["optimizer"]["state"].items()
    }
    set_optimizer_state_dict(model, optimizer, {"state": state, "param_groups": shard["optimizer"]["param_groups"]})
