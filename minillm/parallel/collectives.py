"""Collectives simulated over a list of per-rank tensors, written out as rings.

A real all-reduce runs on N devices at once; here "rank r" is simply ``tensors[r]`` and each ring step
moves one chunk from every rank to its right-hand neighbour. The result is the same arithmetic a ring
performs on real hardware, and a :class:`CommLedger` counts every element sent so that the measured
traffic can be checked against the closed form 2·(n−1)/n·S of a ring all-reduce.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class CommLedger:
    """Counts the elements each simulated rank sends, per collective.

    ``records`` holds one ``(op, elements sent per rank)`` entry per collective call, in call order.
    """

    world_size: int
    records: list[tuple[str, list[int]]] = field(default_factory=list)

    def record(self, op: str, sent: list[int]) -> None:
        if len(sent) != self.world_size:
            raise ValueError(f"expected {self.world_size} per-rank counts, got {len(sent)}")
        self.records.append((op, list(sent)))

    def sent_per_rank(self, op: str | None = None) -> list[int]:
        """Total elements sent by each rank, over every collective (or only those named ``op``)."""
        totals = [0] * self.world_size
        for name, sent in self.records:
            if op is None or name == op:
                totals = [t + s for t, s in zip(totals, sent, strict=True)]
        return totals


def _check_ranks(tensors: list[torch.Tensor]) -> int:
    if not isinstance(tensors, (list, tuple)) or len(tensors) == 0:
        raise ValueError("expected a non-empty list with one tensor per rank")
    first = tensors[0]
    for rank, tensor in enumerate(tensors):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"rank {rank} holds {type(tensor).__name__}, expected a torch.Tensor")
        if tensor.shape != first.shape or tensor.dtype != first.dtype:
            raise ValueError(
                f"rank {rank} holds shape {tuple(tensor.shape)} {tensor.dtype}, "
                f"rank 0 holds {tuple(first.shape)} {first.dtype}: all ranks must match"
            )
    return len(tensors)


def _chunks(tensor: torch.Tensor, n: int) -> list[torch.Tensor]:
    """Split a flattened copy into ``n`` nearly equal chunks (the first ones one element larger)."""
    return [c.clone() for c in torch.tensor_split(tensor.reshape(-1), n)]


def _ring_reduce_scatter_chunks(bufs: list[list[torch.Tensor]]) -> list[int]:
    """In place: after n−1 steps rank r holds the complete sum of chunk r (other chunks are partial)."""
    n = len(bufs)
    sent = [0] * n
    for step in range(n - 1):
        # Every rank sends at once: rank r passes its running sum of chunk (r−step−1) to rank r+1.
        outgoing = [(r, (r - step - 1) % n, bufs[r][(r - step - 1) % n]) for r in range(n)]
        for r, idx, payload in outgoing:
            receiver = (r + 1) % n
            bufs[receiver][idx] = bufs[receiver][idx] + payload
            sent[r] += payload.numel()
    return sent


def _ring_all_gather_chunks(bufs: list[list[torch.Tensor]]) -> list[int]:
    """In place: rank r starts owning chunk r; after n−1 steps every rank holds every chunk."""
    n = len(bufs)
    sent = [0] * n
    for step in range(n - 1):
        outgoing = [(r, (r - step) % n, bufs[r][(r - step) % n]) for r in range(n)]
        for r, idx, payload in outgoing:
            bufs[(r + 1) % n][idx] = payload.clone()
            sent[r] += payload.numel()
    return sent


def ring_all_reduce(
    tensors: list[torch.Tensor], op: str = "sum", ledger: CommLedger | None = None
) -> list[torch.Tensor]:
    """Sum (or average, ``op="mean"``) the ranks' tensors: ring reduce-scatter, then ring all-gather.

    Returns one tensor per rank, all bit-identical (each chunk is summed once, by its owner, then copied).
    """
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', got {op!r}")
    n = _check_ranks(tensors)
    bufs = [_chunks(t, n) for t in tensors]
    sent = _ring_reduce_scatter_chunks(bufs)
    if op == "mean":
        for r in range(n):
            bufs[r][r] = bufs[r][r] / n
    sent = [a + b for a, b in zip(sent, _ring_all_gather_chunks(bufs), strict=True)]
    if ledger is not None:
        ledger.record("all_reduce", sent)
    return [torch.cat(b).reshape(tensors[0].shape) for b in bufs]


def ring_reduce_scatter(
    tensors: list[torch.Tensor], op: str = "sum", ledger: CommLedger | None = None
) -> list[torch.Tensor]:
    """Rank r receives the reduced chunk r of the flattened tensors (chunks as ``torch.tensor_split``)."""
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', got {op!r}")
    n = _check_ranks(tensors)
    bufs = [_chunks(t, n) for t in tensors]
    sent = _ring_reduce_scatter_chunks(bufs)
    if ledger is not None:
        ledger.record("reduce_scatter", sent)
    return [bufs[r][r] / n if op == "mean" else bufs[r][r] for r in range(n)]


def ring_all_gather(shards: list[torch.Tensor], ledger: CommLedger | None = None) -> list[torch.Tensor]:
    """Every rank receives the concatenation of all ranks' 1-D shards (shards may differ in length)."""
    if not isinstance(shards, (list, tuple)) or len(shards) == 0:
        raise ValueError("expected a non-empty list with one shard per rank")
    for rank, shard in enumerate(shards):
        if not isinstance(shard, torch.Tensor) or shard.dim() != 1:
            raise ValueError(f"rank {rank}: all-gather expects 1-D tensor shards, got {shard!r:.60}")
    n = len(shards)
    bufs = [[shard.clone() if r == q else torch.zeros(0) for q in range(n)] for r, shard in enumerate(shards)]
    sent = _ring_all_gather_chunks(bufs)
    if ledger is not None:
        ledger.record("all_gather", sent)
    return [torch.cat(b) for b in bufs]


def all_to_all(send: list[list[torch.Tensor]], ledger: CommLedger | None = None) -> list[list[torch.Tensor]]:
    """Personalised exchange: ``send[r][q]`` is what rank r sends to rank q; returns ``recv`` with
    ``recv[q][r] = send[r][q]``. Messages may differ in size (expert parallelism's token counts vary per step);
    a rank's message to itself stays local and costs nothing. Payloads keep their autograd history, so the
    backward pass (the same exchange in reverse) happens through them."""
    n = len(send)
    if n == 0 or any(not isinstance(row, (list, tuple)) or len(row) != n for row in send):
        raise ValueError(f"all_to_all expects an n × n list of tensors (one per sender and receiver), got {n} rows")
    recv = [[send[r][q] for r in range(n)] for q in range(n)]
    if ledger is not None:
        ledger.record("all_to_all", [sum(send[r][q].numel() for q in range(n) if q != r) for r in range(n)])
    return recv
