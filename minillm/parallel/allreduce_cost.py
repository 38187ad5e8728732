"""What a real all-reduce costs: time against message size on gloo processes, and the α–β fit.

:mod:`minillm.parallel.comm` models a collective's time as a fixed cost per message plus bytes over a
bandwidth. :func:`measure_all_reduce` checks that model on real processes: ``world_size`` gloo processes
(spawned, so the worker lives here and not in a notebook) all-reduce float32 buffers from a few hundred bytes to
a few MiB, and time each size (the fastest of several rounds: a busy machine only ever makes a call slower).
:func:`fit_alpha_beta` fits ``t(S) = α + S / bandwidth`` to those times. Small messages are *latency-bound*: α,
not the bytes, sets their time, which is why :class:`~minillm.parallel.ddp_by_hand.DataParallel` (and PyTorch's
DDP) all-reduce gradients in buckets rather than one tensor at a time. The same spawn times that too: the
gradients of a model, one all-reduce per tensor against one all-reduce of them flattened into a single bucket.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from minillm.parallel.ddp_by_hand import find_free_port, init_process, leave_process_group

__all__ = ["DEFAULT_SIZES", "fit_alpha_beta", "measure_all_reduce"]

DEFAULT_SIZES = tuple(256 * 4**k for k in range(8))  # 256 B … 4 MiB, ×4 each


def fit_alpha_beta(sizes_bytes: list[int], seconds: list[float]) -> tuple[float, float]:
    """Fit ``t = α + S / bandwidth``; returns ``(α in seconds, bandwidth in bytes/s)``.

    Least squares on the *relative* error, Σ((t_i − α − β·S_i)/t_i)², so that the microsecond-scale small
    messages weigh as much as the millisecond-scale large ones (plain least squares would fit the large ones
    only and leave α at the mercy of their noise).
    """
    if len(sizes_bytes) != len(seconds) or len(sizes_bytes) < 2:
        raise ValueError("need at least two (size, time) pairs of equal length")
    if any(t <= 0 for t in seconds) or any(s < 0 for s in sizes_bytes):
        raise ValueError("times must be positive and sizes non-negative")
    # Weighted normal equations for the model t = α + β·S with weights 1/t².
    w = [1.0 / t**2 for t in seconds]
    sw = sum(w)
    sx = sum(wi * s for wi, s in zip(w, sizes_bytes, strict=True))
    sxx = sum(wi * s * s for wi, s in zip(w, sizes_bytes, strict=True))
    sy = sum(wi * t for wi, t in zip(w, seconds, strict=True))
    sxy = sum(wi * s * t for wi, s, t in zip(w, sizes_bytes, seconds, strict=True))
    det = sw * sxx - sx * sx
    if det <= 0:
        raise ValueError("the sizes must not all be equal")
    alpha = (sxx * sy - sx * sxy) / det
    beta = (sw * sxy - sx * sy) / det
    return alpha, (1.0 / beta if beta > 0 else math.inf)


def _fastest(fn, rounds: int, calls: int) -> float:
    """Seconds per call of ``fn``: the fastest of ``rounds`` rounds of ``calls`` calls, each after a barrier."""
    best = math.inf
    for _ in range(rounds):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def all_reduce_timing_worker(rank: int, world_size: int, port: int, spec: dict[str, Any], out_dir: str) -> None:
    """Runs in each spawned process: time all-reduces of each size, then per-tensor vs one bucket."""
    torch.set_num_threads(1)
    init_process(rank, world_size, port, backend="gloo")
    try:
        sizes, rounds = spec["sizes"], spec["rounds"]
        # Zeros: the sums stay 0 however often a buffer is reduced (ones would double up to inf).
        buffers = {s: torch.zeros(s // 4) for s in sizes}
        for s in sizes:  # warm-up: connections, allocator, first-call costs
            dist.all_reduce(buffers[s])
        best = dict.fromkeys(sizes, math.inf)
        for _ in range(rounds):  # sizes interleaved, so a burst of load from elsewhere hits every size alike
            for s in sizes:
                calls = max(1, min(8, spec["bytes_per_round"] // s))
                best[s] = min(best[s], _fastest(lambda s=s: dist.all_reduce(buffers[s]), 1, calls))

        tensors = [torch.zeros(n) for n in spec["tensor_numels"]]
        flat = torch.zeros(sum(spec["tensor_numels"]))

        def per_tensor() -> None:
            for t in tensors:
                dist.all_reduce(t)

        per_tensor()  # warm-up
        dist.all_reduce(flat)
        per_tensor_s, bucket_s = math.inf, math.inf
        for _ in range(rounds):  # alternate the two, for the same reason
            per_tensor_s = min(per_tensor_s, _fastest(per_tensor, 1, 1))
            bucket_s = min(bucket_s, _fastest(lambda: dist.all_reduce(flat), 1, 1))
        torch.save(
            {"seconds": [best[s] for s in sizes], "per_tensor": per_tensor_s, "bucket": bucket_s},
            Path(out_dir) / f"rank{rank}.pt",
        )
        leave_process_group()
    finally:
        if dist.is_initialized():  # after an error: the other ranks may be gone, so no barrier
            dist.destroy_process_group()


def measure_all_reduce(
    world_size: int = 2,
    sizes_bytes: tuple[int, ...] = DEFAULT_SIZES,
    rounds: int = 15,
    tensor_numels: list[int] | None = None,
    bytes_per_round: int = 2**20,
) -> dict[str, Any]:
    """Spawn ``world_size`` gloo processes; time float32 all-reduces of each size and fit α + S/bandwidth.

    Each size's time is the fastest of ``rounds`` rounds (each round averages enough back-to-back calls to
    move about ``bytes_per_round`` bytes, at most 8 calls); a call's time is the slowest rank's. If
    ``tensor_numels`` is given (a model's parameter sizes, in elements), it also times one all-reduce per
    tensor against one all-reduce of all of them as a single bucket.

    Returns ``sizes`` (bytes), ``seconds`` (per all-reduce), ``alpha`` (s), ``bandwidth`` (bytes/s),
    ``per_tensor_seconds``/``bucket_seconds`` (or None), ``tensors`` and ``wall_seconds`` (spawn included).
    """
    if not isinstance(world_size, int) or world_size < 2:
        raise ValueError(f"world_size must be an int ≥ 2, got {world_size!r}")
    if len(sizes_bytes) < 2 or any(s < 4 or s % 4 for s in sizes_bytes):
        raise ValueError(f"need at least two sizes, each a positive multiple of 4 bytes, got {sizes_bytes!r}")
    if rounds < 1:
        raise ValueError(f"rounds must be ≥ 1, got {rounds!r}")
    numels = list(tensor_numels or [1])
    if any(n < 1 for n in numels):
        raise ValueError("tensor_numels must be positive")
    spec = dict(sizes=list(sizes_bytes), rounds=rounds, tensor_numels=numels, bytes_per_round=bytes_per_round)
    with tempfile.TemporaryDirectory() as out_dir:
        start = time.perf_counter()
        torch.multiprocessing.spawn(
            all_reduce_timing_worker,
            args=(world_size, find_free_port(), spec, out_dir),
            nprocs=world_size,
            join=True,
        )
        wall = time.perf_counter() - start
        ranks = [torch.load(Path(out_dir) / f"rank{r}.pt") for r in range(world_size)]
    seconds = [max(r["seconds"][i] for r in ranks) for i in range(len(sizes_bytes))]
    alpha, bandwidth = fit_alpha_beta(list(sizes_bytes), seconds)
    timed_tensors = tensor_numels is not None
    return {
        "world_size": world_size,
        "sizes": list(sizes_bytes),
        "seconds": seconds,
        "alpha": alpha,
        "bandwidth": bandwidth,
        "tensors": len(numels) if timed_tensors else 0,
        "per_tensor_seconds": max(r["per_tensor"] for r in ranks) if timed_tensors else None,
        "bucket_seconds": max(r["bucket"] for r in ranks) if timed_tensors else None,
        "wall_seconds": wall,
    }
