"""The real engine: data parallelism and a ZeRO-1 optimizer written out on ``torch.distributed``.

:class:`DataParallel` is DDP in miniature: it broadcasts rank 0's parameters at start, then, during
``backward``, a hook on each parameter notices when its gradient is final; when every gradient of a
*bucket* is final the bucket is flattened and an asynchronous all-reduce is launched, so communication
overlaps the rest of the backward pass. :meth:`DataParallel.finish_gradient_sync` waits for the
buckets and divides by the world size. :class:`ZeroRedundancyOptimizer` (ZeRO stage 1) keeps optimizer
states for 1/N of the parameters on each rank: reduce-scatter the gradients, update the local shard,
all-gather the weights.

Both are checked on real processes by :func:`run_data_parallel_check`, which spawns ``world_size``
gloo processes (workers must live in an importable module: ``torch.multiprocessing.spawn`` cannot
pickle functions defined in a notebook) and compares them with a single-process run on the same global
batch and with ``torch.nn.parallel.DistributedDataParallel``.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from minillm.parallel.memory import measure_model_state_bytes
from minillm.train.loop import lm_loss

__all__ = [
    "DataParallel",
    "ZeroRedundancyOptimizer",
    "find_free_port",
    "init_process",
    "leave_process_group",
    "run_data_parallel_check",
]


def find_free_port() -> int:
    """A free TCP port on 127.0.0.1 (bind to port 0 and let the OS choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_process(rank: int, world_size: int, port: int, backend: str | None = None) -> None:
    """Join a process group on 127.0.0.1: gloo on the CPU, nccl when CUDA is there (unless ``backend``)."""
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world_size else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)


def leave_process_group() -> None:
    """Leave the process group once every rank is done: barrier, let gloo's threads finish, then destroy it.

    The pause matters. Right after a collective, a gloo worker thread may still be releasing its tensors, which
    needs the GIL; if the group is destroyed at that moment (by ``destroy_process_group`` or by the last DDP
    reducer going away), the destructor waits for that thread while holding the GIL, and the process hangs
    (seen with torch 2.13's gloo backend). Sleeping releases the GIL, so the thread finishes first.
    """
    dist.barrier()
    gc.collect()  # DDP reducers and work handles that still refer to the group
    time.sleep(0.2)
    dist.destroy_process_group()


class DataParallel(nn.Module):
    """Gradient all-reduce in buckets, launched from hooks while backward is still running.

    Use: ``loss = loss_fn(dp(x)); loss.backward(); dp.finish_gradient_sync(); optimizer.step()``.
    ``bucket_cap_bytes`` plays the role of DDP's ``bucket_cap_mb`` (25 MiB by default there).
    """

    def __init__(self, module: nn.Module, bucket_cap_bytes: int = 25 * 2**20) -> None:
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError("DataParallel needs torch.distributed initialised (see init_process)")
        if bucket_cap_bytes <= 0:
            raise ValueError(f"bucket_cap_bytes must be positive, got {bucket_cap_bytes!r}")
        self.module = module
        self.world_size = dist.get_world_size()
        with torch.no_grad():  # every rank starts from rank 0's weights
            for tensor in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(tensor, src=0)
        params = [p for p in module.parameters() if p.requires_grad]
        # Gradients become final roughly in reverse order of use, so fill buckets from the last parameter.
        self.buckets: list[list[nn.Parameter]] = [[]]
        size = 0
        for p in reversed(params):
            if self.buckets[-1] and size + p.numel() * p.element_size() > bucket_cap_bytes:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self._bucket_of = {id(p): i for i, bucket in enumerate(self.buckets) for p in bucket}
        self._reset()
        self.launch_log: list[tuple[int, int]] = []  # (bucket, gradients still pending when it launched)
        for p in params:
            p.register_post_accumulate_grad_hook(self._grad_ready)

    def _reset(self) -> None:
        self._ready = [0] * len(self.buckets)
        self._pending: dict[int, tuple[Any, torch.Tensor]] = {}

    def _grad_ready(self, param: nn.Parameter) -> None:
        index = self._bucket_of[id(param)]
        self._ready[index] += 1
        if self._ready[index] == len(self.buckets[index]):
            flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[index]])
            work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, async_op=True)
            self._pending[index] = (work, flat)
            still_waiting = sum(len(b) for b in self.buckets) - sum(self._ready)
            self.launch_log.append((index, still_waiting))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def finish_gradient_sync(self) -> None:
        """Wait for every bucket's all-reduce and write the averaged gradients back into ``.grad``."""
        missing = [i for i in range(len(self.buckets)) if i not in self._pending]
        if missing:
            raise RuntimeError(f"buckets {missing} never became ready: some parameter received no gradient")
        for index, (work, flat) in sorted(self._pending.items()):
            work.wait()
            flat /= self.world_size
            offset = 0
            for p in self.buckets[index]:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        self._reset()


class ZeroRedundancyOptimizer:
    """ZeRO stage 1: rank r keeps optimizer states only for its 1/N slice of the flattened parameters.

    ``step()`` averages the gradients with a reduce-scatter (each rank receives only its slice), runs
    ``optimizer_class`` on the local slice, then all-gathers the updated slices into every rank's
    parameters. Use it on a plain (unwrapped) model after ``loss.backward()``.
    """

    def __init__(self, params: list[nn.Parameter], optimizer_class: type, **optimizer_kwargs: Any) -> None:
        if not dist.is_initialized():
            raise RuntimeError("ZeroRedundancyOptimizer needs torch.distributed initialised")
        self.params = [p for p in params if p.requires_grad]
        self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        total = sum(p.numel() for p in self.params)
        self.shard_size = -(-total // self.world_size)  # pad so every rank holds an equal slice
        self.padded = self.shard_size * self.world_size
        with torch.no_grad():
            for p in self.params:  # the same starting weights everywhere
                dist.broadcast(p, src=0)
        flat = self._flatten([p.detach() for p in self.params])
        start = self.rank * self.shard_size
        self.shard = nn.Parameter(flat[start : start + self.shard_size].clone())
        self.optimizer = optimizer_class([self.shard], **optimizer_kwargs)

    def _flatten(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        flat = torch.cat([t.reshape(-1) for t in tensors])
        return F.pad(flat, (0, self.padded - flat.numel()))

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        grads = self._flatten([p.grad for p in self.params])
        local = torch.empty(self.shard_size, dtype=grads.dtype)
        try:
            dist.reduce_scatter(local, list(grads.chunk(self.world_size)), op=dist.ReduceOp.SUM)
        except (RuntimeError, NotImplementedError):  # older gloo builds lack reduce-scatter: same sums, 2× bytes
            dist.all_reduce(grads, op=dist.ReduceOp.SUM)
            local = grads.chunk(self.world_size)[self.rank].clone()
        self.shard.grad = local / self.world_size
        self.optimizer.step()
        slices = [torch.empty_like(self.shard) for _ in range(self.world_size)]
        dist.all_gather(slices, self.shard.detach())
        flat, offset = torch.cat(slices), 0
        for p in self.params:
            p.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()

    def state_bytes(self) -> int:
        """Bytes of per-element optimizer state on this rank (scalar counters excluded)."""
        state = self.optimizer.state.get(self.shard, {})
        return sum(
            v.numel() * v.element_size()
            for v in state.values()
            if isinstance(v, torch.Tensor) and v.shape == self.shard.shape
        )


# ----------------------------------------------------------------------------------------------------
# The check on real processes: one spawn runs our DataParallel, torch's DDP and our ZeRO-1.


def build_problem(spec: dict[str, Any]) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The model and global batch a check trains on, identical in every process (seeded)."""
    from minillm.model import GPT, GPTConfig

    dtype = getattr(torch, spec.get("dtype", "float64"))
    torch.manual_seed(spec.get("seed", 0))
    config = GPTConfig(
        n_layer=spec.get("n_layer", 2), n_head=4, d_model=spec.get("d_model", 32), vocab_size=64, context_length=16
    )
    model = GPT(config).to(dtype)
    generator = torch.Generator().manual_seed(spec.get("seed", 0) + 1)
    tokens = torch.randint(0, config.vocab_size, (spec.get("global_batch", 8), 17), generator=generator)
    return model, tokens[:, :-1], tokens[:, 1:]


def _train(model, optimizer, inputs, targets, steps, wrapper=None, sync=None):
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = lm_loss(wrapper or model, (inputs, targets))
        loss.backward()
        if sync is not None:
            sync()
        optimizer.step()
        losses.append(loss.item())
    return losses


@contextlib.contextmanager
def _timed(timings: dict[str, float], name: str) -> Iterator[None]:
    """Time the ``with`` block into ``timings[name]``, from a barrier on: the work, not the wait for a slower rank."""
    dist.barrier()
    start = time.perf_counter()
    yield
    timings[name] = time.perf_counter() - start


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def data_parallel_worker(rank: int, world_size: int, port: int, spec: dict[str, Any], out_dir: str) -> None:
    """Runs in each spawned process: train with DataParallel, with torch DDP, and with ZeRO-1."""
    torch.set_num_threads(1)
    init_process(rank, world_size, port, backend="gloo")
    try:
        model, inputs, targets = build_problem(spec)
        x, y = inputs.chunk(world_size)[rank], targets.chunk(world_size)[rank]
        steps, lr = spec.get("steps", 3), spec.get("lr", 1e-2)
        results: dict[str, Any] = {}
        timings: dict[str, float] = {}
        # One-off costs must not land on the first timed run: the first torch optimizer imports
        # torch._dynamo (seconds), and the first backward warms the allocator and kernels.
        warmup = copy.deepcopy(model)
        torch.optim.AdamW(warmup.parameters())
        lm_loss(warmup, (x, y)).backward()

        # 1. Our DataParallel. Non-zero ranks start from different weights: the broadcast must fix them.
        ours = copy.deepcopy(model)
        if rank > 0:
            with torch.no_grad():
                for p in ours.parameters():
                    p.add_(1.0)
        with _timed(timings, "dp"):
            dp = DataParallel(ours, bucket_cap_bytes=spec.get("bucket_cap_bytes", 8192))
            optimizer = torch.optim.AdamW(ours.parameters(), lr=lr)
            results["dp_losses"] = _train(ours, optimizer, x, y, steps, wrapper=dp, sync=dp.finish_gradient_sync)
        results["dp_params"] = _weights(ours)
        results["dp_buckets"] = len(dp.buckets)
        results["dp_launch_log"] = dp.launch_log[: len(dp.buckets)]

        # 2. PyTorch's DistributedDataParallel on the same problem.
        reference = copy.deepcopy(model)
        with _timed(timings, "ddp"):
            ddp = nn.parallel.DistributedDataParallel(reference)
            optimizer = torch.optim.AdamW(ddp.parameters(), lr=lr)
            results["ddp_losses"] = _train(reference, optimizer, x, y, steps, wrapper=ddp)
        results["ddp_params"] = _weights(reference)

        # 3. ZeRO-1: each rank holds AdamW states for half of the parameters.
        sharded = copy.deepcopy(model)
        with _timed(timings, "zero"):
            zero = ZeroRedundancyOptimizer(list(sharded.parameters()), torch.optim.AdamW, lr=lr)
            results["zero_losses"] = _train(sharded, zero, x, y, steps)
        results["zero_params"] = _weights(sharded)
        results["zero_state_bytes"] = zero.state_bytes()
        results["timings"] = timings
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
        del dp, ddp, zero, optimizer
        leave_process_group()
    finally:
        if dist.is_initialized():  # after an error: the other ranks may be gone, so no barrier
            dist.destroy_process_group()


def single_process_reference(spec: dict[str, Any]) -> dict[str, Any]:
    """The same training on one process and the whole global batch."""
    model, inputs, targets = build_problem(spec)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.get("lr", 1e-2))
    losses = _train(model, optimizer, inputs, targets, spec.get("steps", 3))
    state_bytes = measure_model_state_bytes(model, optimizer)["optimizer"]
    return {"losses": losses, "params": model.state_dict(), "state_bytes": state_bytes}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[k].double() - b[k].double()).abs().max().item() for k in b)


def run_data_parallel_check(
    world_size: int = 2,
    steps: int = 3,
    dtype: str = "float64",
    seed: int = 0,
    bucket_cap_bytes: int = 8192,
    n_layer: int = 2,
    d_model: int = 32,
) -> dict[str, Any]:
    """Spawn ``world_size`` gloo processes, train a tiny GPT three ways, compare with one process.

    Returns max |diff| of the final weights (ours vs single process, ours vs DDP, ZeRO-1 vs single
    process, rank 0 vs rank 1), the losses, bucket/overlap information, per-rank optimizer-state bytes
    and timings: each training run (after a barrier, so without the spawn) and the whole spawn.
    """
    if not isinstance(world_size, int) or world_size < 2:
        raise ValueError(f"world_size must be an int ≥ 2, got {world_size!r}")
    spec = dict(
        steps=steps,
        dtype=dtype,
        seed=seed,
        global_batch=4 * world_size,
        bucket_cap_bytes=bucket_cap_bytes,
        n_layer=n_layer,
        d_model=d_model,
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # like each worker, so that the timings compare like with like
    try:
        torch.optim.AdamW(nn.Linear(1, 1).parameters())  # pay the one-off torch._dynamo import untimed
        start = time.perf_counter()
        reference = single_process_reference(spec)
        single_seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as out_dir:
        start = time.perf_counter()
        torch.multiprocessing.spawn(
            data_parallel_worker, args=(world_size, find_free_port(), spec, out_dir), nprocs=world_size, join=True
        )
        wall = time.perf_counter() - start
        ranks = [torch.load(Path(out_dir) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]
    r0 = ranks[0]
    return {
        "dp_vs_single": _max_diff(r0["dp_params"], reference["params"]),
        "dp_vs_ddp": _max_diff(r0["dp_params"], r0["ddp_params"]),
        "ddp_vs_single": _max_diff(r0["ddp_params"], reference["params"]),
        "zero_vs_single": _max_diff(r0["zero_params"], reference["params"]),
        "ranks_agree": max(_max_diff(r["dp_params"], r0["dp_params"]) for r in ranks),
        "zero_ranks_agree": max(_max_diff(r["zero_params"], r0["zero_params"]) for r in ranks),
        "losses_single": reference["losses"],
        "losses_dp": [sum(r["dp_losses"][i] for r in ranks) / world_size for i in range(steps)],
        "buckets": r0["dp_buckets"],
        "launch_log": r0["dp_launch_log"],
        "zero_state_bytes": [r["zero_state_bytes"] for r in ranks],
        "single_state_bytes": reference["state_bytes"],
        "timings": {**r0["timings"], "single": single_seconds},
        "wall_seconds": wall,
    }
