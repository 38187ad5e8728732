"""The GPT model: token ids → logits over the next token, configurable from GPT-2 to Llama style.

    ids [B, T] → tok_emb (+ pos_emb) → blocks × n_layer → norm_f → lm_head → logits [B, T, V]
    block:  x = x + attn(norm1(x));  x = x + mlp(norm2(x))        (pre-norm residual blocks)

Switches (:class:`GPTConfig`): ``norm`` layernorm | rmsnorm, ``mlp`` gelu | swiglu, ``pos`` learned |
sinusoidal | rope | none, ``rope_style`` half | interleaved (RoPE's pairing), ``bias``, ``tie_embeddings``.
The 2026 switches, all off by default (a default model is bit-identical to one built before they existed):
``qk_norm``, ``logit_softcap`` (c·tanh(z/c) on the output logits), ``attn_window`` with ``window_pattern``
(sliding-window attention, local/global per layer), and ``n_experts``, ``experts_top_k``, ``moe_every``,
``capacity_factor`` (mixture-of-experts MLPs, :mod:`minillm.moe`). With experts, each forward leaves the summed
load-balancing loss in ``model.moe_aux_loss`` (the training loop adds ``coefficient · moe_aux_loss``; Switch: 0.01)
and per-layer counts in ``model.moe_stats``.
Presets: "gpt2-style" (LayerNorm, GELU, learned positions, biases, tied head) and "llama-style" (RMSNorm,
SwiGLU, RoPE, no biases, untied head); "gpt2-small" is GPT-2 small's exact shape (124,439,808 parameters).

Incremental decoding: ``cache = model.new_kv_cache(batch_size)``; then ``model(ids, kv_cache=cache)``
processes ``ids`` as the positions right after those already cached and advances ``cache.length``.
The logits equal those of a full recompute on the whole sequence. A sliding-window layer keeps only its last
``attn_window`` keys and values (:class:`~minillm.attention.RingKVCache`): its memory does not grow with T.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from minillm.attention import ATTENTION_IMPLS, CausalSelfAttention, LayerKVCache, RingKVCache
from minillm.embeddings import (
    POSITION_SCHEMES,
    ROPE_STYLES,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEmbedding,
)
from minillm.layers import GeluMLP, SwiGLU, embedding, linear, make_norm
from minillm.moe import MoE, MoEStats

__all__ = ["GPTConfig", "GPT", "Block", "KVCache", "count_parameters", "PRESETS", "sample_next_token"]

_NORMS = ("layernorm", "rmsnorm")
_MLPS = ("gelu", "swiglu")

#: Architecture presets. Sizes default to the course's small model; override any field.
PRESETS: dict[str, dict[str, Any]] = {
    "gpt2-style": dict(norm="layernorm", mlp="gelu", pos="learned", bias=True, tie_embeddings=True),
    "llama-style": dict(norm="rmsnorm", mlp="swiglu", pos="rope", bias=False, tie_embeddings=False),
    "gpt2-small": dict(
        vocab_size=50257,
        context_length=1024,
        n_layer=12,
        n_head=12,
        d_model=768,
        norm="layernorm",
        mlp="gelu",
        pos="learned",
        bias=True,
        tie_embeddings=True,
    ),  # fmt: skip
}


def default_d_ff(d_model: int, mlp: str) -> int:
    """4·d_model for GELU; for SwiGLU ⌊8·d_model/3⌋ rounded up to a multiple of 64.

    SwiGLU has three matrices, so 8/3·d_model keeps its parameter count equal to a 4·d_model GELU MLP.
    Llama rounds to a multiple of 256 (d_model 4096 → 11008); pass ``d_ff`` explicitly to match that.
    """
    if mlp == "gelu":
        return 4 * d_model
    return 64 * math.ceil(int(8 * d_model / 3) / 64)


@dataclass
class GPTConfig:
    """Every number and switch that defines a GPT. ``d_ff=None`` is resolved in ``__post_init__``
    (see :func:`default_d_ff`), so ``config.d_ff`` is always an int after construction."""

    vocab_size: int = 256
    context_length: int = 128
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    d_ff: int | None = None
    norm: str = "layernorm"
    mlp: str = "gelu"
    pos: str = "learned"
    bias: bool = True
    tie_embeddings: bool = True
    dropout: float = 0.0
    attn_impl: str = "sdpa"
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    n_kv_head: int | None = None  # key/value heads: n_head (multi-head), fewer (grouped-query), 1 (multi-query)
    rope_style: str = "half"  # RoPE pairing: "half" (i, i + head_dim/2: NeoX, HF Llama) or "interleaved" (2i, 2i+1)
    # The 2026 switches (notebook 16). Off by default, which leaves every existing model bit-identical.
    qk_norm: bool = False  # RMSNorm on each head's queries and keys before RoPE and the dot product
    logit_softcap: float | None = None  # output logits → c·tanh(z/c), so |logit| < c (Gemma 2: 30.0); None = off
    attn_window: int | None = None  # sliding window: a query sees itself and the W − 1 keys before it; None = full
    window_pattern: str | None = None  # per layer, repeating: "L" local (attn_window), "G" global; None = all "L"
    n_experts: int | None = None  # mixture-of-experts MLPs (minillm.moe), each of width d_ff; None = dense MLP
    experts_top_k: int = 2  # experts per token (k = 1: gate = the raw probability, k > 1: renormalised gates)
    moe_every: int = 1  # blocks moe_every − 1, 2·moe_every − 1, ... get experts (1: all; 2: every other block)
    capacity_factor: float | None = None  # per-expert capacity (minillm.moe.expert_capacity); None = drop nothing

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context_length", "n_layer", "n_head", "d_model"):
            value = getattr(self, name)
            if not _is_positive_int(value):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_head:
            fits = [n for n in range(1, min(self.d_model, 32) + 1) if self.d_model % n == 0]
            raise ValueError(
                f"n_head={self.n_head} does not divide d_model={self.d_model}; each head gets d_model/n_head "
                f"dimensions, so choose n_head from {fits} (or change d_model)"
            )
        if self.n_kv_head is None:
            self.n_kv_head = self.n_head
        if not _is_positive_int(self.n_kv_head):
            raise ValueError(f"n_kv_head must be a positive int or None, got {self.n_kv_head!r}")
        if self.n_head % self.n_kv_head:
            raise ValueError(
                f"n_kv_head={self.n_kv_head} must divide n_head={self.n_head}: each group of query heads shares one"
            )
        for name, allowed in (
            ("norm", _NORMS),
            ("mlp", _MLPS),
            ("pos", POSITION_SCHEMES),
            ("rope_style", ROPE_STYLES),
            ("attn_impl", ATTENTION_IMPLS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.pos == "rope" and self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got d_model/n_head = {self.head_dim}")
        if self.pos == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"sinusoidal positions need an even d_model, got {self.d_model}")
        for name in ("bias", "tie_embeddings", "qk_norm"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not (_is_real(self.dropout) and 0.0 <= self.dropout < 1.0):
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        # A negative or zero epsilon lets a norm divide by zero or take the root of a negative variance:
        # the logits come out NaN with no error, so it is refused here rather than discovered in training.
        if not (_is_real(self.norm_eps) and self.norm_eps > 0):
            raise ValueError(f"norm_eps must be a small positive number (e.g. 1e-5), got {self.norm_eps!r}")
        if not (_is_real(self.rope_base) and self.rope_base > 0):
            raise ValueError(f"rope_base must be a positive number (e.g. 10000.0), got {self.rope_base!r}")
        if self.d_ff is None:
            self.d_ff = default_d_ff(self.d_model, self.mlp)
        elif not _is_positive_int(self.d_ff):  # d_ff=True would silently build a one-unit MLP
            raise ValueError(f"d_ff must be a positive int or None, got {self.d_ff!r}")
        self._check_2026_switches()

    def _check_2026_switches(self) -> None:
        if self.logit_softcap is not None and not (_is_real(self.logit_softcap) and self.logit_softcap > 0):
            raise ValueError(
                f"logit_softcap must be a positive number (e.g. 30.0) or None (off), got {self.logit_softcap!r}"
            )
        if self.attn_window is not None and not _is_positive_int(self.attn_window):
            raise ValueError(
                f"attn_window must be an int ≥ 1 (keys each query sees, itself included) or None, "
                f"got {self.attn_window!r}"
            )
        if self.window_pattern is not None:
            pattern = self.window_pattern
            if not (isinstance(pattern, str) and pattern and set(pattern) <= {"L", "G"}):
                raise ValueError(
                    f"window_pattern must be a string of 'L' (local) and 'G' (global) layers, e.g. 'LLLG', "
                    f"got {self.window_pattern!r}"
                )
            if "L" in self.window_pattern and self.attn_window is None:
                raise ValueError(f"window_pattern={self.window_pattern!r} has local layers: set attn_window too")
        if self.n_experts is not None and not _is_positive_int(self.n_experts):
            raise ValueError(f"n_experts must be a positive int or None (dense MLP), got {self.n_experts!r}")
        if not _is_positive_int(self.experts_top_k):
            raise ValueError(f"experts_top_k must be an int ≥ 1 (experts per token), got {self.experts_top_k!r}")
        if self.n_experts is not None and self.experts_top_k > self.n_experts:
            raise ValueError(
                f"experts_top_k={self.experts_top_k} exceeds n_experts={self.n_experts}: a token cannot use more "
                "experts than there are"
            )
        if not _is_positive_int(self.moe_every):
            raise ValueError(f"moe_every must be a positive int, got {self.moe_every!r}")
        if self.capacity_factor is not None and not (_is_real(self.capacity_factor) and self.capacity_factor > 0):
            raise ValueError(
                f"capacity_factor must be a positive number (e.g. 1.25) or None, got {self.capacity_factor!r}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def layer_window(self, layer: int) -> int | None:
        """Block ``layer``'s attention window (None = full causal attention): ``window_pattern`` repeats over
        the blocks ("LLLG": three local blocks, then a global one), every block is local without a pattern."""
        if self.attn_window is None:
            return None
        pattern = self.window_pattern or "L"
        return self.attn_window if pattern[layer % len(pattern)] == "L" else None

    def layer_is_moe(self, layer: int) -> bool:
        """Whether block ``layer`` has a mixture of experts instead of the dense MLP."""
        return self.n_experts is not None and layer % self.moe_every == self.moe_every - 1

    def kv_cache_bytes(self, batch_size: int, seq_len: int, bytes_per_value: int = 2) -> int:
        """Memory of the KV cache: keys and values, n_layer × batch × seq_len × n_kv_head × head_dim each.

        Grouped-query attention shrinks it by n_head / n_kv_head (multi-query by n_head): what makes long
        contexts and large batches affordable at inference. A sliding-window layer holds min(seq_len, window)
        positions, so a model of local layers needs the same memory for any length past the window.
        """
        lengths = sum(min(seq_len, w or seq_len) for w in map(self.layer_window, range(self.n_layer)))
        return 2 * lengths * batch_size * self.n_kv_head * self.head_dim * bytes_per_value

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> GPTConfig:
        """A preset ("gpt2-style", "llama-style", "gpt2-small") with any fields overridden."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict of every field (for checkpoints)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GPTConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error rather than silently dropped."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown GPTConfig fields {unknown}")
        return cls(**data)


def count_parameters(config: GPTConfig) -> int:
    """Closed-form parameter count of ``GPT(config)`` (tied weights counted once)."""
    d, V, L = config.d_model, config.vocab_size, config.n_layer
    norm = (2 * d if config.bias else d) if config.norm == "layernorm" else d
    kv = config.n_kv_head * config.head_dim  # width of k and of v: d for multi-head attention
    attn = 2 * d * d + 2 * d * kv + ((2 * d + 2 * kv) if config.bias else 0)  # qkv (d → d + 2·kv) + proj (d×d)
    if config.qk_norm:
        attn += 2 * config.head_dim  # q_norm and k_norm gains
    mlp = _mlp_parameters(config)
    n_moe = sum(map(config.layer_is_moe, range(L)))
    mlps = (L - n_moe) * mlp + n_moe * (d * (config.n_experts or 0) + (config.n_experts or 0) * mlp)  # + routers
    positions = config.context_length * d if config.pos == "learned" else 0
    head = 0 if config.tie_embeddings else V * d
    return V * d + positions + L * (2 * norm + attn) + mlps + norm + head


def _mlp_parameters(config: GPTConfig) -> int:
    """Parameters of one dense MLP (or one expert)."""
    d, f = config.d_model, config.d_ff
    if config.mlp == "gelu":
        return 2 * d * f + ((f + d) if config.bias else 0)  # fc, proj
    return 3 * d * f + ((2 * f + d) if config.bias else 0)  # gate, up, down


def matmul_parameters(config: GPTConfig) -> int:
    """Parameters a token is multiplied by: all but the lookup tables — the position table, and the token table
    unless it is tied to the output head (then it is also a d×V matmul per token). The N of 6·N·D. In a mixture
    of experts a token meets the router and only its top-k experts, so the other experts do not count."""
    lookups = config.context_length * config.d_model if config.pos == "learned" else 0
    if not config.tie_embeddings:
        lookups += config.vocab_size * config.d_model
    n_moe = sum(map(config.layer_is_moe, range(config.n_layer)))
    idle_experts = n_moe * ((config.n_experts or 0) - config.experts_top_k) * _mlp_parameters(config)
    return count_parameters(config) - lookups - max(idle_experts, 0)


class Block(nn.Module):
    """One pre-norm transformer block: ``norm1``, ``attn``, ``norm2``, ``mlp`` (an :class:`~minillm.moe.MoE` in the
    blocks ``config.layer_is_moe(layer)`` names; ``layer`` also picks the block's attention window)."""

    def __init__(self, config: GPTConfig, layer: int = 0) -> None:
        super().__init__()
        c = config
        self.norm1 = make_norm(c.norm, c.d_model, eps=c.norm_eps, bias=c.bias)
        rope = RotaryEmbedding(c.head_dim, c.context_length, c.rope_base, c.rope_style) if c.pos == "rope" else None
        self.attn = CausalSelfAttention(
            c.d_model, c.n_head, c.bias, c.dropout, c.attn_impl, rope, c.n_kv_head,
            window=c.layer_window(layer), qk_norm=c.qk_norm, norm_eps=c.norm_eps,
        )  # fmt: skip
        self.norm2 = make_norm(c.norm, c.d_model, eps=c.norm_eps, bias=c.bias)
        if c.layer_is_moe(layer):
            self.mlp: nn.Module = MoE(
                c.d_model, c.d_ff, c.n_experts, c.experts_top_k, c.mlp, c.bias, c.dropout, c.capacity_factor,
                renormalize=c.experts_top_k > 1,
            )  # fmt: skip
        elif c.mlp == "gelu":
            self.mlp: nn.Module = GeluMLP(c.d_model, c.d_ff, bias=c.bias, dropout=c.dropout)
        else:
            self.mlp = SwiGLU(c.d_model, c.d_ff, bias=c.bias, dropout=c.dropout)

    def forward(self, x: torch.Tensor, kv_cache: LayerKVCache | None = None, start_pos: int = 0) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), kv_cache=kv_cache, start_pos=start_pos)
        return x + self.mlp(self.norm2(x))


class KVCache:
    """One :class:`LayerKVCache` per block (a :class:`RingKVCache` of ``attn_window`` slots for a sliding-window
    block whose window is shorter than the context) plus ``length``, the number of positions already processed.

    The layers write without checking (once per layer per token would be the decoding loop's overhead):
    :meth:`GPT.forward` checks, once per call, that the new positions fit and that the batch is the cache's.
    """

    def __init__(self, config: GPTConfig, batch_size: int, device: torch.device | str | None, dtype: torch.dtype):
        self.batch_size = batch_size
        self.layers: list[LayerKVCache | RingKVCache] = []
        for i in range(config.n_layer):
            window = config.layer_window(i)
            if window is not None and window < config.context_length:
                self.layers.append(RingKVCache(batch_size, config.n_kv_head, window, config.head_dim, device, dtype))
            else:
                shape = (batch_size, config.n_kv_head, config.context_length, config.head_dim)
                self.layers.append(LayerKVCache(*shape, device, dtype))
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by every layer's key and value buffers (allocated once: it does not grow while decoding)."""
        return sum(t.numel() * t.element_size() for layer in self.layers for t in (layer.keys, layer.values))


class GPT(nn.Module):
    """A decoder-only transformer language model.

    Submodule names (the tensor-parallel simulation and the Hugging Face export rely on them):

    * ``tok_emb.weight`` [vocab_size, d_model]; ``pos_emb.weight`` [context_length, d_model] for learned
      positions (``pos_emb`` is a parameter-free module for sinusoidal, ``None`` for rope/none);
    * ``blocks[i].norm1``, ``blocks[i].attn.qkv`` (output rows laid out [q | k | v], heads in order
      within each), ``blocks[i].attn.proj``, ``blocks[i].norm2``;
    * GELU MLP: ``blocks[i].mlp.fc``, ``blocks[i].mlp.proj``; SwiGLU: ``.mlp.gate``, ``.mlp.up``,
      ``.mlp.down``; RoPE tables (not parameters) in ``blocks[i].attn.rope``;
    * ``norm_f`` (final norm) and ``lm_head`` (no bias; its weight *is* ``tok_emb.weight`` when tied).

    Linear weights use nn.Linear's [out, in] layout. Init (GPT-2): weights N(0, 0.02²), biases 0, norm
    gains 1, and the residual projections (``attn.proj``, ``mlp.proj``/``mlp.down``) N(0, (0.02/√(2L))²)
    so the residual stream's variance does not grow with depth.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = c = config
        self.tok_emb = embedding(c.vocab_size, c.d_model)
        if c.pos == "learned":
            self.pos_emb: nn.Module | None = LearnedPositionalEmbedding(c.context_length, c.d_model)
        elif c.pos == "sinusoidal":
            self.pos_emb = SinusoidalPositionalEmbedding(c.context_length, c.d_model)
        else:
            self.pos_emb = None
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(Block(c, i) for i in range(c.n_layer))
        self.norm_f = make_norm(c.norm, c.d_model, eps=c.norm_eps, bias=c.bias)
        self.lm_head = linear(c.d_model, c.vocab_size, bias=False)
        # Recompute each block's activations in backward instead of keeping them (a training switch, not part of
        # the architecture): a block then keeps only its input, notebook 07's "full recomputation".
        self.activation_checkpointing = False
        # The summed load-balancing loss of the MoE blocks after each forward (None without experts).
        self.moe_aux_loss: torch.Tensor | None = None
        self.reset_parameters()
        if c.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2 initialisation (see the class docstring)."""
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.proj.weight", "mlp.down.weight")) or _is_expert_output(name):
                nn.init.normal_(p, 0.0, residual_std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            elif "norm" in name:
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def num_parameters(self) -> int:
        """Number of distinct parameters (a tied head counted once)."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """Training FLOPs per token, forward and backward: 6·N + 12·L·d·T (PaLM App. B; nanoGPT's MFU).

        N counts the weights a token is multiplied by: every parameter except the lookup tables (the position
        table, and the token table unless it is tied to the head, where it is a matmul). 12·L·d·T is attention's
        QKᵀ and weighted sum over a context of T tokens (default: the context length). Model FLOPs utilisation
        is tokens/s × this ÷ the device's peak FLOP/s.
        """
        c = self.config
        return 6 * matmul_parameters(c) + 12 * c.n_layer * c.d_model * (seq_len or c.context_length)

    def new_kv_cache(self, batch_size: int) -> KVCache:
        """An empty cache for ``batch_size`` sequences, on the model's device and dtype."""
        p = self.tok_emb.weight
        return KVCache(self.config, batch_size, p.device, p.dtype)

    def _check_ids(
        self, idx: torch.Tensor, start: int, check_length: bool = True, kv_cache: KVCache | None = None
    ) -> None:
        """The shape checks of every public entry (forward, hidden_states, attention_weights, generate): the
        blocks, attention, position tables and KV cache below trust them and check nothing per call."""
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"idx must be a LongTensor [B, T], got {type(idx).__name__}")
        if idx.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"idx must hold integer token ids (torch.long), got dtype {idx.dtype}")
        if idx.dim() != 2 or idx.shape[1] == 0:
            raise ValueError(f"idx must have shape [B, T] with T ≥ 1, got {tuple(idx.shape)}")
        T, limit = idx.shape[1], self.config.context_length
        if check_length and start + T > limit:
            where = f" after {start} cached positions" if start else ""
            raise ValueError(f"sequence of length {T}{where} exceeds the context length {limit}")
        if kv_cache is not None and idx.shape[0] != kv_cache.batch_size:
            raise ValueError(f"KV cache was made for batch size {kv_cache.batch_size}, got {idx.shape[0]}")

    def _check_vocab(self, idx: torch.Tensor) -> None:
        """Ids outside the vocabulary, named (at generate's entry: the forward pass does not sync to check)."""
        vocab = self.config.vocab_size
        bad = idx[(idx < 0) | (idx >= vocab)]
        if bad.numel():
            raise ValueError(f"token id {bad[0].item()} is outside the vocabulary [0, {vocab})")

    def _embed(self, idx: torch.Tensor, start: int) -> torch.Tensor:
        x = self.tok_emb(idx)
        if self.pos_emb is not None:
            x = x + self.pos_emb(idx.shape[1], start)
        return self.drop(x)

    @torch.no_grad()
    def attention_weights(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """Every layer's attention weights, a list of [B, n_head, T, T] (rows sum to 1), for plotting.

        Computed with the written-out attention, whatever ``attn_impl`` says (SDPA does not expose them).
        """
        self._check_ids(idx, 0)
        x = self._embed(idx, 0)
        maps = []
        for block in self.blocks:
            y, weights = block.attn(block.norm1(x), return_weights=True)
            x = x + y
            x = x + block.mlp(block.norm2(x))
            maps.append(weights)
        return maps

    def hidden_states(self, idx: torch.Tensor, kv_cache: KVCache | None = None) -> torch.Tensor:
        """Final-norm hidden states [B, T, d_model] (what reward and value heads read)."""
        start = kv_cache.length if kv_cache is not None else 0
        self._check_ids(idx, start, kv_cache=kv_cache)
        return self._hidden_states(idx, kv_cache, start)

    def _hidden_states(self, idx: torch.Tensor, kv_cache: KVCache | None, start: int) -> torch.Tensor:
        """:meth:`hidden_states` of checked input (the decoding loop's steps are checked once, by generate)."""
        x = self._embed(idx, start)
        recompute = self.activation_checkpointing and kv_cache is None and torch.is_grad_enabled()
        for i, block in enumerate(self.blocks):
            if recompute:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x, kv_cache.layers[i] if kv_cache is not None else None, start)
        if kv_cache is not None:
            kv_cache.length = start + idx.shape[1]
        moes = self._moe_layers()
        if moes:
            self.moe_aux_loss = torch.stack([m.aux_loss for m in moes]).sum()
        return self.norm_f(x)

    def _moe_layers(self) -> list[MoE]:
        return [block.mlp for block in self.blocks if isinstance(block.mlp, MoE)]

    @property
    def moe_stats(self) -> list[MoEStats]:
        """Per MoE block, what the last forward routed, kept and dropped (empty without experts)."""
        return [m.stats for m in self._moe_layers() if m.stats is not None]

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output head, then the soft cap c·tanh(z/c) when ``logit_softcap`` is set (≈ z for |z| ≪ c)."""
        logits = self.lm_head(hidden)
        cap = self.config.logit_softcap
        return logits if cap is None else cap * torch.tanh(logits / cap)

    def forward(self, idx: torch.Tensor, kv_cache: KVCache | None = None) -> torch.Tensor:
        """Logits [B, T, vocab_size]; with ``kv_cache`` idx continues the cached positions."""
        return self._logits(self.hidden_states(idx, kv_cache))

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
        crop: bool = False,
        eos_id: int | None = None,
    ) -> torch.Tensor:
        """Sample ``max_new_tokens`` tokens after ``idx`` [B, T]; returns [B, T + new].

        ``temperature`` 0 means greedy. ``top_k`` keeps the k most likely tokens, ``top_p`` the smallest
        set whose probability reaches p. A seeded ``generator`` makes sampling reproducible. If the
        prompt plus the new tokens would exceed the context, this raises unless ``crop=True``, which
        keeps only the last ``context_length`` tokens as context (recomputed each step once past it).
        With ``eos_id`` a sequence stops at its first eos (later positions are filled with eos) and
        generation ends early when all have stopped. Runs in eval mode (no dropout), then restores.
        """
        self._check_generation(idx, max_new_tokens, temperature, top_k, top_p, crop, eos_id)
        out = idx
        for next_id in self._decode(idx, max_new_tokens, temperature, top_k, top_p, generator, eos_id):
            out = torch.cat([out, next_id[:, None].to(out.dtype)], dim=1)
        return out

    @torch.no_grad()
    def stream(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
        eos_id: int | None = None,
    ) -> Iterator[int]:
        """The new token ids after one prompt ``idx`` [1, T], yielded as each is sampled (for a chat that prints
        as it goes); the same tokens :meth:`generate` returns, stopping before ``eos_id``. The prompt plus the
        new tokens must fit in the context."""
        if idx.dim() != 2 or idx.shape[0] != 1:
            raise ValueError(f"stream takes one prompt of shape [1, T], got {tuple(idx.shape)}")
        self._check_generation(idx, max_new_tokens, temperature, top_k, top_p, False, eos_id)
        for next_id in self._decode(idx, max_new_tokens, temperature, top_k, top_p, generator, eos_id):
            token = int(next_id[0])
            if token == eos_id:
                return
            yield token

    def _check_generation(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float,
        top_k: int | None,
        top_p: float | None,
        crop: bool,
        eos_id: int | None,
    ) -> None:
        """The arguments of :meth:`generate` and :meth:`stream`, checked once per call (not once per token)."""
        if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
        limit = self.config.context_length
        self._check_ids(idx, 0, check_length=False)
        self._check_vocab(idx)
        vocab = self.config.vocab_size
        if eos_id is not None and not (
            isinstance(eos_id, int) and not isinstance(eos_id, bool) and 0 <= eos_id < vocab
        ):
            raise ValueError(f"eos_id must be a token id in [0, {vocab}) or None, got {eos_id!r}")  # else never stops
        if not crop and idx.shape[1] > limit:
            raise ValueError(
                f"prompt of {idx.shape[1]} tokens is longer than the context length {limit}; "
                f"pass crop=True to keep only its last {limit} tokens"
            )
        if not crop and idx.shape[1] + max_new_tokens > limit:
            raise ValueError(
                f"prompt of {idx.shape[1]} tokens + max_new_tokens={max_new_tokens} exceeds the context length "
                f"{limit}; shorten it or pass crop=True to keep only the last {limit} tokens as context"
            )
        _check_sampling(temperature, top_k, top_p)

    def _decode(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float,
        top_k: int | None,
        top_p: float | None,
        generator: torch.Generator | None,
        eos_id: int | None,
    ) -> Iterator[torch.Tensor]:
        """The decoding loop of :meth:`generate` and :meth:`stream`: one [B] tensor of next ids per step, from a
        KV cache filled by the prompt. Settings and prompt are checked by the caller, once: the steps run the
        model unchecked (every new window fits the context and the cache's batch). Eval mode while it runs,
        then restored."""
        limit = self.config.context_length
        was_training = self.training
        self.eval()
        try:
            window = idx
            cache = self.new_kv_cache(idx.shape[0])
            logits = self(idx[:, -limit:], kv_cache=cache)[:, -1]
            finished = torch.zeros(idx.shape[0], dtype=torch.bool, device=idx.device)
            for step in range(max_new_tokens):
                next_id = _sample_checked(logits, temperature, top_k, top_p, generator)
                if eos_id is not None:
                    next_id = torch.where(finished, torch.full_like(next_id, eos_id), next_id)
                    finished |= next_id == eos_id
                yield next_id
                if step == max_new_tokens - 1 or (eos_id is not None and bool(finished.all())):
                    break
                window = torch.cat([window[:, -(limit - 1) :], next_id[:, None].to(window.dtype)], dim=1)
                if cache.length < limit:
                    logits = self._logits(self._hidden_states(window[:, -1:], cache, cache.length))[:, -1]
                else:  # past the context: positions shift, so the cache is useless; recompute the window
                    logits = self._logits(self._hidden_states(window[:, -limit:], None, 0))[:, -1]
        finally:
            self.train(was_training)


def _is_expert_output(name: str) -> bool:
    """An expert MLP's residual projection (``mlp.experts.<i>.proj.weight`` or ``.down.weight``): initialised like
    the dense MLP's, with the depth-scaled std."""
    parts = name.split(".")
    return len(parts) >= 4 and parts[-4] == "experts" and parts[-2] in ("proj", "down") and parts[-1] == "weight"


def _is_positive_int(value: object) -> bool:
    """An int ≥ 1 and not a bool (``True`` is an int in Python)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_real(value: object) -> bool:
    """A finite int or float, and not a bool (``True`` is an int in Python, and NaN compares False to all)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Refuse settings torch would only trip over mid-sampling (NaN probabilities, an empty top-k)."""
    if not (_is_real(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number ≥ 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and not _is_positive_int(top_k):
        raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")
    if top_p is not None and not (_is_real(top_p) and 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p!r}")


def sample_next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token id per row of ``logits`` [B, V]: greedy at temperature 0, else a filtered sample."""
    _check_sampling(temperature, top_k, top_p)
    return _sample_checked(logits, temperature, top_k, top_p, generator)


def _sample_checked(
    logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None, generator: torch.Generator | None
) -> torch.Tensor:
    """:func:`sample_next_token` for settings already checked: ``GPT.generate`` checks them once per call, not
    once per token."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the tokens ranked above it already reach top_p (the first always stays).
        drop_sorted = probs.cumsum(dim=-1) - probs >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
