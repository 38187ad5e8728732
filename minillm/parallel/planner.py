"""A layout planner: which (data, tensor, pipeline) splits, ZeRO stage and recomputation fit in memory.

For every factorisation devices = dp · tp · pp it estimates the bytes on the busiest device — model
states of its 1/(tp·pp) share of the parameters, sharded over dp by ZeRO, plus the activations of its
L/pp layers times the micro-batches 1F1B keeps in flight on the first stage — and the bytes each rank
sends per step. It is an estimate (no logits, buffers or fragmentation), good for ranking layouts.
"""

from __future__ import annotations

from dataclasses import dataclass

from minillm.parallel.comm import data_parallel_bytes, pipeline_parallel_bytes, tensor_parallel_bytes
from minillm.parallel.memory import activation_bytes_per_layer, bytes_per_param
from minillm.parallel.zero import zero_model_state_bytes


@dataclass(frozen=True)
class Layout:
    """One candidate layout and its per-device memory (bytes) and per-rank traffic (bytes per step)."""

    dp: int
    tp: int
    pp: int
    zero_stage: int
    recompute: str
    model_state_bytes: int
    activation_bytes: int
    comm_bytes: float

    @property
    def total_bytes(self) -> int:
        return self.model_state_bytes + self.activation_bytes


def transformer_params(n_layer: int, hidden: int, vocab_size: int, seq_len: int) -> int:
    """GPT-2-style parameter count: V·h + s·h + L·(12h² + 13h) + 2h (tied head, learned positions)."""
    return vocab_size * hidden + seq_len * hidden + n_layer * (12 * hidden * hidden + 13 * hidden) + 2 * hidden


def plan(
    n_layer: int,
    hidden: int,
    n_head: int,
    vocab_size: int,
    seq_len: int,
    devices: int,
    device_memory_bytes: float,
    micro_batch: int = 1,
    micro_batches: int = 8,
    precision: str = "mixed",
    optimizer: str = "adamw",
    only_fitting: bool = True,
) -> list[Layout]:
    """All layouts for ``devices`` devices (tp | n_head, pp | n_layer), cheapest traffic first.

    ``micro_batches`` is the number of micro-batches per step on each data-parallel rank.
    """
    for value, name in ((n_layer, "n_layer"), (hidden, "hidden"), (n_head, "n_head"), (devices, "devices")):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if device_memory_bytes <= 0:
        raise ValueError(f"device_memory_bytes must be positive, got {device_memory_bytes!r}")
    num_params = transformer_params(n_layer, hidden, vocab_size, seq_len)
    value_bytes = 4 if precision == "fp32" else 2
    grad_bytes = bytes_per_param(optimizer, precision)[1]
    layouts = []
    for tp in range(1, devices + 1):
        if devices % tp or n_head % tp or hidden % tp:
            continue
        for pp in range(1, devices // tp + 1):
            if (devices // tp) % pp or n_layer % pp:
                continue
            dp = devices // (tp * pp)
            local_params = -(-num_params // (tp * pp))
            in_flight = min(pp, micro_batches)  # 1F1B's first stage
            for stage in (0, 1, 2, 3) if dp > 1 else (0,):
                states = zero_model_state_bytes(local_params, dp, stage, optimizer, precision).total
                comm = data_parallel_bytes(local_params, dp, grad_bytes, stage) if dp > 1 else 0.0
                comm += tensor_parallel_bytes(
                    n_layer // pp, micro_batch, seq_len, hidden, tp, micro_batches, value_bytes
                )
                comm += pipeline_parallel_bytes(micro_batch, seq_len, hidden, pp, micro_batches, value_bytes)
                for recompute in ("none", "selective", "full"):
                    per_layer = activation_bytes_per_layer(
                        seq_len,
                        micro_batch,
                        hidden,
                        n_head,
                        tensor_parallel=tp,
                        sequence_parallel=tp > 1,
                        recompute=recompute,
                        bytes_per_value=value_bytes,
                    )
                    layout = Layout(dp, tp, pp, stage, recompute, states, per_layer * (n_layer // pp) * in_flight, comm)
                    if layout.total_bytes <= device_memory_bytes or not only_fitting:
                        layouts.append(layout)
    return sorted(layouts, key=lambda l: (l.comm_bytes, l.total_bytes))
