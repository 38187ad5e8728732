"""Prompt–response sequences for alignment: encoding in the chat format and right-padding into tensors.

Reward models, DPO and RLHF all score ``prompt + response`` sequences. They are encoded with the SFT chat
format (so the policy sees exactly what it was fine-tuned on) and padded on the right; ``response_mask``
marks the response tokens (the assistant's content and its closing ``<|end|>``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from minillm.sft import ChatTokens, encode_chat

__all__ = ["encode_response", "pad_sequences"]


def encode_response(prompt: str, response: str, tokenizer) -> ChatTokens:
    """``prompt`` as the user turn, ``response`` as the assistant turn; the mask marks the response."""
    if not isinstance(prompt, str) or not isinstance(response, str):
        raise TypeError(f"prompt and response must be str, got {type(prompt).__name__}, {type(response).__name__}")
    return encode_chat([{"role": "user", "content": prompt}, {"role": "assistant", "content": response}], tokenizer)


def pad_sequences(
    sequences: Sequence[ChatTokens], pad_id: int, max_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to ``[B, T]`` ids and response mask (0 on padding); ``max_len`` truncates on the right."""
    if not sequences:
        raise ValueError("pad_sequences needs at least one sequence")
    rows = [(s.ids[:max_len], s.loss_mask[:max_len]) if max_len else (s.ids, s.loss_mask) for s in sequences]
    width = max(len(ids) for ids, _ in rows)
    ids_out = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask_out = torch.zeros((len(rows), width), dtype=torch.long)
    for b, (ids, mask) in enumerate(rows):
        ids_out[b, : len(ids)] = torch.tensor(ids)
        mask_out[b, : len(mask)] = torch.tensor(mask)
    if torch.any(mask_out.sum(1) == 0):
        raise ValueError("a sequence has no response token left (empty response, or truncated away)")
    return ids_out, mask_out
