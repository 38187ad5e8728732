"""Parallel training: one file per strategy, simulated exactly inside one process — and written by hand on real
processes.

- :mod:`~minillm.parallel.collectives` — ring all-reduce, reduce-scatter, all-gather over per-rank tensors
- :mod:`~minillm.parallel.data_parallel` — data parallelism (replicas, batch shards, gradient all-reduce)
- :mod:`~minillm.parallel.tensor_parallel` — Megatron tensor parallelism (column/row linear, MLP, attention)
- :mod:`~minillm.parallel.pipeline_parallel` — GPipe and 1F1B schedules as timelines, micro-batched execution
- :mod:`~minillm.parallel.expert_parallel` — mixture-of-experts layers with experts on different ranks (all-to-all
  dispatch and combine)
- :mod:`~minillm.parallel.zero` — ZeRO stages 1–3 accounting and a sharded optimizer step
- :mod:`~minillm.parallel.memory` — bytes of weights, gradients, optimizer states and activations
- :mod:`~minillm.parallel.comm` — bytes and time of collectives and of each strategy
- :mod:`~minillm.parallel.planner` — which layouts fit a given memory and device count, ranked by a
  modelled step time (compute, exposed communication, pipeline bubble, recomputation)
- :mod:`~minillm.parallel.allreduce_cost` — what a real gloo all-reduce costs: latency α plus bytes over
  bandwidth, fitted, and why gradients travel in buckets
- :mod:`~minillm.parallel.ddp_by_hand` — the same ideas on real ``torch.distributed`` processes: a bucketed,
  overlapped data-parallel wrapper and ZeRO-1, written out (PyTorch's own DDP/FSDP runs are in
  :mod:`minillm.train.sharded`)
"""
