"""A paged KV cache: keys and values in fixed-size blocks from a shared pool, found through a block table.

A contiguous cache reserves ``context_length`` positions for every row, whatever the sequence will use. A paged
cache (vLLM's PagedAttention) cuts memory into blocks of ``block_size`` positions: a sequence takes a block
from the free list each time it crosses a block boundary and gives all of them back when it finishes, so the
memory held is what the live sequences use, rounded up to a block each. Position p of a sequence lives in
block ``table[p // block_size]`` at offset ``p % block_size``; the blocks need not be adjacent or in order.

Attention reads a row's keys back through its table (a gather), so it computes exactly what a contiguous
cache gives. :func:`memory_report` compares the two footprints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from minillm.inference.forward import kv_bytes_per_token
from minillm.model import GPTConfig

__all__ = ["PagedKVCache", "MemoryReport", "memory_report", "OutOfBlocksError"]


class OutOfBlocksError(RuntimeError):
    """The pool has no free block left for a sequence that grew."""


class PagedKVCache:
    """Block pools per layer, a block table and a length per row, a free list; a :class:`~minillm.inference.
    forward.KVStore` for any subset of rows.

    ``open(row, max_tokens)`` starts a sequence in ``row`` (reserving, not allocating, enough blocks for
    ``max_tokens``: there is no preemption, so admission must not overcommit), ``close(row)`` returns its
    blocks to the free list. Blocks are taken as positions are written.
    """

    def __init__(
        self,
        config: GPTConfig,
        num_rows: int,
        num_blocks: int,
        block_size: int = 16,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        for name, value in (("num_rows", num_rows), ("num_blocks", num_blocks), ("block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.config, self.block_size, self.num_blocks = config, block_size, num_blocks
        shape = (num_blocks * block_size, config.n_kv_head, config.head_dim)  # blocks flattened: slot = block·bs + i
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() hands out block 0 first
        self.tables: list[list[int]] = [[] for _ in range(num_rows)]
        self.lengths = [0] * num_rows
        self.reserved = [0] * num_rows  # blocks promised to each open row
        self.block_bytes = block_size * kv_bytes_per_token(config, torch.tensor([], dtype=dtype).element_size())
        self._write: torch.Tensor | None = None
        self._read: torch.Tensor | None = None
        self._allowed: torch.Tensor | None = None

    def blocks_for(self, num_tokens: int) -> int:
        return math.ceil(num_tokens / self.block_size)

    def can_open(self, max_tokens: int) -> bool:
        """Whether a sequence of up to ``max_tokens`` positions fits beside the ones already promised blocks."""
        return self.blocks_for(max_tokens) <= self.num_blocks - sum(self.reserved)

    def open(self, row: int, max_tokens: int) -> None:
        if self.tables[row] or self.reserved[row]:
            raise RuntimeError(f"row {row} is still in use; close it first")
        if not self.can_open(max_tokens):
            unpromised = self.num_blocks - sum(self.reserved)
            raise OutOfBlocksError(
                f"a sequence of {max_tokens} positions needs {self.blocks_for(max_tokens)} blocks; "
                f"{unpromised} of {self.num_blocks} are not promised to open rows"
            )
        self.reserved[row] = self.blocks_for(max_tokens)
        self.lengths[row] = 0

    def close(self, row: int) -> None:
        self.free.extend(reversed(self.tables[row]))
        self.tables[row], self.lengths[row], self.reserved[row] = [], 0, 0

    def blocks_in_use(self) -> int:
        return self.num_blocks - len(self.free)

    def bytes_held(self) -> int:
        """Memory the live sequences hold: blocks in use × bytes of one block (keys and values, every layer)."""
        return self.blocks_in_use() * self.block_bytes

    def _grow(self, row: int, length: int) -> None:
        while len(self.tables[row]) * self.block_size < length:
            if not self.free:
                raise OutOfBlocksError(f"no free block for row {row} at length {length} ({self.num_blocks} in all)")
            self.tables[row].append(self.free.pop())

    def positions(self, rows: torch.Tensor, num_new: int) -> torch.Tensor:
        row_list = rows.tolist()
        starts = [self.lengths[r] for r in row_list]
        for r, start in zip(row_list, starts, strict=True):
            self._grow(r, start + num_new)
        device = self.keys[0].device
        width = max(len(self.tables[r]) for r in row_list)
        table = torch.tensor([self.tables[r] + [0] * (width - len(self.tables[r])) for r in row_list], device=device)
        start = torch.tensor(starts, device=device)
        pos = start[:, None] + torch.arange(num_new, device=device)  # [B, T]
        num_keys = max(starts) + num_new
        keys = torch.arange(num_keys, device=device)
        bs = self.block_size
        self._write = (table.gather(1, pos // bs) * bs + pos % bs).flatten()
        # Keys past a row's length point at the table's padding (block 0); the mask below hides them.
        self._read = table.gather(1, (keys // bs)[None].expand(len(row_list), -1).clamp(max=width - 1)) * bs + keys % bs
        self._allowed = keys[None, None, :] <= pos[:, :, None]  # [B, T, T_keys]: causal, and within the row
        return pos

    def attend(
        self, layer: int, rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, H, T, D = k.shape
        self.keys[layer][self._write] = k.transpose(1, 2).reshape(B * T, H, D)
        self.values[layer][self._write] = v.transpose(1, 2).reshape(B * T, H, D)
        keys = self.keys[layer][self._read].transpose(1, 2)  # [B, T_keys, H, D] → [B, H, T_keys, D]
        values = self.values[layer][self._read].transpose(1, 2)
        return keys, values, self._allowed

    def advance(self, rows: torch.Tensor, num_new: int) -> None:
        for r in rows.tolist():
            self.lengths[r] += num_new


@dataclass(frozen=True)
class MemoryReport:
    """KV-cache bytes of a set of sequences: paged (blocks used × block bytes) against a contiguous cache that
    reserves the longest sequence (or ``reserve`` positions) for every row."""

    blocks: int
    paged_bytes: int
    contiguous_bytes: int

    @property
    def saving(self) -> float:
        """contiguous / paged: how many times less memory the paged cache holds."""
        return self.contiguous_bytes / self.paged_bytes if self.paged_bytes else math.inf


def memory_report(
    config: GPTConfig,
    lengths: Sequence[int],
    block_size: int = 16,
    bytes_per_value: int = 4,
    reserve: int | None = None,
) -> MemoryReport:
    """Bytes for sequences of ``lengths`` positions held paged vs contiguous (each row reserves ``reserve``
    positions, default the longest length: a server that must fit any request reserves ``context_length``)."""
    if not lengths or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in lengths):
        raise ValueError(f"lengths must be a non-empty list of non-negative ints, got {lengths!r}")
    per_token = kv_bytes_per_token(config, bytes_per_value)
    blocks = sum(math.ceil(n / block_size) for n in lengths)
    reserve = max(lengths) if reserve is None else reserve
    return MemoryReport(blocks, blocks * block_size * per_token, len(lengths) * reserve * per_token)
