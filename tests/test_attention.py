"""Tests for minillm.attention: written-out attention vs PyTorch's SDPA and nn.MultiheadAttention."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from minillm import attention
from minillm.attention import CausalSelfAttention, LayerKVCache, causal_mask, scaled_dot_product_attention
from minillm.embeddings import RotaryEmbedding

TOL = {torch.float32: 1e-6, torch.float64: 1e-12, torch.bfloat16: 2e-2}


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 3),
    heads=st.integers(1, 4),
    tq=st.integers(1, 9),
    extra_keys=st.integers(0, 6),
    d=st.sampled_from([1, 4, 8, 16]),
    masking=st.sampled_from(["none", "causal", "random", "random+causal"]),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
    seed=st.integers(0, 2**16),
)
def test_written_out_attention_equals_sdpa(batch, heads, tq, extra_keys, d, masking, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    tk = tq + extra_keys
    q, k, v = (torch.randn(batch, heads, t, d, generator=g).to(dtype) for t in (tq, tk, tk))
    mask = None
    if "random" in masking:
        mask = torch.rand(batch, 1, tq, tk, generator=g) < 0.6
        # every query keeps the key at its own position (never a fully blocked row, even with causal)
        mask[..., torch.arange(tq), torch.arange(tq) + extra_keys] = True
    is_causal = "causal" in masking
    ref_mask = mask
    if is_causal:  # SDPA's is_causal aligns top-left; for Tq < Tk pass our bottom-right mask explicitly
        c = causal_mask(tq, tk)
        ref_mask = c if mask is None else mask & c
    got = scaled_dot_product_attention(q, k, v, mask=mask, is_causal=is_causal)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=ref_mask)
    assert got.shape == (batch, heads, tq, d) and got.dtype == dtype
    torch.testing.assert_close(got, want, atol=TOL[dtype], rtol=TOL[dtype])
    # and against float64 math, so the two can't agree on a shared mistake
    scores = (q.double() @ k.double().transpose(-1, -2)) / d**0.5
    if ref_mask is not None:
        scores = scores.masked_fill(~ref_mask, float("-inf"))
    want64 = torch.softmax(scores, -1) @ v.double()
    torch.testing.assert_close(got.double(), want64, atol=max(TOL[dtype], 1e-5), rtol=TOL[dtype])


def test_causal_mask_is_lower_triangular_and_offset_for_cached_keys():
    assert torch.equal(causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())
    offset = causal_mask(2, 5)  # the last two of five positions
    assert offset.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    with pytest.raises(ValueError, match="num_keys"):
        causal_mask(5, 2)


def test_attention_weights_are_a_causal_distribution():
    q = k = v = torch.randn(1, 2, 6, 4)
    out, w = scaled_dot_product_attention(q, k, v, is_causal=True, return_weights=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 2, 6), atol=1e-6, rtol=0)
    assert torch.all(w.triu(diagonal=1) == 0)
    torch.testing.assert_close(out[..., 0, :], v[..., 0, :], atol=1e-6, rtol=0)  # first token sees only itself


def test_attention_without_positions_is_permutation_equivariant():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 7, 8, generator=g) for _ in range(3))
    perm = torch.randperm(7, generator=g)
    out = scaled_dot_product_attention(q, k, v)
    out_perm = scaled_dot_product_attention(q[..., perm, :], k[..., perm, :], v[..., perm, :])
    torch.testing.assert_close(out_perm, out[..., perm, :], atol=1e-6, rtol=0)


@pytest.mark.parametrize("attn_impl", ["sdpa", "manual"])
@pytest.mark.parametrize("bias", [True, False])
def test_causal_self_attention_matches_nn_multihead_attention(attn_impl, bias):
    torch.manual_seed(0)
    d, h, T = 32, 4, 11
    ours = CausalSelfAttention(d, h, bias=bias, attn_impl=attn_impl)
    ref = nn.MultiheadAttention(d, h, bias=bias, batch_first=True)
    with torch.no_grad():  # both store [W_q; W_k; W_v] stacked along the output dimension
        ref.in_proj_weight.copy_(ours.qkv.weight)
        ref.out_proj.weight.copy_(ours.proj.weight)
        if bias:
            ours.qkv.bias.normal_()
            ours.proj.bias.normal_()
            ref.in_proj_bias.copy_(ours.qkv.bias)
            ref.out_proj.bias.copy_(ours.proj.bias)
    x = torch.randn(3, T, d)
    # nn.MultiheadAttention's boolean mask means the opposite of ours: True = *blocked*.
    want, _ = ref(x, x, x, attn_mask=~causal_mask(T), need_weights=False)
    torch.testing.assert_close(ours(x), want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("use_rope", [False, True])
def test_manual_and_sdpa_modules_agree_and_return_weights(use_rope):
    torch.manual_seed(1)
    rope = RotaryEmbedding(8, 16) if use_rope else None
    a = CausalSelfAttention(32, 4, attn_impl="sdpa", rope=rope)
    b = CausalSelfAttention(32, 4, attn_impl="manual", rope=rope)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 16, 32)
    torch.testing.assert_close(a(x), b(x), atol=1e-6, rtol=0)
    y, w = a(x, return_weights=True)
    assert w.shape == (2, 4, 16, 16)
    torch.testing.assert_close(y, a(x), atol=1e-6, rtol=0)


@pytest.mark.parametrize("attn_impl", ["sdpa", "manual"])
def test_layer_kv_cache_equals_full_recompute(attn_impl):
    torch.manual_seed(2)
    attn = CausalSelfAttention(32, 4, attn_impl=attn_impl, rope=RotaryEmbedding(8, 20))
    x = torch.randn(2, 20, 32)
    full = attn(x)
    cache = LayerKVCache(2, 4, 20, 8)
    parts, pos = [], 0
    for size in (5, 1, 1, 9, 4):
        parts.append(attn(x[:, pos : pos + size], kv_cache=cache, start_pos=pos))
        pos += size
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-6, rtol=0)
    # append checks nothing (it runs once per layer per token): GPT.forward refuses, once per call, a write past
    # the cache or from another batch size (test_model.py: test_kv_cache_refuses_to_run_past_the_context)


def test_dropout_only_in_training():
    torch.manual_seed(3)
    attn = CausalSelfAttention(16, 2, dropout=0.5, attn_impl="manual")
    x = torch.randn(1, 6, 16)
    attn.eval()
    assert torch.equal(attn(x), attn(x))
    attn.train()
    assert not torch.equal(attn(x), attn(x))


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="n_head=3 must be a positive int that divides d_model=32"):
        CausalSelfAttention(32, 3)
    with pytest.raises(ValueError, match="attn_impl"):
        CausalSelfAttention(32, 4, attn_impl="flash")
    attn = CausalSelfAttention(32, 4)
    with pytest.raises(RuntimeError, match="same dtype"):  # torch's own check in the projection, no extra guard
        attn(torch.zeros(1, 3, 32, dtype=torch.long))
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):  # torch's check again, not one per call
        attn(torch.zeros(1, 3, 16))
    with pytest.raises(ValueError, match="start_pos=2 needs a kv_cache"):
        attn(torch.zeros(1, 3, 32), start_pos=2)
    q = torch.zeros(1, 2, 4)
    with pytest.raises(TypeError, match="boolean"):
        scaled_dot_product_attention(q, q, q, mask=torch.ones(2, 2))
    with pytest.raises(ValueError, match="head width"):
        scaled_dot_product_attention(q, torch.zeros(1, 2, 5), q)


# --- the fused CPU kernel on half-precision inputs (Intel Xeon with AMX under ATEN_CPU_CAPABILITY=avx2) ---


@pytest.mark.parametrize(
    ("dtype", "capability", "flags", "usable"),
    [
        (torch.bfloat16, "AVX2", {"avx2", "amx_bf16", "amx_tile"}, False),  # the failing case: AMX told AVX2
        (torch.bfloat16, "DEFAULT", {"amx_bf16"}, False),
        (torch.bfloat16, "AVX512", {"avx512f", "amx_bf16"}, True),  # native on the same CPU
        (torch.bfloat16, "AVX2", {"avx2", "avx512f"}, True),  # no AMX: the VNNI packing is never asked for
        (torch.float16, "AVX2", {"amx_bf16"}, True),  # AMX-BF16 only: fp16 is not packed for tiles
        (torch.float16, "AVX2", {"amx_fp16"}, False),
        (torch.float32, "AVX2", {"amx_bf16", "amx_fp16"}, True),  # float32 never takes that path
        (torch.float64, "DEFAULT", {"amx_bf16"}, True),
        (torch.bfloat16, "AVX2", set(), True),  # no flags known (macOS, Windows)
    ],
)
def test_fused_cpu_kernel_selection(dtype, capability, flags, usable):
    assert attention.fused_cpu_kernel_usable(dtype, capability, frozenset(flags)) is usable


def test_forced_math_path_computes_the_same_attention(monkeypatch):
    """Where the fused kernel is refused, fused_attention must still be attention: compare it with float64."""
    monkeypatch.setattr(attention, "_fused_kernel_usable_here", lambda dtype: dtype == torch.float32)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 32, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(64, 64, generator=g) > 0.3
    mask |= torch.eye(64, dtype=torch.bool)
    for kwargs in (dict(is_causal=True), dict(mask=mask), {}):
        reference = scaled_dot_product_attention(q, k, v, **kwargs)
        out = attention.fused_attention(*(t.bfloat16() for t in (q, k, v)), **kwargs)
        assert out.dtype == torch.bfloat16
        assert (out.double() - reference).abs().max() < 3e-2  # bf16 keeps 8 bits: a few 1e-3 per output


REPRODUCTION = """
import torch
from minillm import attention
from minillm.model import GPT, GPTConfig

forced = {forced}
if forced:  # pretend this CPU has AMX, whatever it has: the selection must then take the math path
    attention._cpu_flags = lambda: frozenset({{"amx_bf16", "amx_tile"}})
    attention._fused_kernel_usable_here.cache_clear()
    assert not attention._fused_kernel_usable_here(torch.bfloat16)
x = torch.randn(1, 4, 64, 32, generator=torch.Generator().manual_seed(0)).bfloat16()
attention.fused_attention(x, x, x, is_causal=True)                      # the issue's minimal reproduction
torch.manual_seed(0)
model = GPT(GPTConfig.preset("gpt2-style", vocab_size=64, context_length=64, n_layer=2, n_head=4, d_model=128))
with torch.autocast("cpu", dtype=torch.bfloat16):                        # notebook 08's autocast forward
    logits = model(torch.randint(0, 64, (2, 64)))
logits.float().sum().backward()
print("ok", torch.backends.cpu.get_cpu_capability())
"""


@pytest.mark.parametrize("forced", [True, False])
def test_bf16_attention_runs_under_avx2_capability(forced):
    """The reproduction of the AMX failure, in a process told ATEN_CPU_CAPABILITY=avx2 (read once at start-up).

    Unforced, it exercises this CPU's own selection (on an AMX CPU: the math path); forced, the math path
    is taken on any CPU.
    """
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    result = subprocess.run(
        [sys.executable, "-c", REPRODUCTION.format(forced=forced)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("ok")
