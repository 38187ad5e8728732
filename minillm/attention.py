"""Scaled dot-product attention, causal multi-head self-attention and the KV cache.

attention(Q, K, V) = softmax(Q·Kᵀ / √d_head + mask) · V

**Mask convention** (the same as ``torch.nn.functional.scaled_dot_product_attention``): a *boolean* mask
of shape broadcastable to [..., T_query, T_key] where ``True`` means "this query may attend to this key"
and ``False`` means "blocked" (its score becomes −inf before the softmax). The causal mask is
lower-triangular: query i sees keys 0..i. A query row whose keys are all blocked has no distribution;
it gives nan, so don't build such a mask.

Two paths compute the same thing: ``"manual"`` writes every step out (scores, mask, softmax, weighted
sum), ``"sdpa"`` calls PyTorch's fused kernel (faster, less memory; the default for training) through
:func:`fused_attention`, which steps around the one CPU case where that kernel cannot run.

**Sliding-window attention** (Longformer, Mistral, Gemma's local layers): with a window of W a query sees only
itself and the W − 1 keys before it (:func:`sliding_window_mask`), so attention costs O(T·W) and decoding needs to
keep only W keys and values per layer (:class:`RingKVCache`), however long the text. Stacked layers still carry
information further: L local layers reach back L·(W − 1) positions. **QK-norm** (``qk_norm=True``) RMS-normalises
each head's queries and keys before RoPE and the dot product, which bounds the attention logits (OLMo 2, Qwen 3,
Gemma 3): a stability switch for large learning rates.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from minillm.embeddings import RotaryEmbedding
from minillm.layers import RMSNorm, linear, softmax

__all__ = [
    "ATTENTION_IMPLS",
    "causal_mask",
    "sliding_window_mask",
    "scaled_dot_product_attention",
    "fused_cpu_kernel_usable",
    "fused_attention",
    "LayerKVCache",
    "RingKVCache",
    "CausalSelfAttention",
]

#: The two attention paths: PyTorch's fused kernel and the written-out reference.
ATTENTION_IMPLS = ("sdpa", "manual")


def causal_mask(num_queries: int, num_keys: int | None = None, device: torch.device | None = None) -> torch.Tensor:
    """Boolean [num_queries, num_keys] mask, True where query i may see key j.

    Queries are the *last* ``num_queries`` positions of the ``num_keys`` keys (the KV-cache case:
    cached keys come first), so query i sits at position ``num_keys − num_queries + i`` and sees
    keys j ≤ that position.
    """
    num_keys = num_queries if num_keys is None else num_keys
    if num_keys < num_queries:
        raise ValueError(f"num_keys ({num_keys}) must be ≥ num_queries ({num_queries})")
    offset = num_keys - num_queries
    q_pos = torch.arange(num_queries, device=device)[:, None] + offset
    k_pos = torch.arange(num_keys, device=device)[None, :]
    return k_pos <= q_pos


def sliding_window_mask(
    num_queries: int, num_keys: int | None = None, window: int = 1, device: torch.device | None = None
) -> torch.Tensor:
    """:func:`causal_mask` restricted to a window: query i (at position ``num_keys − num_queries + i``) sees keys j
    with position − window < j ≤ position, i.e. itself and the ``window − 1`` keys before it."""
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError(f"window must be an int ≥ 1 (keys a query sees, itself included), got {window!r}")
    causal = causal_mask(num_queries, num_keys, device=device)
    num_keys = causal.shape[-1]
    q_pos = torch.arange(num_queries, device=device)[:, None] + (num_keys - num_queries)
    k_pos = torch.arange(num_keys, device=device)[None, :]
    return causal & (k_pos > q_pos - window)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The written-out attention: q [..., Tq, d], k [..., Tk, d], v [..., Tk, dv] → [..., Tq, dv].

    ``mask`` is boolean (True = may attend; see the module docstring); ``is_causal`` adds the causal
    mask (aligned so the last query sees every key). With ``return_weights`` also returns the attention
    weights [..., Tq, Tk] (rows sum to 1), which is what attention maps plot.
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the head width, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys, got {k.shape[-2]} and {v.shape[-2]}")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
    return _attention(q, k, v, mask, is_causal, dropout_p, return_weights)


def _attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    dropout_p: float,
    return_weights: bool,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """:func:`scaled_dot_product_attention` of checked inputs (what :class:`CausalSelfAttention` runs)."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # [..., Tq, Tk]
    allowed = mask
    if is_causal:
        causal = causal_mask(q.shape[-2], k.shape[-2], device=q.device)
        allowed = causal if allowed is None else allowed & causal
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    out = weights @ v
    return (out, weights) if return_weights else out


#: Half-precision dtypes and the AMX feature whose tile instructions torch's fused CPU kernel packs them for.
_AMX_FLAG_OF_DTYPE = {torch.bfloat16: "amx_bf16", torch.float16: "amx_fp16"}


def fused_cpu_kernel_usable(dtype: torch.dtype, capability: str, cpu_flags: frozenset[str]) -> bool:
    """Whether ``F.scaled_dot_product_attention``'s fused CPU kernel can run on ``dtype`` inputs.

    Why this exists: for bf16 (and fp16) the fused kernel chooses its packing by what the *hardware* has, not by
    the instruction set torch was told to use. On a CPU with AMX, ``ATEN_CPU_CAPABILITY=avx2`` (or ``default``)
    makes it call a VNNI packing routine that was compiled out, and every call raises "pack_vnni2 is only
    supported when avx512 is supported" (seen with torch 2.13 on Intel Xeon with AMX; fp16 passes there, but the
    same routine packs fp16 on CPUs with AMX-FP16, so that case is treated alike). float32 and float64 never take
    that path. ``capability`` is what ``torch.backends.cpu.get_cpu_capability()`` reports ("AVX512", "AVX2",
    "DEFAULT", ...); ``cpu_flags`` are the CPU's feature flags (``/proc/cpuinfo`` on Linux).
    """
    amx_flag = _AMX_FLAG_OF_DTYPE.get(dtype)
    if amx_flag is None or amx_flag not in cpu_flags:
        return True
    return capability.upper().startswith("AVX512")


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """This CPU's feature flags, read once; empty where /proc/cpuinfo is absent (macOS, Windows: no AMX there)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


@functools.cache
def _fused_kernel_usable_here(dtype: torch.dtype) -> bool:
    return fused_cpu_kernel_usable(dtype, torch.backends.cpu.get_cpu_capability(), _cpu_flags())


def fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention``, with PyTorch's math backend where its fused CPU kernel cannot run.

    The one place the choice is made (see :func:`fused_cpu_kernel_usable`); every other input goes to the fused
    kernel unchanged. The math backend computes the same attention, only without fusing.
    """
    if q.device.type == "cpu" and q.dtype in _AMX_FLAG_OF_DTYPE and not _fused_kernel_usable_here(q.dtype):
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:  # torch < 2.3: the written-out attention is the math path
            return _attention(q, k, v, mask, is_causal, dropout_p, False)
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout_p)


class LayerKVCache:
    """Keys and values one attention layer has already computed, so decoding a new token costs O(T).

    Preallocated [batch, n_head, max_length, head_dim] buffers; ``append(k, v, start)`` writes the new
    keys/values at positions start..start+T−1 and returns everything cached so far. The model-level
    :class:`minillm.model.KVCache` holds one of these per block and the shared position. ``append`` runs
    once per layer per decoded token, so it checks nothing: the model checks once per call that the new
    positions fit (start + T ≤ max_length) and that the batch is the cache's.
    """

    def __init__(
        self,
        batch_size: int,
        n_head: int,
        max_length: int,
        head_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        shape = (batch_size, n_head, max_length, head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.max_length = max_length

    def append(self, k: torch.Tensor, v: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        end = start + k.shape[-2]
        self.keys[:, :, start:end] = k
        self.values[:, :, start:end] = v
        return self.keys[:, :, :end], self.values[:, :, :end]


class RingKVCache:
    """The KV cache of a sliding-window layer: only the last ``window`` positions, in a ring of ``window`` slots.

    Position p lives in slot p mod window, so its memory is [batch, n_head, window, head_dim] however many tokens
    are decoded (a full cache grows with T). ``append(k, v, start)`` has :class:`LayerKVCache`'s contract and
    returns keys and values that hold every key the new queries may see: for one new token the filled slots (in
    ring order: attention does not care about the order of keys when nothing is masked, and a single query
    sees all of them), for several the cached window followed by the new ones, in position order, for the
    caller's :func:`sliding_window_mask`. Keys are stored after RoPE, so they need no position of their own.
    """

    def __init__(
        self,
        batch_size: int,
        n_head: int,
        window: int,
        head_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        shape = (batch_size, n_head, window, head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.window = window

    def append(self, k: torch.Tensor, v: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        T, W = k.shape[-2], self.window
        if T == 1:
            slot = start % W
            self.keys[:, :, slot : slot + 1] = k
            self.values[:, :, slot : slot + 1] = v
            filled = min(start + 1, W)
            return self.keys[:, :, :filled], self.values[:, :, :filled]
        cached = torch.arange(max(0, start - W), start, device=self.keys.device) % W  # slots, oldest first
        keys = torch.cat([self.keys[:, :, cached], k], dim=2)
        values = torch.cat([self.values[:, :, cached], v], dim=2)
        last = min(W, keys.shape[2])  # the positions the ring keeps: the last W
        slots = torch.arange(start + T - last, start + T, device=self.keys.device) % W
        self.keys[:, :, slots] = keys[:, :, -last:]
        self.values[:, :, slots] = values[:, :, -last:]
        return keys, values


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: x [B, T, d_model] → [B, T, d_model].

    Submodules: ``qkv`` (one Linear whose output is laid out [q | k | v]: q split into ``n_head`` heads, k and v
    into ``n_kv_head`` heads of the same width, in order) and ``proj`` (d_model → d_model, the residual
    projection). With ``rope`` set, queries and keys are rotated (see :mod:`minillm.embeddings`).
    ``n_kv_head`` < ``n_head`` is grouped-query attention (1: multi-query): each group of n_head / n_kv_head
    query heads reads the same key and value head, so the KV cache is that many times smaller.
    ``window`` (None = full causal attention) makes it sliding-window attention; ``qk_norm`` adds ``q_norm`` and
    ``k_norm`` (:class:`~minillm.layers.RMSNorm` over head_dim, one gain shared by the heads), applied before RoPE.
    """

    def __init__(
        self,
        d_model: int,
        n_head: int,
        bias: bool = True,
        dropout: float = 0.0,
        attn_impl: str = "sdpa",
        rope: RotaryEmbedding | None = None,
        n_kv_head: int | None = None,
        window: int | None = None,
        qk_norm: bool = False,
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        if not isinstance(n_head, int) or n_head <= 0 or d_model % n_head:
            raise ValueError(f"n_head={n_head!r} must be a positive int that divides d_model={d_model}")
        n_kv_head = n_head if n_kv_head is None else n_kv_head
        if not isinstance(n_kv_head, int) or n_kv_head <= 0 or n_head % n_kv_head:
            raise ValueError(f"n_kv_head={n_kv_head!r} must be a positive int that divides n_head={n_head}")
        if attn_impl not in ATTENTION_IMPLS:
            raise ValueError(f"attn_impl must be one of {ATTENTION_IMPLS}, got {attn_impl!r}")
        if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
            raise ValueError(f"window must be an int ≥ 1 or None (full attention), got {window!r}")
        self.d_model, self.n_head, self.head_dim = d_model, n_head, d_model // n_head
        self.n_kv_head, self.kv_width = n_kv_head, n_kv_head * self.head_dim
        self.attn_impl = attn_impl
        self.dropout = dropout
        self.qkv = linear(d_model, d_model + 2 * self.kv_width, bias=bias)
        self.proj = linear(d_model, d_model, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)
        self.rope = rope
        self.window = window
        if qk_norm:
            self.q_norm = RMSNorm(self.head_dim, eps=norm_eps)
            self.k_norm = RMSNorm(self.head_dim, eps=norm_eps)
        self.qk_norm = qk_norm

    def split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, d_model] → q [B, n_head, T, head_dim]; k, v [B, n_kv_head, T, head_dim]."""
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split([self.d_model, self.kv_width, self.kv_width], dim=-1)
        heads = (self.n_head, self.n_kv_head, self.n_kv_head)
        return tuple(t.view(B, T, h, self.head_dim).transpose(1, 2) for t, h in zip((q, k, v), heads, strict=True))

    def forward(
        self,
        x: torch.Tensor,
        kv_cache: LayerKVCache | None = None,
        start_pos: int = 0,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend causally; ``start_pos`` is the position of x's first token (non-zero with a cache).

        ``return_weights`` (manual path only) also returns the weights [B, n_head, T, T_keys]. ``x`` is not
        checked here (this runs once per layer per token): a wrong width fails in ``qkv``, torch's own check,
        and :class:`minillm.model.GPT` checks its input once per call.
        """
        B, T, _ = x.shape
        q, k, v = self.split_heads(x)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope is not None:
            q, k = self.rope(q, start_pos), self.rope(k, start_pos)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v, start_pos)
        elif start_pos != 0:
            raise ValueError(f"start_pos={start_pos} needs a kv_cache holding the earlier positions")
        if self.window is not None and k.shape[-2] > T + self.window - 1:
            # Keys before the first query's window are seen by no query (a full cache holds them): drop them.
            k, v = k[:, :, -(T + self.window - 1) :], v[:, :, -(T + self.window - 1) :]
        if self.n_kv_head != self.n_head:  # each key/value head serves n_head / n_kv_head query heads, in order
            k, v = (t.repeat_interleave(self.n_head // self.n_kv_head, dim=1) for t in (k, v))
        num_keys = k.shape[-2]
        # Causal structure: no mask for a single new token (it sees everything cached), the fused
        # is_causal flag when queries and keys coincide, an explicit offset mask otherwise.
        mask, is_causal = None, False
        if self.window is not None and T > 1 and num_keys > self.window:  # else every key is within reach
            mask = sliding_window_mask(T, num_keys, self.window, device=x.device)
        elif num_keys == T:
            is_causal = T > 1
        elif T > 1:
            mask = causal_mask(T, num_keys, device=x.device)
        dropout_p = self.dropout if self.training else 0.0
        weights = None
        if self.attn_impl == "sdpa" and not return_weights:
            y = fused_attention(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
        else:
            y, weights = _attention(q, k, v, mask, is_causal, dropout_p, True)
        y = y.transpose(1, 2).contiguous().view(B, T, self.d_model)
        y = self.resid_dropout(self.proj(y))
        return (y, weights) if return_weights else y
