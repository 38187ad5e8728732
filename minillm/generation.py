"""Chat replies from a model: the prompt encoded in the chat format, generated with the KV cache, cut at ``<|end|>``.

It sits on top of the model and the chat format (:mod:`minillm.chat`), which stays torch-free.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch
from torch import nn

from minillm.chat import END, encode_prompt, special_token_id

__all__ = ["generate_responses"]


@torch.no_grad()
def generate_responses(
    model: nn.Module,
    tokenizer,
    prompts: Sequence[str | Sequence[dict]],
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> list[str]:
    """The model's assistant reply to each prompt, decoded up to (not including) ``<|end|>``.

    Prompts of equal token length are generated as one batch (right after the prompt, so no padding
    is needed); ``temperature`` 0 is greedy.
    """
    end_id = special_token_id(tokenizer, END)
    device = next(model.parameters()).device
    encoded = [encode_prompt(p, tokenizer) for p in prompts]
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, ids in enumerate(encoded):
        by_length[len(ids)].append(i)
    replies: list[str] = [""] * len(prompts)
    for length, members in sorted(by_length.items()):
        idx = torch.tensor([encoded[i] for i in members], device=device)
        budget = min(max_new_tokens, model.config.context_length - length)
        if budget < 1:
            raise ValueError(f"a prompt of {length} tokens leaves no room in the context")
        out = model.generate(idx, budget, temperature=temperature, generator=generator, eos_id=end_id)
        for row, i in enumerate(members):
            new = out[row, length:].tolist()
            if end_id in new:
                new = new[: new.index(end_id)]
            replies[i] = tokenizer.decode(new)
    return replies
