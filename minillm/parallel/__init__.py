"""Parallel training, simulated exactly inside one process: one file per strategy.

- :mod:`~minillm.parallel.collectives` — ring all-reduce, reduce-scatter, all-gather over per-rank tensors
- :mod:`~minillm.parallel.data` — data parallelism (replicas, batch shards, gradient all-reduce)
- :mod:`~minillm.parallel.tensor` — Megatron tensor parallelism (column/row linear, MLP, attention)
- :mod:`~minillm.parallel.pipeline` — GPipe and 1F1B schedules as timelines, micro-batched execution
- :mod:`~minillm.parallel.zero` — ZeRO stages 1–3 accounting and a sharded optimizer step
- :mod:`~minillm.parallel.memory` — bytes of weights, gradients, optimizer states and activations
- :mod:`~minillm.parallel.comm` — bytes and time of collectives and of each strategy
- :mod:`~minillm.parallel.planner` — which layouts fit a given memory and device count, ranked by a
  modelled step time (compute, exposed communication, pipeline bubble, recomputation)

The same ideas on real processes live in :mod:`minillm.distributed`.
"""
