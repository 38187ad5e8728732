"""Serving a model (notebook 15): one file per idea, from why decoding is slow to the tricks that speed it up.

- :mod:`~minillm.inference.prefill_decode` — prefill vs cached decode timed as T and batch grow; the
  memory-bound prediction (bytes of weights + KV cache per step ÷ measured bandwidth)
- :mod:`~minillm.inference.forward` — the GPT forward with a position per row and a key mask, over any KV store
- :mod:`~minillm.inference.batched` — batched generation of ragged prompts: left padding, mask, per-row positions
- :mod:`~minillm.inference.continuous` — continuous batching (a free slot is refilled at the next step) and the
  static-batching baseline, with a per-step timeline
- :mod:`~minillm.inference.paged_kv` — a paged KV cache: blocks, block tables, a free list; memory held vs a
  contiguous cache
- :mod:`~minillm.inference.quantize` — weight-only int8 (per channel) and int4 (grouped, packed), a
  ``QuantizedLinear`` and in-place quantisation of a GPT
- :mod:`~minillm.inference.speculative` — speculative decoding, greedy and with exact rejection sampling
- :mod:`~minillm.inference.engine` — the entry points that serve requests: ``generate_batch``,
  ``generate_speculative``
- :mod:`~minillm.inference.requests` — the checks every entry point makes on prompts and budgets
"""
