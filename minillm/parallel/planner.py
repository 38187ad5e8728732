"""A layout planner: which (data, tensor, pipeline) splits, ZeRO stage and recomputation fit, and how fast they run.

For every factorisation devices = dp · tp · pp it estimates the bytes on the busiest device — model states of
its 1/(tp·pp) share of the parameters, sharded over dp by ZeRO, plus the activations of its L/pp layers times
the micro-batches 1F1B keeps in flight on the first stage — and then ranks the layouts that fit by a modelled
**step time**, not by traffic: traffic alone prefers a deep pipeline with full recomputation, which idles in
its bubble and computes every forward twice.

The step-time model, for a global batch of G sequences of s tokens and m = G / (dp · b) micro-batches per
data-parallel rank (all times per optimizer step, on one device):

- compute = FLOPs / (devices · peak · utilisation), FLOPs = tokens · (6N + 12·L·h·s) (Kaplan et al. 2020 §2.1;
  the attention term as in PaLM App. B), plus the recomputation: full recomputation runs every forward twice,
  +(2N + 4·L·h·s) per token = +1/3 (Narayanan et al. 2021, Eq. 3: 96 instead of 72); selective recomputation
  repeats only the attention core, +4·L·h·s;
- tensor parallelism: 4 all-reduces of b·s·h values per layer and micro-batch (Shoeybi et al. 2019 §3), 6 with
  full recomputation (its second forward repeats the 2 forward all-reduces); they sit between the matmuls, so
  none of it is hidden;
- pipeline: one activation forward and one gradient backward per micro-batch at each stage boundary;
- bubble: with per-micro-batch time t_mb (compute, TP and pipeline traffic), 1F1B and GPipe take (m + p − 1)
  t_mb whatever the forward/backward ratio, so the bubble adds (p − 1) t_mb — (p−1)/(m+p−1) of the wall time;
- data parallelism: the ring all-reduce of the gradients (2(n−1)/n · bytes; ZeRO-3 1.5×, see
  :func:`minillm.parallel.comm.data_parallel_bytes`). Assumption: buckets are launched as gradients become final
  (as DDP does), and with gradient accumulation that happens only in the last micro-batch's backward, so the
  all-reduce hides behind that backward (2/3 of a micro-batch's compute, plus its recomputation) and only the
  rest is exposed.

Bandwidth: ranks are numbered tp fastest, then dp, then pp (Megatron-LM's order), ``gpus_per_node`` consecutive
ranks share a node; a group whose ranks all lie in one node talks at the intra-node bandwidth (NVLink), any
other at the inter-node bandwidth (InfiniBand) — a ring is as fast as its slowest link. Not modelled: latency,
the embedding and LM head's extra work on the first and last stage, and the lower utilisation of the smaller
matmuls that wide tensor parallelism leaves each device. It is an estimate, good for ranking layouts.
"""

from __future__ import annotations

from dataclasses import dataclass

from minillm.parallel.comm import data_parallel_bytes, pipeline_parallel_bytes, tensor_parallel_bytes
from minillm.parallel.memory import _check_positive_int, activation_bytes_per_layer, bytes_per_param
from minillm.parallel.zero import zero_model_state_bytes

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Hardware:
    """The cluster as the step-time model sees it; defaults: 80 GB A100 nodes as in Narayanan et al. 2021 §5.

    ``peak_flops``: dense bf16 FLOP/s of one device (A100: 312 T). ``utilisation``: the share of it that
    training reaches (Megatron-LM reached about half). Bandwidths are bytes/s per device and direction:
    NVLink 3 through NVSwitch inside a node (300 GB/s), one 200 Gb/s HDR InfiniBand adapter per GPU between
    nodes (25 GB/s).
    """

    peak_flops: float = 312e12
    utilisation: float = 0.5
    gpus_per_node: int = 8
    intra_node_bandwidth: float = 300e9
    inter_node_bandwidth: float = 25e9

    def __post_init__(self) -> None:
        for name in ("peak_flops", "utilisation", "intra_node_bandwidth", "inter_node_bandwidth"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be a positive int, got {self.gpus_per_node!r}")


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step on one device, by cause; ``total`` is the modelled step time.

    ``compute`` includes ``recompute``; ``data_comm`` is the whole gradient collective, of which only
    ``data_comm_exposed`` (what the last backward cannot hide) adds to the step.
    """

    compute: float
    recompute: float
    tensor_comm: float
    pipeline_comm: float
    bubble: float
    data_comm: float
    data_comm_exposed: float

    @property
    def total(self) -> float:
        return self.compute + self.tensor_comm + self.pipeline_comm + self.bubble + self.data_comm_exposed


@dataclass(frozen=True)
class Layout:
    """One candidate layout: per-device memory (bytes), per-rank traffic (bytes per step) and step time."""

    dp: int
    tp: int
    pp: int
    zero_stage: int
    recompute: str
    micro_batches: int
    model_state_bytes: int
    activation_bytes: int
    comm_bytes: float
    time: StepTime

    @property
    def total_bytes(self) -> int:
        return self.model_state_bytes + self.activation_bytes

    @property
    def step_time(self) -> float:
        return self.time.total

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the wall time of the pipelined part: (p − 1)/(m + p − 1)."""
        return (self.pp - 1) / (self.micro_batches + self.pp - 1)


def transformer_params(n_layer: int, hidden: int, vocab_size: int, seq_len: int) -> int:
    """GPT-2-style parameter count: V·h + s·h + L·(12h² + 13h) + 2h (tied head, learned positions)."""
    return vocab_size * hidden + seq_len * hidden + n_layer * (12 * hidden * hidden + 13 * hidden) + 2 * hidden


def training_flops_per_token(n_layer: int, hidden: int, vocab_size: int, seq_len: int, recompute: str = "none") -> int:
    """FLOPs to train on one token: 6N + 12·L·h·s, plus what recomputation repeats of the forward.

    N leaves out the position table (a lookup, no matmul); the tied token embedding counts once, as the LM head.
    A forward pass is a third of the 6N + 12Lhs: full recomputation adds 2N + 4Lhs, selective recomputation only
    the attention core's 4Lhs (QKᵀ and the weighted sum of V).
    """
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    n = transformer_params(n_layer, hidden, vocab_size, seq_len) - seq_len * hidden
    attention = 12 * n_layer * hidden * seq_len
    extra = {"none": 0, "selective": attention // 3, "full": 2 * n + attention // 3}[recompute]
    return 6 * n + attention + extra


def group_in_one_node(dp: int, tp: int, pp: int, kind: str, gpus_per_node: int) -> bool:
    """Whether every ``kind`` ('dp', 'tp' or 'pp') group lies inside one node.

    Rank = (pipeline stage · dp + data rank) · tp + tensor rank, so a tensor group is tp consecutive ranks, a data
    group strides by tp and a pipeline group by tp·dp.
    """
    size, stride = {"tp": (tp, 1), "dp": (dp, tp), "pp": (pp, tp * dp)}[kind]
    for rank in range(dp * tp * pp):
        first = rank - (rank // stride % size) * stride  # the group's member with coordinate 0
        if len({(first + k * stride) // gpus_per_node for k in range(size)}) > 1:
            return False
    return True


def _bandwidth(dp: int, tp: int, pp: int, kind: str, hardware: Hardware) -> float:
    inside = group_in_one_node(dp, tp, pp, kind, hardware.gpus_per_node)
    return hardware.intra_node_bandwidth if inside else hardware.inter_node_bandwidth


def step_time(
    n_layer: int,
    hidden: int,
    vocab_size: int,
    seq_len: int,
    dp: int,
    tp: int,
    pp: int,
    micro_batches: int,
    micro_batch: int = 1,
    zero_stage: int = 0,
    recompute: str = "none",
    hardware: Hardware | None = None,
    precision: str = "mixed",
    optimizer: str = "adamw",
) -> StepTime:
    """The modelled seconds of one optimizer step of a layout (see the module docstring for the model).

    ``micro_batches`` is m, the micro-batches per step on each data-parallel rank (the pipeline's m).
    """
    hw = Hardware() if hardware is None else hardware
    for value, name in (
        (dp, "dp"),
        (tp, "tp"),
        (pp, "pp"),
        (micro_batches, "micro_batches"),
        (micro_batch, "micro_batch"),
    ):
        _check_positive_int(value, name)
    if n_layer % pp or hidden % tp:
        raise ValueError(f"pp={pp} must divide n_layer={n_layer} and tp={tp} must divide hidden={hidden}")
    devices = dp * tp * pp
    m = micro_batches
    tokens = dp * m * micro_batch * seq_len
    device_flops = hw.peak_flops * hw.utilisation
    base = tokens * training_flops_per_token(n_layer, hidden, vocab_size, seq_len) / (devices * device_flops)
    compute = (
        tokens * training_flops_per_token(n_layer, hidden, vocab_size, seq_len, recompute) / (devices * device_flops)
    )
    value_bytes = 4 if precision == "fp32" else 2
    tp_all_reduces = 1.5 if recompute == "full" else 1.0  # the second forward repeats the forward all-reduces
    tp_bytes = tp_all_reduces * tensor_parallel_bytes(n_layer // pp, micro_batch, seq_len, hidden, tp, m, value_bytes)
    tensor_comm = tp_bytes / _bandwidth(dp, tp, pp, "tp", hw) if tp > 1 else 0.0
    pp_bytes = pipeline_parallel_bytes(micro_batch, seq_len, hidden, pp, m, value_bytes)
    pipeline_comm = pp_bytes / _bandwidth(dp, tp, pp, "pp", hw) if pp > 1 else 0.0
    per_micro_batch = (compute + tensor_comm + pipeline_comm) / m
    bubble = (pp - 1) * per_micro_batch
    num_params = transformer_params(n_layer, hidden, vocab_size, seq_len)
    local_params = -(-num_params // (tp * pp))
    grad_bytes = bytes_per_param(optimizer, precision)[1]
    if dp > 1:
        data_comm = data_parallel_bytes(local_params, dp, grad_bytes, zero_stage) / _bandwidth(dp, tp, pp, "dp", hw)
    else:
        data_comm = 0.0
    last_backward = (2 / 3 * base + (compute - base)) / m  # where the gradient buckets can overlap
    return StepTime(
        compute=compute,
        recompute=compute - base,
        tensor_comm=tensor_comm,
        pipeline_comm=pipeline_comm,
        bubble=bubble,
        data_comm=data_comm,
        data_comm_exposed=max(0.0, data_comm - last_backward),
    )


def plan(
    n_layer: int,
    hidden: int,
    n_head: int,
    vocab_size: int,
    seq_len: int,
    devices: int,
    device_memory_bytes: float,
    micro_batch: int = 1,
    global_batch: int = 8,
    hardware: Hardware | None = None,
    precision: str = "mixed",
    optimizer: str = "adamw",
    only_fitting: bool = True,
) -> list[Layout]:
    """All layouts for ``devices`` devices (tp | n_head, pp | n_layer), fastest modelled step first.

    ``global_batch`` sequences per optimizer step are the same for every layout (so the optimizer sees the
    same batch); each data-parallel rank runs m = global_batch / (dp · micro_batch) micro-batches, and splits
    that do not divide it are skipped. Ties (e.g. ZeRO-0/1/2, whose traffic is equal) go to less traffic,
    then to less memory.
    """
    for value, name in (
        (n_layer, "n_layer"),
        (hidden, "hidden"),
        (n_head, "n_head"),
        (devices, "devices"),
        (micro_batch, "micro_batch"),
        (global_batch, "global_batch"),
    ):
        _check_positive_int(value, name)
    if device_memory_bytes <= 0:
        raise ValueError(f"device_memory_bytes must be positive, got {device_memory_bytes!r}")
    hw = Hardware() if hardware is None else hardware
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
            if global_batch % (dp * micro_batch):
                continue
            m = global_batch // (dp * micro_batch)
            local_params = -(-num_params // (tp * pp))
            in_flight = min(pp, m)  # 1F1B's first stage
            for stage in (0, 1, 2, 3) if dp > 1 else (0,):
                states = zero_model_state_bytes(local_params, dp, stage, optimizer, precision).total
                dp_bytes = data_parallel_bytes(local_params, dp, grad_bytes, stage) if dp > 1 else 0.0
                pp_bytes = pipeline_parallel_bytes(micro_batch, seq_len, hidden, pp, m, value_bytes)
                for recompute in RECOMPUTE:
                    tp_bytes = tensor_parallel_bytes(n_layer // pp, micro_batch, seq_len, hidden, tp, m, value_bytes)
                    tp_bytes *= 1.5 if recompute == "full" else 1.0
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
                    time = step_time(
                        n_layer, hidden, vocab_size, seq_len, dp, tp, pp, m, micro_batch, stage, recompute, hw,
                        precision, optimizer,
                    )  # fmt: skip
                    activations = per_layer * (n_layer // pp) * in_flight
                    layout = Layout(
                        dp, tp, pp, stage, recompute, m, states, activations, dp_bytes + tp_bytes + pp_bytes, time
                    )
                    if layout.total_bytes <= device_memory_bytes or not only_fitting:
                        layouts.append(layout)
    return sorted(layouts, key=lambda l: (l.step_time, l.comm_bytes, l.total_bytes))
