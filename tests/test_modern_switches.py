"""The 2026 switches of GPTConfig (sliding windows and their ring KV cache, QK-norm, logit soft-capping) against
hand-written masks, written-out float64 attention, recomputation without a cache and the tanh formula."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from minillm.attention import CausalSelfAttention, RingKVCache, sliding_window_mask
from minillm.embeddings import RotaryEmbedding
from minillm.interop import architecture_of
from minillm.layers import rms_norm
from minillm.model import GPT, GPTConfig, count_parameters

ROOT = Path(__file__).resolve().parents[1]
SHAPE = dict(vocab_size=41, context_length=40, n_layer=2, n_head=2, d_model=16)


def gpt(**overrides) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**SHAPE, **overrides})).eval()


def ids(batch: int, length: int, seed: int = 1, vocab: int = 41) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- the window mask


@pytest.mark.parametrize("tq,tk,window", [(6, 6, 1), (6, 6, 3), (6, 6, 6), (6, 6, 9), (3, 8, 2), (1, 8, 4), (5, 9, 3)])
def test_window_mask_equals_a_hand_written_mask(tq, tk, window):
    hand = [[(tk - tq + i - window < j <= tk - tq + i) for j in range(tk)] for i in range(tq)]
    assert sliding_window_mask(tq, tk, window).tolist() == hand


def attention_by_hand(attn: CausalSelfAttention, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Multi-head attention written out from the layer's weights, with an explicit boolean mask (float64)."""
    B, T, d = x.shape
    h, hd = attn.n_head, attn.head_dim
    q, k, v = F.linear(x, attn.qkv.weight, attn.qkv.bias).split(d, dim=-1)
    q, k, v = (t.reshape(B, T, h, hd).transpose(1, 2) for t in (q, k, v))
    if attn.qk_norm:
        q, k = rms_norm(q, attn.q_norm.weight, attn.q_norm.eps), rms_norm(k, attn.k_norm.weight, attn.k_norm.eps)
    if attn.rope is not None:
        q, k = attn.rope(q), attn.rope(k)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(hd)).masked_fill(~mask, float("-inf"))
    y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
    return F.linear(y, attn.proj.weight, attn.proj.bias)


@pytest.mark.parametrize("impl", ["sdpa", "manual"])
@pytest.mark.parametrize("window", [1, 3, 5])
@pytest.mark.parametrize("qk_norm", [False, True])
def test_windowed_attention_and_qk_norm_equal_the_written_out_formula(impl, window, qk_norm):
    torch.manual_seed(0)
    rope = RotaryEmbedding(8, 16)
    attn = CausalSelfAttention(16, 2, attn_impl=impl, rope=rope, window=window, qk_norm=qk_norm).double()
    if qk_norm:
        with torch.no_grad():  # gains away from 1, so the formula must apply them
            attn.q_norm.weight.uniform_(0.5, 1.5)
            attn.k_norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    mask = torch.tensor([[i - window < j <= i for j in range(9)] for i in range(9)])
    torch.testing.assert_close(attn(x), attention_by_hand(attn, x, mask), atol=1e-12, rtol=0)


def test_qk_norm_changes_the_output():
    torch.manual_seed(0)
    plain = CausalSelfAttention(16, 2)
    normed = CausalSelfAttention(16, 2, qk_norm=True)
    normed.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(1, 7, 16)
    assert (plain(x) - normed(x)).abs().max() > 1e-3


@pytest.mark.parametrize("window", [8, 40, 100])
def test_a_window_as_long_as_the_sequence_is_full_attention(window):
    full, windowed = gpt(pos="rope"), gpt(pos="rope", attn_window=window)
    x = ids(2, 8)
    assert torch.equal(full(x), windowed(x))


def test_a_local_layer_stack_sees_exactly_its_receptive_field():
    W, L, t = 4, 2, 30  # two local layers reach back L·(W − 1) = 6 positions
    model = gpt(n_layer=L, attn_window=W, pos="rope")
    x = ids(1, t + 1)
    base = model(x)[0, t]
    far, near = x.clone(), x.clone()
    far[0, t - L * (W - 1) - 1] = (far[0, t - L * (W - 1) - 1] + 1) % 41
    near[0, t - L * (W - 1)] = (near[0, t - L * (W - 1)] + 1) % 41
    assert torch.equal(model(far)[0, t], base)
    assert (model(near)[0, t] - base).abs().max() > 1e-4


# ---------------------------------------------------------------- the ring KV cache


CACHED = [
    dict(attn_window=5, pos="rope"),
    dict(attn_window=6, window_pattern="LG", pos="learned"),
    dict(attn_window=3, window_pattern="GL", pos="rope", n_kv_head=1, n_layer=3),
]


@pytest.mark.parametrize("overrides", CACHED)
def test_cached_decoding_with_the_ring_equals_recomputation(overrides):
    model = gpt(**overrides)
    prompt = ids(2, 4, seed=2)
    out = model.generate(prompt, max_new_tokens=30, temperature=0)
    seq = prompt
    cache = model.new_kv_cache(2)
    step_logits = model(prompt, kv_cache=cache)[:, -1]
    for _ in range(30):  # recompute the whole sequence without a cache each step
        full = model(seq)[:, -1]
        torch.testing.assert_close(step_logits, full, atol=1e-5, rtol=0)
        seq = torch.cat([seq, full.argmax(-1, keepdim=True)], dim=1)
        step_logits = model(seq[:, -1:], kv_cache=cache)[:, -1]
    assert torch.equal(out, seq)


@pytest.mark.parametrize("overrides", CACHED)
def test_chunked_prefill_into_the_ring_equals_the_full_forward(overrides):
    model = gpt(**overrides)
    x = ids(2, 38, seed=3)
    full = model(x)
    cache, start = model.new_kv_cache(2), 0
    for size in [7, 1, 3, 9, 1, 1, 12, 4]:
        chunk = model(x[:, start : start + size], kv_cache=cache)
        torch.testing.assert_close(chunk, full[:, start : start + size], atol=1e-5, rtol=0)
        start += size


def test_the_ring_s_memory_stays_at_the_window():
    W = 5
    short, long = gpt(attn_window=W, context_length=40), gpt(attn_window=W, context_length=160)
    for model in (short, long):
        cache = model.new_kv_cache(2)
        before = cache.nbytes
        model.generate(ids(2, 3), max_new_tokens=35, temperature=0)
        model(ids(2, 30), kv_cache=cache)
        for _ in range(8):
            model(ids(2, 1), kv_cache=cache)
        assert all(isinstance(layer, RingKVCache) and layer.keys.shape[2] == W for layer in cache.layers)
        assert cache.nbytes == before == 2 * SHAPE["n_layer"] * 2 * W * SHAPE["d_model"] * 4  # k and v, fp32
        assert cache.nbytes == model.config.kv_cache_bytes(2, model.config.context_length, bytes_per_value=4)
    full = gpt(context_length=160).new_kv_cache(2)
    assert full.nbytes == 160 // W * short.new_kv_cache(2).nbytes  # a full cache grows with the context


def test_window_pattern_repeats_over_the_layers():
    config = GPTConfig(**{**SHAPE, "n_layer": 5}, attn_window=4, window_pattern="LLG")
    assert [config.layer_window(i) for i in range(5)] == [4, 4, None, 4, 4]
    model = GPT(config)
    assert [b.attn.window for b in model.blocks] == [4, 4, None, 4, 4]
    assert [type(c).__name__ for c in model.new_kv_cache(1).layers] == ["RingKVCache"] * 2 + ["LayerKVCache"] + [
        "RingKVCache"
    ] * 2


# ---------------------------------------------------------------- logit soft-capping


def test_softcap_is_c_tanh_of_the_uncapped_logits_and_bounded_by_c():
    cap = 2.0
    plain, capped = gpt(), gpt(logit_softcap=cap)
    with torch.no_grad():  # make raw logits large enough that the cap matters
        plain.tok_emb.weight.mul_(40)
    capped.load_state_dict(plain.state_dict())
    x = ids(2, 12)
    raw = plain(x)
    assert raw.abs().max() > 3 * cap
    torch.testing.assert_close(capped(x), cap * torch.tanh(raw / cap), atol=1e-6, rtol=0)
    assert capped(x).abs().max() <= cap
    # tanh is increasing, so greedy decoding picks the same tokens as without the cap.
    assert torch.equal(capped.generate(x[:, :3], 10, temperature=0), plain.generate(x[:, :3], 10, temperature=0))


# ---------------------------------------------------------------- configs: old ones load, bad ones are refused


def test_an_old_config_without_the_new_keys_loads_with_everything_off():
    old = json.loads((ROOT / "data" / "base" / "config.json").read_text())["model"]
    new_keys = {"qk_norm", "logit_softcap", "attn_window", "window_pattern", "n_experts", "experts_top_k",
                "moe_every", "capacity_factor"}  # fmt: skip
    assert not new_keys & set(old)
    config = GPTConfig.from_dict(old)
    assert (config.qk_norm, config.logit_softcap, config.attn_window, config.n_experts) == (False, None, None, None)
    assert GPTConfig.from_dict(config.to_dict()) == config
    assert architecture_of(config) in ("gpt2", "llama")


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(attn_window=0), "attn_window must be an int ≥ 1"),
        (dict(attn_window=-3), "attn_window must be an int ≥ 1"),
        (dict(attn_window=True), "attn_window must be an int ≥ 1"),
        (dict(attn_window=4, window_pattern="LX"), "window_pattern must be a string of 'L'"),
        (dict(attn_window=4, window_pattern=""), "window_pattern must be a string of 'L'"),
        (dict(window_pattern="LG"), "has local layers: set attn_window"),
        (dict(logit_softcap=0.0), "logit_softcap must be a positive number"),
        (dict(logit_softcap=-30.0), "logit_softcap must be a positive number"),
        (dict(logit_softcap=float("nan")), "logit_softcap must be a positive number"),
        (dict(qk_norm="yes"), "qk_norm must be true or false"),
        (dict(n_experts=2, experts_top_k=3), "experts_top_k=3 exceeds n_experts=2"),
    ],
)
def test_bad_switches_are_refused_clearly(overrides, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**{**SHAPE, **overrides})
    with pytest.raises(ValueError, match="window must be an int ≥ 1"):
        CausalSelfAttention(16, 2, window=0)


@pytest.mark.parametrize("overrides", [dict(qk_norm=True), dict(attn_window=4, window_pattern="LG"), dict()])
def test_parameter_formula_holds_with_the_switches(overrides):
    config = GPTConfig(**SHAPE, **overrides)
    assert count_parameters(config) == GPT(config).num_parameters()
