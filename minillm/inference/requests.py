"""What a serving call receives, checked once at the door: prompts as token lists, budgets that fit the context.

Every public generator of :mod:`minillm.inference` takes prompts as lists of token ids (or 1-D tensors) and a
number of new tokens per prompt; the loops below them trust what this module hands back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from minillm.model import GPT

__all__ = ["as_token_lists", "as_budgets", "check_eos", "check_sampling"]


def _as_ids(prompt: object, index: int, vocab_size: int) -> list[int]:
    if isinstance(prompt, torch.Tensor):
        if prompt.dim() != 1 or prompt.is_floating_point() or prompt.is_complex():
            raise ValueError(f"prompt {index} must be a 1-D tensor of token ids, got shape {tuple(prompt.shape)}")
        ids = prompt.tolist()
    elif isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence):
        raise TypeError(f"prompt {index} must be a list of token ids (encode text first), got {type(prompt).__name__}")
    else:
        ids = list(prompt)
    if not ids:
        raise ValueError(f"prompt {index} is empty: a model needs at least one token to continue")
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab_size:
            raise ValueError(f"prompt {index} holds {token!r}, not a token id in [0, {vocab_size})")
    return ids


def as_token_lists(model: GPT, prompts: Sequence[Sequence[int] | torch.Tensor]) -> list[list[int]]:
    """``prompts`` as lists of ints; refuses an empty list, an empty prompt and ids outside the vocabulary."""
    if isinstance(prompts, torch.Tensor) and prompts.dim() == 2:
        prompts = list(prompts)
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise TypeError(f"prompts must be a list of token-id lists, got {type(prompts).__name__}")
    if len(prompts) == 0:
        raise ValueError("prompts is empty: pass at least one prompt")
    return [_as_ids(p, i, model.config.vocab_size) for i, p in enumerate(prompts)]


def as_budgets(model: GPT, prompts: list[list[int]], max_new_tokens: int | Sequence[int]) -> list[int]:
    """New tokens per prompt (one int for all, or one each), each ≥ 1 and fitting the context with its prompt."""
    budgets = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(budgets) != len(prompts):
        raise ValueError(f"max_new_tokens has {len(budgets)} entries for {len(prompts)} prompts")
    limit = model.config.context_length
    for i, (ids, budget) in enumerate(zip(prompts, budgets, strict=True)):
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {budget!r} for prompt {i}")
        if len(ids) > limit:
            raise ValueError(f"prompt {i} has {len(ids)} tokens, longer than the context length {limit}")
        if len(ids) + budget > limit:
            raise ValueError(
                f"prompt {i} of {len(ids)} tokens + {budget} new tokens exceeds the context length {limit}"
            )
    return budgets


def check_eos(model: GPT, eos_id: int | None) -> None:
    """``eos_id`` is None or a token id the model can produce (else generation would never stop on it)."""
    vocab = model.config.vocab_size
    if eos_id is not None and (isinstance(eos_id, bool) or not isinstance(eos_id, int) or not 0 <= eos_id < vocab):
        raise ValueError(f"eos_id must be a token id in [0, {vocab}) or None, got {eos_id!r}")


def check_sampling(temperature: float, top_k: int | None = None, top_p: float | None = None) -> None:
    """Temperature ≥ 0 (0 = greedy), top_k a positive int, top_p in (0, 1]: what sampling can use."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number ≥ 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p!r}")
