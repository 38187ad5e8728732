"""The serving entry points: many prompts or one prompt in, new tokens out, by the best strategy for the call.

* :func:`generate_batch` — every prompt's continuation. Up to ``max_batch`` prompts run as one left-padded
  batch (:mod:`~minillm.inference.batched`); more are served by continuous batching with ``max_batch`` slots
  (:mod:`~minillm.inference.continuous`), on a paged KV cache with ``paged=True``.
* :func:`generate_speculative` — one prompt's continuation from a target model drafted by a small one
  (:mod:`~minillm.inference.speculative`).

Greedy results equal ``GPT.generate`` on each prompt alone; what changes is how much work is shared.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from minillm.inference.batched import generate_batch as _left_padded_batch
from minillm.inference.continuous import Request, continuous_batching
from minillm.inference.requests import as_token_lists
from minillm.inference.speculative import SpeculativeResult, speculative_generate
from minillm.model import GPT

__all__ = ["generate_batch", "generate_speculative"]


def generate_batch(
    model: GPT,
    prompts: Sequence[Sequence[int] | torch.Tensor],
    max_new_tokens: int | Sequence[int],
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    eos_id: int | None = None,
    max_batch: int = 8,
    paged: bool = False,
    block_size: int = 16,
) -> list[list[int]]:
    """The new tokens of each prompt (a list ends at ``eos_id`` if that was produced).

    ``max_new_tokens`` is one int or one per prompt. At most ``max_batch`` sequences run at once: a call with
    that many prompts or fewer is one left-padded batch; a longer one is continuously batched (a finished
    sequence's slot goes straight to the next prompt), its KV cache paged in blocks of ``block_size`` if
    ``paged``. ``temperature`` 0 is greedy.
    """
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max_batch must be a positive int, got {max_batch!r}")
    token_lists = as_token_lists(model, prompts)
    if len(token_lists) <= max_batch and not paged:
        return _left_padded_batch(
            model, token_lists, max_new_tokens, temperature=temperature, generator=generator, eos_id=eos_id
        )
    budgets = [max_new_tokens] * len(token_lists) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(budgets) != len(token_lists):
        raise ValueError(f"max_new_tokens has {len(budgets)} entries for {len(token_lists)} prompts")
    requests = [Request(p, b) for p, b in zip(token_lists, budgets, strict=True)]
    schedule = continuous_batching(
        model,
        requests,
        max_batch,
        temperature=temperature,
        generator=generator,
        eos_id=eos_id,
        kv="paged" if paged else "contiguous",
        block_size=block_size,
    )
    return schedule.tokens


def generate_speculative(
    target: GPT,
    draft: GPT,
    prompt: Sequence[int] | torch.Tensor,
    max_new_tokens: int,
    k: int = 4,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> SpeculativeResult:
    """``max_new_tokens`` tokens after ``prompt`` from ``target``, ``k`` drafted per round by ``draft`` (same
    vocabulary); greedy at ``temperature`` 0, else exact samples from the target. The result also carries the
    acceptance rate."""
    return speculative_generate(
        target, draft, prompt, max_new_tokens, k=k, temperature=temperature, generator=generator
    )
