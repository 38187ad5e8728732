"""The communication model: bytes each rank sends per collective and per training strategy, and time.

Ring collectives over n ranks on a buffer of S bytes (Patarasuk & Yuan 2009; nccl-tests' bus bandwidth):
all-reduce 2(n−1)/n·S, reduce-scatter and all-gather (n−1)/n·S each; an all-to-all whose buffer of S bytes is split
evenly over the n ranks also sends (n−1)/n·S (every slice but its own). Time in the α–β model:
steps·α + bytes/β, with α the per-message latency and β the link bandwidth.
"""

from __future__ import annotations

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send")


def _check(size_bytes: float, world_size: int) -> None:
    if size_bytes < 0:
        raise ValueError(f"size_bytes must be ≥ 0, got {size_bytes!r}")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")


def collective_bytes(op: str, size_bytes: float, world_size: int) -> float:
    """Bytes one rank sends in a ring ``op`` over a buffer of ``size_bytes`` (the full, unsharded size)."""
    _check(size_bytes, world_size)
    n = world_size
    if op == "all_reduce":
        return 2 * (n - 1) / n * size_bytes
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n * size_bytes
    if op in ("broadcast", "send"):
        return size_bytes if n > 1 else 0.0
    raise ValueError(f"unknown collective {op!r}; choose one of {COLLECTIVES}")


def collective_steps(op: str, world_size: int) -> int:
    """Number of sequential messages (latency terms) of the ring algorithm."""
    n = world_size
    steps = {"all_reduce": 2 * (n - 1), "reduce_scatter": n - 1, "all_gather": n - 1, "all_to_all": n - 1}
    return steps.get(op, 1 if n > 1 else 0)


def collective_time(
    op: str, size_bytes: float, world_size: int, bandwidth_bytes_per_s: float, latency_s: float = 0.0
) -> float:
    """Seconds for a ring ``op``: steps·latency + bytes per rank / bandwidth."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth_bytes_per_s!r}")
    return (
        collective_steps(op, world_size) * latency_s
        + collective_bytes(op, size_bytes, world_size) / bandwidth_bytes_per_s
    )


def data_parallel_bytes(num_params: int, world_size: int, grad_bytes: int = 4, zero_stage: int = 0) -> float:
    """Bytes per rank per optimizer step for DP / ZeRO: one gradient all-reduce (2Ψ) for stages 0–2;
    stage 3 all-gathers weights in forward and again in backward, then reduce-scatters grads (3Ψ)."""
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0..3, got {zero_stage!r}")
    size = num_params * grad_bytes
    if zero_stage == 0:
        return collective_bytes("all_reduce", size, world_size)
    if zero_stage in (1, 2):
        return collective_bytes("reduce_scatter", size, world_size) + collective_bytes("all_gather", size, world_size)
    return 2 * collective_bytes("all_gather", size, world_size) + collective_bytes("reduce_scatter", size, world_size)


def tensor_parallel_bytes(
    n_layer: int,
    micro_batch: int,
    seq_len: int,
    hidden: int,
    tensor_parallel: int,
    micro_batches: int = 1,
    bytes_per_value: int = 2,
) -> float:
    """Bytes per rank per step for Megatron TP: 2 all-reduces forward + 2 backward per layer of b·s·h values
    (Shoeybi et al. 2019 §3); sequence parallelism replaces each by reduce-scatter + all-gather, same bytes."""
    size = micro_batch * seq_len * hidden * bytes_per_value
    return 4 * n_layer * micro_batches * collective_bytes("all_reduce", size, tensor_parallel)


def pipeline_parallel_bytes(
    micro_batch: int, seq_len: int, hidden: int, pipeline_parallel: int, micro_batches: int, bytes_per_value: int = 2
) -> float:
    """Bytes a middle stage sends per step: one activation forward and one gradient backward per micro-batch."""
    if pipeline_parallel == 1:
        return 0.0
    return 2 * micro_batches * micro_batch * seq_len * hidden * bytes_per_value
