"""Simulated pipeline parallelism: schedules as explicit timelines, and a micro-batched execution.

The model's layers are cut into ``p`` stages and the batch into ``m`` micro-batches. A schedule is the
order in which each stage runs forwards F(j) and backwards B(j); an event simulator turns it into a
timeline, respecting that F on stage i needs F on stage i−1, and B on stage i needs B on stage i+1.

- GPipe runs all forwards, then all backwards: every stage holds m micro-batches of activations.
- 1F1B warms up with p−i−1 forwards on stage i, then alternates one forward / one backward: at most
  p−i micro-batches in flight. Both idle for the same bubble, (p−1)/(m+p−1) of the wall time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Op:
    """One unit of work: ``kind`` 'F' or 'B' of micro-batch ``micro`` on ``stage`` over [start, end)."""

    stage: int
    kind: str
    micro: int
    start: float
    end: float


def _check(p: int, m: int) -> None:
    if not isinstance(p, int) or p < 1:
        raise ValueError(f"number of stages p must be a positive int, got {p!r}")
    if not isinstance(m, int) or m < 1:
        raise ValueError(f"number of micro-batches m must be a positive int, got {m!r}")


def gpipe_order(p: int, m: int) -> list[list[tuple[str, int]]]:
    """Per-stage work order of GPipe (all-forward-all-backward)."""
    _check(p, m)
    return [[("F", j) for j in range(m)] + [("B", j) for j in range(m)] for _ in range(p)]


def one_f_one_b_order(p: int, m: int) -> list[list[tuple[str, int]]]:
    """Per-stage work order of 1F1B (PipeDream-Flush): warm-up, steady one-forward-one-backward, drain."""
    _check(p, m)
    orders = []
    for stage in range(p):
        warmup = min(p - stage - 1, m)
        order = [("F", j) for j in range(warmup)]
        for j in range(warmup, m):
            order += [("F", j), ("B", j - warmup)]
        order += [("B", j) for j in range(m - warmup, m)]
        orders.append(order)
    return orders


SCHEDULES = {"gpipe": gpipe_order, "1f1b": one_f_one_b_order}


@dataclass
class Timeline:
    """The simulated execution: every op with its start and end time."""

    p: int
    m: int
    ops: list[Op]

    @property
    def makespan(self) -> float:
        return max(op.end for op in self.ops)

    def bubble_fraction(self) -> float:
        """Share of the p × makespan stage-time during which stages sit idle (measured, not the formula)."""
        busy = sum(op.end - op.start for op in self.ops)
        return 1.0 - busy / (self.p * self.makespan)

    def peak_in_flight(self) -> list[int]:
        """Per stage, the most micro-batches whose activations are held (forward begun, backward not done)."""
        peaks = []
        for stage in range(self.p):
            events = [(op.start, 1) if op.kind == "F" else (op.end, -1) for op in self.ops if op.stage == stage]
            held = peak = 0
            for _, delta in sorted(events):  # a release (−1) at t sorts before a new F (+1) at t
                held += delta
                peak = max(peak, held)
            peaks.append(peak)
        return peaks

    def grid(self) -> list[list[str]]:
        """A stage × tick table (integer op durations): 'F3' / 'B3' while busy, '' while idle."""
        width = int(round(self.makespan))
        rows = [[""] * width for _ in range(self.p)]
        for op in self.ops:
            for tick in range(int(round(op.start)), int(round(op.end))):
                rows[op.stage][tick] = f"{op.kind}{op.micro}"
        return rows

    def in_execution_order(self) -> list[Op]:
        return sorted(self.ops, key=lambda op: (op.start, op.stage))


def simulate(orders: list[list[tuple[str, int]]], t_forward: float = 1.0, t_backward: float = 2.0) -> Timeline:
    """Run per-stage work orders as early as their dependencies allow; returns the timeline."""
    if t_forward <= 0 or t_backward <= 0:
        raise ValueError(f"durations must be positive, got t_forward={t_forward}, t_backward={t_backward}")
    p = len(orders)
    m = sum(1 for kind, _ in orders[0] if kind == "F")
    done: dict[tuple[str, int, int], float] = {}
    position, free_at, ops = [0] * p, [0.0] * p, []
    while len(ops) < sum(len(o) for o in orders):
        progressed = False
        for stage in range(p):
            if position[stage] == len(orders[stage]):
                continue
            kind, micro = orders[stage][position[stage]]
            if kind == "F":
                dep = ("F", stage - 1, micro) if stage > 0 else None
            elif stage < p - 1:
                dep = ("B", stage + 1, micro)
            else:
                dep = ("F", stage, micro)
            if dep is not None and dep not in done:
                continue
            start = max(free_at[stage], done[dep] if dep else 0.0)
            end = start + (t_forward if kind == "F" else t_backward)
            ops.append(Op(stage, kind, micro, start, end))
            done[(kind, stage, micro)] = end
            free_at[stage], position[stage] = end, position[stage] + 1
            progressed = True
        if not progressed:
            raise RuntimeError("schedule deadlocks: some stage waits on work that never happens")
    return Timeline(p, m, ops)


def schedule(name: str, p: int, m: int, t_forward: float = 1.0, t_backward: float = 2.0) -> Timeline:
    """The timeline of schedule ``name`` ('gpipe' or '1f1b') for p stages and m micro-batches."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose one of {sorted(SCHEDULES)}")
    return simulate(SCHEDULES[name](p, m), t_forward, t_backward)


def bubble_fraction_theory(p: int, m: int) -> float:
    """GPipe's bubble as a share of wall time: (p−1)/(m+p−1) (Huang et al. 2019, §2.3)."""
    _check(p, m)
    return (p - 1) / (m + p - 1)


def run_pipeline(
    stages: list[nn.Module],
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    micro_batches: int,
    schedule_name: str = "1f1b",
    scale_loss: bool = True,
) -> tuple[float, list[int]]:
    """Execute forward and backward of ``stages`` on micro-batches in the order the schedule's timeline says.

    Stages exchange *detached* activations and their gradients, as separate devices would. Each
    micro-batch's mean loss is divided by m (``scale_loss``) so the accumulated gradients equal the
    full-batch gradient; ``scale_loss=False`` reproduces the classic m-times-too-large bug.
    Returns the full-batch loss and the measured peak of stored activations per stage.
    """
    p = len(stages)
    if inputs.shape[0] % micro_batches:
        raise ValueError(f"batch {inputs.shape[0]} is not divisible into {micro_batches} micro-batches")
    xs, ys = inputs.chunk(micro_batches), targets.chunk(micro_batches)
    timeline = schedule(schedule_name, p, micro_batches)
    saved: list[dict[int, tuple[torch.Tensor, torch.Tensor]]] = [{} for _ in range(p)]
    sent_forward: dict[tuple[int, int], torch.Tensor] = {}  # (receiving stage, micro) → activation
    sent_backward: dict[tuple[int, int], torch.Tensor] = {}  # (receiving stage, micro) → gradient
    peaks, total_loss = [0] * p, 0.0
    for op in timeline.in_execution_order():
        i, j = op.stage, op.micro
        if op.kind == "F":
            x = xs[j] if i == 0 else sent_forward.pop((i, j)).requires_grad_(True)
            out = stages[i](x)
            if i == p - 1:
                loss = loss_fn(out, ys[j])
                total_loss += loss.item() / micro_batches
                out = loss / micro_batches if scale_loss else loss
            else:
                sent_forward[(i + 1, j)] = out.detach()
            saved[i][j] = (x, out)
            peaks[i] = max(peaks[i], len(saved[i]))
        else:
            x, out = saved[i].pop(j)
            out.backward(None if i == p - 1 else sent_backward.pop((i, j)))
            if i > 0:
                sent_backward[(i - 1, j)] = x.grad
    return total_loss, peaks
