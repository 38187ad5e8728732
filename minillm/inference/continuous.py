"""Continuous batching: a finished request's slot goes to the next waiting request at the very next step.

Static batching takes ``max_batch`` requests, runs them until the *longest* is done and only then takes the
next group: a request that wanted 3 tokens holds its slot while a neighbour generates 60. Continuous batching
(Orca's iteration-level scheduling) decides at every step: finished requests leave, waiting ones join, and the
batch stays full. Each row then sits at its own position with its own history, which is what a cache with a
length per row gives (:class:`SlotKVCache` here, or the block-table :class:`~minillm.inference.paged_kv.
PagedKVCache`).

One step: admit waiting requests into free slots and prefill each (its first new token comes from the
prefill); decode one token for every row that was already running; retire rows that reached their budget or
produced ``eos_id``. :class:`Schedule` records which request held each slot at each step, for a timeline plot.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from minillm.inference.forward import check_supported, eval_mode, forward_rows, kv_bytes_per_token
from minillm.inference.paged_kv import PagedKVCache
from minillm.inference.requests import as_budgets, as_token_lists, check_eos, check_sampling
from minillm.model import GPT, GPTConfig, sample_next_token

__all__ = ["Request", "Schedule", "SlotKVCache", "continuous_batching", "static_batching"]


@dataclass(frozen=True)
class Request:
    """A prompt (token ids) and how many new tokens it asks for."""

    prompt: Sequence[int]
    max_new_tokens: int


@dataclass
class Schedule:
    """What a scheduler did: each request's new tokens, and per step which request held each slot.

    ``slots[s][j]`` is the request index in slot j at step s (None: idle); ``kv_bytes[s]`` the KV-cache memory
    held during step s.
    """

    tokens: list[list[int]]
    slots: list[list[int | None]] = field(default_factory=list)
    kv_bytes: list[int] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.slots)

    @property
    def timeline(self) -> list[list[int]]:
        """Per step, the requests that were active (produced a token)."""
        return [[r for r in step if r is not None] for step in self.slots]

    @property
    def utilisation(self) -> float:
        """Busy slot-steps over all slot-steps: 1.0 means no slot ever idled."""
        total = sum(len(step) for step in self.slots)
        return sum(len(t) for t in self.tokens) / total if total else 0.0


class SlotKVCache:
    """A contiguous cache with a slot per row: [rows, n_kv_head, context_length, head_dim] per layer and a
    length per row. Each slot reserves the whole context, used or not (compare :class:`PagedKVCache`)."""

    def __init__(self, config: GPTConfig, num_rows: int, device: torch.device, dtype: torch.dtype) -> None:
        shape = (num_rows, config.n_kv_head, config.context_length, config.head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.lengths = torch.zeros(num_rows, dtype=torch.long, device=device)
        per_token = kv_bytes_per_token(config, torch.tensor([], dtype=dtype).element_size())
        self._bytes = num_rows * config.context_length * per_token
        self._pos: torch.Tensor | None = None
        self._allowed: torch.Tensor | None = None
        self._num_keys = 0

    def can_open(self, max_tokens: int) -> bool:
        return True  # every slot already reserves the whole context

    def open(self, row: int, max_tokens: int) -> None:
        self.lengths[row] = 0

    def close(self, row: int) -> None:
        self.lengths[row] = 0

    def bytes_held(self) -> int:
        return self._bytes

    def positions(self, rows: torch.Tensor, num_new: int) -> torch.Tensor:
        start = self.lengths[rows]
        self._pos = start[:, None] + torch.arange(num_new, device=start.device)
        self._num_keys = int(start.max()) + num_new
        keys = torch.arange(self._num_keys, device=start.device)
        self._allowed = keys[None, None, :] <= self._pos[:, :, None]
        return self._pos

    def attend(
        self, layer: int, rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # keys[rows[b], :, pos[b, t]] ← k[b, :, t]: advanced indices around a slice put [B, T] first.
        self.keys[layer][rows[:, None], :, self._pos] = k.transpose(1, 2)
        self.values[layer][rows[:, None], :, self._pos] = v.transpose(1, 2)
        n = self._num_keys
        return self.keys[layer][rows, :, :n], self.values[layer][rows, :, :n], self._allowed

    def advance(self, rows: torch.Tensor, num_new: int) -> None:
        self.lengths[rows] += num_new


def _schedule(
    model: GPT,
    requests: Sequence[Request],
    max_batch: int,
    continuous: bool,
    temperature: float,
    generator: torch.Generator | None,
    eos_id: int | None,
    kv: str,
    block_size: int,
    num_blocks: int | None,
) -> Schedule:
    check_supported(model)
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max_batch must be a positive int, got {max_batch!r}")
    if not isinstance(requests, Sequence) or len(requests) == 0:
        raise ValueError("requests is empty: pass at least one Request")
    if not all(isinstance(r, Request) for r in requests):
        raise TypeError("requests must be Request(prompt, max_new_tokens) objects")
    prompts = as_token_lists(model, [r.prompt for r in requests])
    budgets = as_budgets(model, prompts, [r.max_new_tokens for r in requests])
    check_eos(model, eos_id)
    check_sampling(temperature)
    device, dtype = model.tok_emb.weight.device, model.tok_emb.weight.dtype
    if kv == "contiguous":
        cache: SlotKVCache | PagedKVCache = SlotKVCache(model.config, max_batch, device, dtype)
    elif kv == "paged":
        blocks = num_blocks or max_batch * -(-model.config.context_length // block_size)
        cache = PagedKVCache(model.config, max_batch, blocks, block_size, device, dtype)
        if not all(cache.can_open(len(p) + b) for p, b in zip(prompts, budgets, strict=True)):
            raise ValueError(f"a request needs more than the pool's {blocks} blocks of {block_size} positions")
    else:
        raise ValueError(f"kv must be 'contiguous' or 'paged', got {kv!r}")

    out: list[list[int]] = [[] for _ in requests]
    schedule = Schedule(out)
    waiting = deque(range(len(requests)))
    slot_of: list[int | None] = [None] * max_batch  # request in each slot
    last = torch.zeros(max_batch, dtype=torch.long, device=device)  # each slot's newest token
    with eval_mode(model):
        while waiting or any(r is not None for r in slot_of):
            running = [s for s, r in enumerate(slot_of) if r is not None]
            emitted: dict[int, int] = {}
            if continuous or not running:  # static batching admits only into an empty batch
                for s in range(max_batch):
                    if (
                        slot_of[s] is None
                        and waiting
                        and cache.can_open(len(prompts[waiting[0]]) + budgets[waiting[0]])
                    ):
                        r = waiting.popleft()
                        cache.open(s, len(prompts[r]) + budgets[r])
                        slot_of[s] = r
                        ids = torch.tensor([prompts[r]], device=device)
                        logits = forward_rows(model, ids, cache, torch.tensor([s], device=device))[:, -1]
                        emitted[s] = int(sample_next_token(logits, temperature, generator=generator)[0])
            if running:
                rows = torch.tensor(running, device=device)
                logits = forward_rows(model, last[rows][:, None], cache, rows)[:, -1]
                for s, token in zip(
                    running, sample_next_token(logits, temperature, generator=generator).tolist(), strict=True
                ):
                    emitted[s] = token
            schedule.slots.append([r if s in emitted else None for s, r in enumerate(slot_of)])
            schedule.kv_bytes.append(cache.bytes_held())
            for s, token in emitted.items():
                r = slot_of[s]
                out[r].append(token)
                last[s] = token
                if len(out[r]) == budgets[r] or token == eos_id:
                    cache.close(s)
                    slot_of[s] = None
    return schedule


def continuous_batching(
    model: GPT,
    requests: Sequence[Request],
    max_batch: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    eos_id: int | None = None,
    kv: str = "contiguous",
    block_size: int = 16,
    num_blocks: int | None = None,
) -> Schedule:
    """Serve ``requests`` with at most ``max_batch`` running at once, admitting a waiting one as soon as a slot
    frees. ``kv`` "contiguous" gives each slot the whole context; "paged" keeps keys in a pool of
    ``num_blocks`` blocks of ``block_size`` (default: as many as the contiguous cache), admitting a request only
    when its prompt plus budget fits the blocks not yet promised. Greedy (``temperature`` 0) gives every
    request the tokens ``GPT.generate`` gives it alone."""
    return _schedule(model, requests, max_batch, True, temperature, generator, eos_id, kv, block_size, num_blocks)


def static_batching(
    model: GPT,
    requests: Sequence[Request],
    max_batch: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    eos_id: int | None = None,
    kv: str = "contiguous",
    block_size: int = 16,
    num_blocks: int | None = None,
) -> Schedule:
    """The baseline: the same steps and cache, but the next ``max_batch`` requests join only when the whole
    batch has finished, so short requests' slots idle while the longest runs."""
    return _schedule(model, requests, max_batch, False, temperature, generator, eos_id, kv, block_size, num_blocks)
