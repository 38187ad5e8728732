"""The GPT forward pass with a position per row and a key mask: what serving several sequences at once needs.

:meth:`minillm.model.GPT.forward` gives every row of a batch the same positions and sees every cached key. A
server's rows differ: a left-padded prompt starts later than its neighbours, a request admitted mid-stream has
a shorter history, a paged cache keeps each sequence in blocks of its own. This module runs the *same* modules
of a :class:`~minillm.model.GPT` (embeddings, norms, ``qkv``, RoPE tables, ``proj``, MLPs, head), so the weights
and the arithmetic are the model's; only where keys and values live, and which of them a query may see, is
handed to a :class:`KVStore`:

    positions = store.positions(rows, T)             [B, T]  each token's position in its own sequence
    keys, values, allowed = store.attend(layer, rows, k, v)   write this step's k, v; read what the rows see
    store.advance(rows, T)                           after the last layer

``allowed`` [B, T, T_keys] is True where a query may attend a key (causality and padding in one mask).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Protocol

import torch

from minillm.attention import fused_attention, scaled_dot_product_attention
from minillm.embeddings import RotaryEmbedding
from minillm.model import GPT, GPTConfig

__all__ = ["KVStore", "forward_rows", "check_supported", "kv_bytes_per_token", "eval_mode"]

#: GPTConfig fields whose every value this forward reproduces. A field added later (a new attention or block
#: switch) is refused unless it keeps its default, rather than silently computed without it.
_UNDERSTOOD_FIELDS = frozenset(
    {
        "vocab_size", "context_length", "n_layer", "n_head", "d_model", "d_ff", "norm", "mlp", "pos", "bias",
        "tie_embeddings", "dropout", "attn_impl", "norm_eps", "rope_base", "n_kv_head", "rope_style",
    }
)  # fmt: skip


class KVStore(Protocol):
    """Where a batch's keys and values live; see the module docstring for the three calls."""

    def positions(self, rows: torch.Tensor, num_new: int) -> torch.Tensor: ...

    def attend(
        self, layer: int, rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...

    def advance(self, rows: torch.Tensor, num_new: int) -> None: ...


def check_supported(model: GPT) -> None:
    """Refuse a model this forward would compute wrongly: not a GPT, or a config switch it does not know."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a minillm GPT, got {type(model).__name__}")
    config = model.config
    for field in dataclasses.fields(config):
        if field.name in _UNDERSTOOD_FIELDS:
            continue
        default = field.default if field.default is not dataclasses.MISSING else None
        if getattr(config, field.name) != default:
            raise NotImplementedError(
                f"minillm.inference does not implement GPTConfig.{field.name}={getattr(config, field.name)!r} yet; "
                "use GPT.generate for this model"
            )


@contextlib.contextmanager
def eval_mode(*models: torch.nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no gradients while serving, each model's own mode restored after."""
    modes = [m.training for m in models]
    try:
        for m in models:
            m.eval()
        with torch.no_grad():
            yield
    finally:
        for m, mode in zip(models, modes, strict=True):
            m.train(mode)


def kv_bytes_per_token(config: GPTConfig, bytes_per_value: int) -> int:
    """Bytes one token adds to the cache: keys and values of every layer (2 · L · n_kv_head · head_dim values)."""
    return 2 * config.n_layer * config.n_kv_head * config.head_dim * bytes_per_value


def _rotate_at(x: torch.Tensor, rope: RotaryEmbedding, positions: torch.Tensor) -> torch.Tensor:
    """RoPE of x [B, H, T, head_dim] at per-row positions [B, T], from the model's own cos/sin tables."""
    cos = rope.cos[positions][:, None].to(x.dtype)  # [B, 1, T, head_dim]: one angle set per row and token
    sin = rope.sin[positions][:, None].to(x.dtype)
    if rope.style == "half":
        half = x.shape[-1] // 2
        partner = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    else:
        partner = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    return x * cos + partner * sin


def _embed_at(model: GPT, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    x = model.tok_emb(ids)
    if model.config.pos == "learned":
        x = x + model.pos_emb.weight[positions]
    elif model.config.pos == "sinusoidal":
        x = x + model.pos_emb.table[positions]
    return x


def forward_rows(model: GPT, ids: torch.Tensor, store: KVStore, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Logits [B, T, vocab] of ``ids`` [B, T] for the store's ``rows`` (default 0..B−1); call it in eval mode.

    Each row's tokens sit at the positions ``store`` gives it and attend the keys it allows, so a row's logits
    are those it would get alone. Inputs are trusted: the public functions of this package check them once.
    """
    B, T = ids.shape
    if rows is None:
        rows = torch.arange(B, device=ids.device)
    positions = store.positions(rows, T)
    x = _embed_at(model, ids, positions)
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        q, k, v = attn.split_heads(block.norm1(x))
        if attn.rope is not None:
            q, k = _rotate_at(q, attn.rope, positions), _rotate_at(k, attn.rope, positions)
        keys, values, allowed = store.attend(layer, rows, k, v)
        if attn.n_kv_head != attn.n_head:  # grouped-query attention: each kv head serves a group of query heads
            keys, values = (t.repeat_interleave(attn.n_head // attn.n_kv_head, dim=1) for t in (keys, values))
        mask = allowed[:, None]  # [B, 1, T, T_keys], the same for every head
        if attn.attn_impl == "sdpa":
            y = fused_attention(q, keys, values, mask=mask)
        else:
            y = scaled_dot_product_attention(q, keys, values, mask=mask)
        x = x + attn.proj(y.transpose(1, 2).reshape(B, T, attn.d_model))
        x = x + block.mlp(block.norm2(x))
    store.advance(rows, T)
    return model.lm_head(model.norm_f(x))
