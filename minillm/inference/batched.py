"""Batched generation of prompts of different lengths: left padding, a key mask and a position per row.

A batch is one tensor, so prompts of different lengths are padded to the longest. Padding on the *left* makes
every prompt end in the same column: each step then appends one new column for the whole batch, and the KV
cache stays one rectangular buffer. Two things keep the padding invisible:

* a key mask: no query attends a pad column (a pad query sees only itself, so its row stays finite);
* positions per row: a prompt of n tokens padded by ``pad`` starts at column ``pad`` but at position 0, so
  token column c sits at position c − pad. With learned positions a wrong offset changes the embedding
  added; with RoPE it changes every rotation.

Greedy decoding of the batch then gives each prompt the tokens it gets alone (``GPT.generate``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from minillm.inference.forward import check_supported, eval_mode, forward_rows
from minillm.inference.requests import as_budgets, as_token_lists, check_eos, check_sampling
from minillm.model import GPT, GPTConfig, sample_next_token

__all__ = ["LeftPaddedKVCache", "left_pad", "generate_batch"]


def left_pad(prompts: list[list[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as one [B, P] tensor padded on the left to the longest (P), and each row's pad count [B]."""
    longest = max(len(p) for p in prompts)
    pad = torch.tensor([longest - len(p) for p in prompts])
    ids = torch.tensor([[pad_id] * (longest - len(p)) + p for p in prompts])
    return ids, pad


class LeftPaddedKVCache:
    """A rectangular cache [B, n_kv_head, columns, head_dim] per layer whose rows start ``pad`` columns late.

    Every row writes the same columns each step (that is what left padding buys); row b's token in column c
    is at position c − pad[b] and may see columns pad[b]..c. Implements :class:`~minillm.inference.forward.
    KVStore` for all rows at once (``rows`` is always the whole batch).
    """

    def __init__(
        self, config: GPTConfig, pad: torch.Tensor, num_columns: int, device: torch.device, dtype: torch.dtype
    ) -> None:
        shape = (len(pad), config.n_kv_head, num_columns, config.head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.pad = pad.to(device)
        self.length = 0  # columns written so far
        self._allowed: torch.Tensor | None = None

    def positions(self, rows: torch.Tensor, num_new: int) -> torch.Tensor:
        columns = torch.arange(self.length, self.length + num_new, device=self.pad.device)
        keys = torch.arange(self.length + num_new, device=self.pad.device)
        pad = self.pad[:, None, None]
        causal = keys[None, None, :] <= columns[None, :, None]
        own = keys[None, None, :] == columns[None, :, None]  # a pad query sees itself: never an empty row
        self._allowed = causal & ((keys[None, None, :] >= pad) | own)  # [B, T, T_keys]
        return (columns[None, :] - self.pad[:, None]).clamp(min=0)

    def attend(
        self, layer: int, rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        end = self.length + k.shape[-2]
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end], self._allowed

    def advance(self, rows: torch.Tensor, num_new: int) -> None:
        self.length += num_new


def generate_batch(
    model: GPT,
    prompts: Sequence[Sequence[int] | torch.Tensor],
    max_new_tokens: int | Sequence[int],
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    eos_id: int | None = None,
) -> list[list[int]]:
    """The new tokens of every prompt, generated as one left-padded batch with the KV cache.

    ``max_new_tokens`` is one int or one per prompt; a row that has its tokens (or produced ``eos_id``, which
    ends its list) rides along until the batch is done — static batching's waste, which
    :mod:`minillm.inference.continuous` removes. ``temperature`` 0 is greedy (each prompt's tokens equal
    ``GPT.generate`` on it alone); sampling draws all rows from one ``generator`` stream.
    """
    check_supported(model)
    token_lists = as_token_lists(model, prompts)
    budgets = as_budgets(model, token_lists, max_new_tokens)
    check_eos(model, eos_id)
    check_sampling(temperature, top_k, top_p)
    device, dtype = model.tok_emb.weight.device, model.tok_emb.weight.dtype
    ids, pad = left_pad(token_lists)
    ids = ids.to(device)
    longest = max(budgets)
    cache = LeftPaddedKVCache(model.config, pad, ids.shape[1] + longest, device, dtype)
    out: list[list[int]] = [[] for _ in token_lists]
    done = [False] * len(token_lists)
    with eval_mode(model):
        logits = forward_rows(model, ids, cache)[:, -1]
        for _ in range(longest):
            next_ids = sample_next_token(logits, temperature, top_k, top_p, generator)
            for row, token in enumerate(next_ids.tolist()):
                if not done[row]:
                    out[row].append(token)
                    done[row] = len(out[row]) == budgets[row] or token == eos_id
            if all(done):
                break
            logits = forward_rows(model, next_ids[:, None], cache)[:, -1]
    return out
