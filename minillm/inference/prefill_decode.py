"""Prefill vs decode: why the first token is cheap per token and every later one is not.

* **Prefill** runs the whole prompt through the model at once: T tokens share one read of every weight, so
  it is a large matmul, bound by arithmetic.
* **Decode** runs one new token per sequence per step against the KV cache: each step reads every weight
  and the whole cache to do a few FLOPs per byte, so it is bound by memory bandwidth. Batching helps
  decode because B sequences share that one read of the weights.

Memory-bound prediction for one decode step of a batch of B at context length T:

    bytes per step  =  weight bytes  +  B · T · (KV bytes per token)
    tokens / s      ≈  B · bandwidth / bytes per step

with the bandwidth measured by a large tensor copy (:func:`measure_bandwidth`). The timings use the model's
own KV-cache path (``model(ids, kv_cache=cache)``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from minillm.inference.forward import eval_mode, kv_bytes_per_token
from minillm.inference.quantize import weight_bytes
from minillm.model import GPT

__all__ = [
    "measure_bandwidth",
    "decode_weight_bytes",
    "decode_bytes_per_step",
    "predicted_decode_tokens_per_s",
    "time_prefill",
    "time_decode_step",
    "PhaseTiming",
    "prefill_decode_sweep",
]


def measure_bandwidth(num_bytes: int = 256 * 2**20, repeats: int = 5) -> float:
    """Memory bandwidth in bytes/s: a copy of ``num_bytes`` reads them and writes them (2 × bytes moved), best
    of ``repeats``. Make it much larger than the CPU caches (the default 256 MiB is)."""
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, int) or num_bytes < 4:
        raise ValueError(f"num_bytes must be an int ≥ 4, got {num_bytes!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    src = torch.ones(num_bytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch the pages once so the first timing is not page faults
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.numel() * 4 / best


def decode_weight_bytes(model: GPT) -> int:
    """Weight bytes a decode step reads: every stored weight except the lookup tables it reads one row of
    (the position table, and the token table unless it is the tied output head)."""
    lookups = 0
    if model.config.pos == "learned":
        lookups += model.pos_emb.weight.numel() * model.pos_emb.weight.element_size()
    if not model.config.tie_embeddings:
        lookups += model.tok_emb.weight.numel() * model.tok_emb.weight.element_size()
    return weight_bytes(model) - lookups


def decode_bytes_per_step(model: GPT, batch_size: int, context_len: int) -> int:
    """Bytes one decode step reads: the weights once for the batch, plus every row's KV cache of ``context_len``
    positions (in the model's dtype)."""
    value_bytes = model.tok_emb.weight.element_size()
    return decode_weight_bytes(model) + batch_size * context_len * kv_bytes_per_token(model.config, value_bytes)


def predicted_decode_tokens_per_s(model: GPT, batch_size: int, context_len: int, bandwidth: float) -> float:
    """The memory-bound ceiling: batch_size tokens per step, each step taking bytes ÷ ``bandwidth`` seconds."""
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be positive bytes/s, got {bandwidth!r}")
    return batch_size * bandwidth / decode_bytes_per_step(model, batch_size, context_len)


def _check_shape(model: GPT, batch_size: int, seq_len: int) -> None:
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if seq_len > model.config.context_length:
        raise ValueError(f"seq_len={seq_len} exceeds the context length {model.config.context_length}")


def _ids(model: GPT, batch_size: int, seq_len: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (batch_size, seq_len), generator=g)
    return ids.to(model.tok_emb.weight.device)


def time_prefill(model: GPT, batch_size: int, seq_len: int, repeats: int = 3) -> float:
    """Median seconds to run a [batch_size, seq_len] prompt into an empty KV cache."""
    _check_shape(model, batch_size, seq_len)
    ids = _ids(model, batch_size, seq_len)
    times = []
    with eval_mode(model):
        for _ in range(repeats + 1):  # the first run warms up
            cache = model.new_kv_cache(batch_size)
            start = time.perf_counter()
            model(ids, kv_cache=cache)
            times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def time_decode_step(model: GPT, batch_size: int, context_len: int, steps: int = 8, repeats: int = 3) -> float:
    """Median seconds of one cached decode step (one new token per row) after ``context_len`` cached positions."""
    _check_shape(model, batch_size, context_len + steps)
    ids = _ids(model, batch_size, context_len + steps)
    times = []
    with eval_mode(model):
        for _ in range(repeats + 1):
            cache = model.new_kv_cache(batch_size)
            model(ids[:, :context_len], kv_cache=cache)
            start = time.perf_counter()
            for t in range(context_len, context_len + steps):
                model(ids[:, t : t + 1], kv_cache=cache)
            times.append((time.perf_counter() - start) / steps)
    return statistics.median(times[1:])


@dataclass(frozen=True)
class PhaseTiming:
    """One (batch, T) point: prefill of T tokens per row, and a decode step at context T."""

    batch_size: int
    seq_len: int
    prefill_s: float
    decode_step_s: float

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.batch_size * self.seq_len / self.prefill_s

    @property
    def decode_tokens_per_s(self) -> float:
        return self.batch_size / self.decode_step_s


def prefill_decode_sweep(
    model: GPT, seq_lens: Sequence[int], batch_sizes: Sequence[int], steps: int = 8, repeats: int = 3
) -> list[PhaseTiming]:
    """:func:`time_prefill` and :func:`time_decode_step` (at context T) at every (batch, T), batch-major; each
    T plus ``steps`` must fit the context."""
    rows = []
    for batch_size in batch_sizes:
        for seq_len in seq_lens:
            prefill = time_prefill(model, batch_size, seq_len, repeats)
            decode = time_decode_step(model, batch_size, seq_len, steps, repeats)
            rows.append(PhaseTiming(batch_size, seq_len, prefill, decode))
    return rows
