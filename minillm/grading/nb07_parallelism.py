"""Graders for notebook 07: the ring all-reduce, the tensor-parallel MLP, the GPipe timeline and its bubble, and
Exercise 1's answer (the fewest micro-batches for a bubble of at most 10 %).

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.
"""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from minillm.grading.core import Build, Mistake, Probe, grade, probe_inputs
from minillm.parallel import collectives, pipeline_parallel, tensor_parallel

BUILDS = ("my_ring_all_reduce", "tensor_parallel_mlp", "gpipe_by_hand", "pipeline_bubble", "smallest_microbatches")

F64 = torch.float64


# ------------------------------------------------------------------------------------------ ring all-reduce
def _ring_case(seed: int, n: int, size: int) -> Probe:
    """n ranks, each holding a float64 vector of ``size`` elements; observe every rank's result and the counts."""

    def run(ring: Any) -> dict[str, list]:
        ranks = list(probe_inputs(seed, n, size).unbind(0))
        reduced, sent = ring([r.clone() for r in ranks])
        return {"every rank's result": list(reduced), "elements sent per rank": list(sent)}

    return Probe(f"{n} ranks × {size} elements", run)


def _ring_truth(tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[int]]:
    """The sum on every rank (torch.stack + sum) and the ring's 2·(n−1)/n·S elements sent by each rank."""
    n, size = len(tensors), tensors[0].numel()
    total = torch.stack(tensors).sum(0)
    return [total.clone() for _ in range(n)], [2 * (n - 1) * size // n] * n


def _library_ring(tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[int]]:
    """minillm's ring with the notebook's interface: (one summed tensor per rank, elements sent per rank)."""
    ledger = collectives.CommLedger(len(tensors))
    return collectives.ring_all_reduce(list(tensors), ledger=ledger), ledger.sent_per_rank()


def _ring(tensors, *, gather=True, gather_shift=0, gather_adds=False, mean=False):
    """A ring all-reduce with the switches for the ways learners write it wrong."""
    n = len(tensors)
    bufs = [list(t.clone().chunk(n)) for t in tensors]
    sent = [0] * n
    for step in range(n - 1):
        msgs = [(r, (r - step - 1) % n, bufs[r][(r - step - 1) % n]) for r in range(n)]
        for r, i, payload in msgs:
            bufs[(r + 1) % n][i] = bufs[(r + 1) % n][i] + payload
            sent[r] += payload.numel()
    if mean:
        for r in range(n):
            bufs[r][r] = bufs[r][r] / n
    for step in range(n - 1 if gather else 0):
        msgs = [(r, (r - step - gather_shift) % n, bufs[r][(r - step - gather_shift) % n]) for r in range(n)]
        for r, i, payload in msgs:
            receiver = (r + 1) % n
            bufs[receiver][i] = bufs[receiver][i] + payload if gather_adds else payload.clone()
            sent[r] += payload.numel()
    return [torch.cat(b) for b in bufs], sent


def _reduce_scatter_only(tensors):
    return _ring(tensors, gather=False)


def _gather_wrong_chunk(tensors):
    return _ring(tensors, gather_shift=1)


def _gather_adds(tensors):
    return _ring(tensors, gather_adds=True)


def _ring_mean(tensors):
    return _ring(tensors, mean=True)


def _everyone_to_everyone(tensors):
    n = len(tensors)
    total = torch.stack(tensors).sum(0)
    return [total.clone() for _ in range(n)], [(n - 1) * tensors[0].numel()] * n


RING = Build(
    name="my_ring_all_reduce",
    what="the ring all-reduce",
    truth=_ring_truth,
    truth_name="torch.stack(ranks).sum(0) and a ring's 2(n−1)/n·S elements per rank",
    fallback=_library_ring,
    fallback_name="minillm.parallel.collectives.ring_all_reduce",
    probes=(_ring_case(1, 4, 40), _ring_case(2, 3, 12), _ring_case(3, 5, 20)),
    mistakes=(
        Mistake(
            "the ring doing only the reduce-scatter half",
            "after the n − 1 reduce-scatter steps rank r owns only chunk r's sum: n − 1 all-gather steps must "
            "pass the finished chunks around.",
            _reduce_scatter_only,
        ),
        Mistake(
            "the all-gather passing the wrong chunks",
            "after the reduce-scatter rank r owns chunk r, so at all-gather step s rank r sends chunk (r − s) mod n.",
            _gather_wrong_chunk,
        ),
        Mistake(
            "the all-gather adding instead of copying",
            "in the all-gather the received chunk is already the full sum: overwrite, do not add it again.",
            _gather_adds,
        ),
        Mistake(
            "the mean instead of the sum",
            "an all-reduce here sums; the data-parallel step divides by N itself.",
            _ring_mean,
        ),
        Mistake(
            "every rank sending its whole tensor to every other",
            "the sums are right but that costs (n − 1)·S per rank; a ring passes chunks of S/n, 2(n − 1) times.",
            _everyone_to_everyone,
        ),
    ),
    rtol=1e-10,
    atol=1e-12,
    what_is_compared="result",
)


def ring_all_reduce(learner: Any) -> Any:
    """Grade ``my_ring_all_reduce(tensors) -> (one summed tensor per rank, elements sent per rank)``."""
    return grade(RING, learner)


# --------------------------------------------------------------------------------------- tensor-parallel MLP
class ShapeMismatch(RuntimeError):
    """A learner's matmul failed on shapes: almost always a weight split along the wrong dimension."""


def _mlp_weights(seed: int, d: int, hidden: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(hidden, d, generator=g, dtype=F64) / d**0.5
    b1 = torch.randn(hidden, generator=g, dtype=F64) * 0.5
    w2 = torch.randn(d, hidden, generator=g, dtype=F64) / hidden**0.5
    b2 = torch.randn(d, generator=g, dtype=F64) * 0.5
    return w1, b1, w2, b2


def _call_mlp(mlp: Any, seed: int, shape: tuple[int, ...], hidden: int, t: int):
    w1, b1, w2, b2 = _mlp_weights(seed, shape[-1], hidden)
    x = probe_inputs(seed + 100, *shape)
    try:
        return mlp(x, w1, b1, w2, b2, t)
    except RuntimeError as error:
        if "cannot be multiplied" in str(error) or "must match the size" in str(error):
            raise ShapeMismatch(
                f"{' '.join(str(error).split())}; fc splits W1 by its rows (dim 0), "
                "proj splits W2 by its columns (dim 1)"
            ) from None
        raise


def _mlp_output(seed: int, shape: tuple[int, ...], hidden: int, t: int) -> Probe:
    def run(mlp: Any) -> torch.Tensor:
        y, _ = _call_mlp(mlp, seed, shape, hidden, t)
        return y

    return Probe(f"the output y, {shape[-1]} → {hidden} → {shape[-1]} on {t} ranks", run)


def _mlp_partials(seed: int, shape: tuple[int, ...], hidden: int, t: int) -> Probe:
    def run(mlp: Any) -> list[torch.Tensor]:
        _, partials = _call_mlp(mlp, seed, shape, hidden, t)
        return list(partials)

    return Probe(f"the {t} per-rank partial outputs (before the all-reduce), {shape[-1]} → {hidden} → {shape[-1]}", run)


def _mlp_truth(x, W1, b1, W2, b2, t):
    """The unsplit MLP; rank r's partial = proj without bias of the hidden layer with only rank r's slice kept."""
    hidden = F.gelu(F.linear(x, W1, b1))
    block = W1.shape[0] // t
    partials = []
    for r in range(t):
        keep = torch.zeros(W1.shape[0], dtype=x.dtype)
        keep[r * block : (r + 1) * block] = 1.0
        partials.append(F.linear(hidden * keep, W2))
    return F.linear(hidden, W2, b2), partials


def _library_mlp(x, W1, b1, W2, b2, t):
    """minillm's TensorParallelMLP with the notebook's interface: (output, per-rank partial outputs)."""
    tp = tensor_parallel.TensorParallelMLP(SimpleNamespace(weight=W1, bias=b1), SimpleNamespace(weight=W2, bias=b2), t)
    with torch.no_grad():
        hidden = [F.gelu(h) for h in tp.fc.forward(x)]
        partials = [F.linear(h, w) for h, w in zip(hidden, tp.proj.weights, strict=True)]
        return tp.proj.forward(hidden), partials


def _tp(x, W1, b1, W2, b2, t, *, bias_every_rank=False, mean=False, fc_bias=True, gelu="none"):
    w1s, b1s, w2s = W1.chunk(t, dim=0), b1.chunk(t), W2.chunk(t, dim=1)
    partials = [
        F.linear(F.gelu(F.linear(x, w1s[r], b1s[r] if fc_bias else None), approximate=gelu), w2s[r]) for r in range(t)
    ]
    if bias_every_rank:
        return sum(p + b2 for p in partials), partials
    total = sum(partials) / t if mean else sum(partials)
    return total + b2, partials


def _bias_on_every_rank(x, W1, b1, W2, b2, t):
    return _tp(x, W1, b1, W2, b2, t, bias_every_rank=True)


def _averaged(x, W1, b1, W2, b2, t):
    return _tp(x, W1, b1, W2, b2, t, mean=True)


def _no_fc_bias(x, W1, b1, W2, b2, t):
    return _tp(x, W1, b1, W2, b2, t, fc_bias=False)


def _tanh_gelu(x, W1, b1, W2, b2, t):
    return _tp(x, W1, b1, W2, b2, t, gelu="tanh")


TP_MLP = Build(
    name="tensor_parallel_mlp",
    what="the column/row tensor-parallel MLP",
    truth=_mlp_truth,
    truth_name="the unsplit MLP",
    fallback=_library_mlp,
    fallback_name="minillm.parallel.tensor_parallel.TensorParallelMLP",
    probes=(
        _mlp_output(1, (2, 3, 8), 16, 2),
        _mlp_output(2, (5, 6), 24, 4),
        _mlp_partials(3, (4, 6), 12, 2),
    ),
    mistakes=(
        Mistake(
            "the bias added on every rank",
            "row-parallel proj adds its bias ONCE, after the partial outputs are summed (t ranks would add t·b).",
            _bias_on_every_rank,
        ),
        Mistake(
            "the partial outputs averaged, not summed",
            "each rank holds a part of the matmul's sum over the hidden features: the all-reduce adds them up.",
            _averaged,
        ),
        Mistake(
            "fc's bias left out",
            "column-parallel fc adds rank r's slice of b1 (b1.chunk(t)[r]) before the GELU.",
            _no_fc_bias,
        ),
        Mistake(
            "GELU with the tanh approximation",
            "the GPT's MLP uses the exact GELU, F.gelu(h) (nn.GELU()), not approximate='tanh'.",
            _tanh_gelu,
        ),
    ),
    rtol=1e-10,
    atol=1e-12,
    what_is_compared="output",
)


def tensor_parallel_mlp(learner: Any) -> Any:
    """Grade ``tensor_parallel_mlp(x, W1, b1, W2, b2, t) -> (y, partials)``."""
    return grade(TP_MLP, learner)


# ------------------------------------------------------------------------------------------- GPipe timeline
def _timeline_case(p: int, m: int) -> Probe:
    def run(by_hand: Any) -> dict:
        return dict(by_hand(p, m))

    return Probe(f"p = {p} stages, m = {m} micro-batches", run)


def _simulated_starts(p: int, m: int) -> dict[tuple[str, int, int], float]:
    """Every op's start time from minillm's event simulation (forward 1, backward 2)."""
    return {(op.kind, op.stage, op.micro): op.start for op in pipeline_parallel.schedule("gpipe", p, m).ops}


def _gpipe(p, m, *, backwards_from=None, backward_up=False, backward_time=2):
    first_backward = m + p - 1 if backwards_from is None else backwards_from(p, m)
    starts = {}
    for i in range(p):
        for j in range(m):
            hops = i if backward_up else p - 1 - i
            starts[("F", i, j)] = i + j
            starts[("B", i, j)] = first_backward + backward_time * hops + backward_time * j
    return starts


def _backwards_at_m(p, m):
    return _gpipe(p, m, backwards_from=lambda p_, m_: m_)


def _backwards_upward(p, m):
    return _gpipe(p, m, backward_up=True)


def _backward_as_long_as_forward(p, m):
    return _gpipe(p, m, backward_time=1)


def _library_gpipe(p: int, m: int) -> dict[tuple[str, int, int], float]:
    """The simulator's start times, whole numbers as ints (as the notebook's closed form gives them)."""
    return {key: int(start) if float(start).is_integer() else start for key, start in _simulated_starts(p, m).items()}


GPIPE = Build(
    name="gpipe_by_hand",
    what="the GPipe timeline",
    truth=_simulated_starts,
    truth_name="minillm's event simulation, pipeline_parallel.schedule('gpipe', p, m)",
    fallback=_library_gpipe,
    fallback_name="the start times of minillm.parallel.pipeline_parallel.schedule('gpipe', p, m)",
    probes=(_timeline_case(2, 3), _timeline_case(4, 2), _timeline_case(3, 6)),
    mistakes=(
        Mistake(
            "the backwards started at m instead of m + p − 1",
            "the last stage's last forward F(m − 1) starts at (p − 1) + (m − 1), so its backwards begin at m + p − 1.",
            _backwards_at_m,
        ),
        Mistake(
            "the backward pass running from stage 0 up",
            "backward goes from the last stage back to stage 0: stage i starts 2·(p − 1 − i) after the last one.",
            _backwards_upward,
        ),
        Mistake(
            "a backward taking as long as a forward",
            "here a backward takes 2 time units: the gaps are 2·(p − 1 − i) and 2·j.",
            _backward_as_long_as_forward,
        ),
    ),
    rtol=0.0,
    atol=1e-9,
    what_is_compared="timeline",
)


def gpipe_timeline(learner: Any) -> Any:
    """Grade ``gpipe_by_hand(p, m) -> {(kind, stage, micro): start time}`` (forward 1, backward 2)."""
    return grade(GPIPE, learner)


# ------------------------------------------------------------------------------------------------- bubble
def _bubble_case(pairs: list[tuple[int, int]], described: str) -> Probe:
    def run(bubble: Any) -> list[float]:
        return [bubble(p, m) for p, m in pairs]

    return Probe(described, run)


def _measured_bubble(p: int, m: int) -> float:
    return pipeline_parallel.schedule("gpipe", p, m).bubble_fraction()


def _bubble_over_m(p, m):
    return (p - 1) / m


def _bubble_p_not_p_minus_1(p, m):
    return p / (m + p)


def _bubble_integer_division(p, m):
    return (p - 1) // (m + p - 1)


BUBBLE = Build(
    name="pipeline_bubble",
    what="the pipeline bubble",
    truth=_measured_bubble,
    truth_name="the idle share measured on minillm's simulated GPipe timeline",
    fallback=pipeline_parallel.bubble_fraction_theory,
    fallback_name="minillm.parallel.pipeline_parallel.bubble_fraction_theory",
    probes=(
        _bubble_case([(4, m) for m in range(1, 9)], "p = 4, m = 1 … 8"),
        _bubble_case([(p, 4) for p in range(1, 9)], "m = 4, p = 1 … 8"),
        _bubble_case([(2, 1), (8, 32), (16, 5)], "(p, m) = (2, 1), (8, 32), (16, 5)"),
    ),
    mistakes=(
        Mistake(
            "the bubble counted with m instead of m + p − 1",
            "(p − 1)/m is idle time over busy time; the share of the wall time is (p − 1)/(m + p − 1).",
            _bubble_over_m,
        ),
        Mistake(
            "p slots of fill instead of p − 1",
            "the first micro-batch needs p − 1 hops to reach the last stage: (p − 1)/(m + p − 1).",
            _bubble_p_not_p_minus_1,
        ),
        Mistake(
            "integer division",
            "use / (true division), not //: the share is a fraction between 0 and 1.",
            _bubble_integer_division,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="result",
)


def pipeline_bubble(learner: Any) -> Any:
    """Grade ``pipeline_bubble(p, m) -> float``: GPipe's idle share of the wall time."""
    return grade(BUBBLE, learner)


# ------------------------------------------------------------------------ Exercise 1: the fewest micro-batches
def _microbatches_case(p: int, target: float) -> Probe:
    def run(smallest: Any) -> int:
        return smallest(p=p, target=target)

    return Probe(f"p = {p} stages, target = {target:g}", run)


def _first_m(fits: Any, limit: int = 100_000) -> int:
    """The first m = 1, 2, … for which ``fits(m)`` holds (a brute-force search, no formula)."""
    return next(m for m in range(1, limit) if fits(m))


def _exact(target: float) -> Fraction:
    return Fraction(target).limit_denominator(1_000_000)  # 0.1 → 1/10, not the float's 3602879701896397/2**55


def _smallest_by_search(p: int = 8, target: float = 0.10) -> int:
    """The smallest m with (p − 1)/(m + p − 1) ≤ target, searched over m in exact fractions."""
    return _first_m(lambda m: Fraction(p - 1, m + p - 1) <= _exact(target))


def _smallest_over_m(p=8, target=0.10):
    return _first_m(lambda m: Fraction(p - 1, m) <= _exact(target))


def _smallest_strict(p=8, target=0.10):
    return _first_m(lambda m: Fraction(p - 1, m + p - 1) < _exact(target))


def _smallest_rounded_down(p=8, target=0.10):
    return int((p - 1) * (1 - target) / target)


def _smallest_p_slots(p=8, target=0.10):
    return _first_m(lambda m: Fraction(p, m + p) <= _exact(target))


def _smallest_for_ten_percent(p=8, target=0.10):
    return 9 * (p - 1)


MICROBATCHES = Build(
    name="smallest_microbatches",
    what="the fewest micro-batches for the bubble target",
    truth=_smallest_by_search,
    truth_name="a search over m = 1, 2, … in exact fractions",
    fallback=_smallest_by_search,
    fallback_name="a search over m = 1, 2, … in exact fractions",
    probes=(_microbatches_case(8, 0.10), _microbatches_case(5, 0.30), _microbatches_case(6, 0.07)),
    mistakes=(
        Mistake(
            "the bubble counted with m instead of m + p − 1",
            "(p − 1)/m is idle time over busy time; solve (p − 1)/(m + p − 1) ≤ target, i.e. "
            "m ≥ (p − 1)(1/target − 1).",
            _smallest_over_m,
        ),
        Mistake(
            "< instead of ≤",
            "a bubble of exactly the target counts: for p = 8, m = 63 gives 7/70 = 10 %, which is ≤ 0.1.",
            _smallest_strict,
        ),
        Mistake(
            "the bound rounded down",
            "m ≥ (p − 1)(1/target − 1) and m is a whole number: round the bound up (math.ceil), not down.",
            _smallest_rounded_down,
        ),
        Mistake(
            "p slots of fill instead of p − 1",
            "the first micro-batch needs p − 1 hops to reach the last stage: the bubble is (p − 1)/(m + p − 1).",
            _smallest_p_slots,
        ),
        Mistake(
            "the target fixed at 10 %",
            "9 = 1/0.1 − 1 holds only for target = 0.1: use the target parameter, m ≥ (p − 1)(1/target − 1).",
            _smallest_for_ten_percent,
        ),
    ),
    rtol=0.0,
    atol=0.0,
    what_is_compared="answer",
)


def smallest_microbatches(learner: Any) -> Any:
    """Grade ``smallest_microbatches(p=8, target=0.10) -> int``: the fewest m with (p − 1)/(m + p − 1) ≤ target."""
    return grade(MICROBATCHES, learner)
