"""Tests for minillm.model: the GPT, its config, parameter counts, KV cache and sampling."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re

import pytest
import torch
import torch.nn.functional as F

from minillm.model import GPT, GPTConfig, count_parameters, sample_next_token

TINY = dict(vocab_size=37, context_length=24, n_layer=2, n_head=2, d_model=16)


def tiny(preset: str = "gpt2-style", **overrides) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig.preset(preset, **{**TINY, **overrides}))


# ---------------------------------------------------------------- parameter counts


SWITCHES = list(
    itertools.product(["layernorm", "rmsnorm"], ["gelu", "swiglu"], ["learned", "sinusoidal", "rope", "none"],
                      [True, False], [True, False])
)  # fmt: skip


@pytest.mark.parametrize("norm,mlp,pos,bias,tie", SWITCHES)
def test_formula_equals_actual_count_for_every_switch(norm, mlp, pos, bias, tie):
    config = GPTConfig(**TINY, norm=norm, mlp=mlp, pos=pos, bias=bias, tie_embeddings=tie)
    assert count_parameters(config) == GPT(config).num_parameters()


@pytest.mark.parametrize("preset", ["gpt2-style", "llama-style", "gpt2-small"])
def test_formula_equals_actual_count_for_presets(preset):
    config = GPTConfig.preset(preset)
    with torch.device("meta"):  # GPT-2 small's real shapes, without allocating its memory
        model = GPT(config)
    assert count_parameters(config) == model.num_parameters()


def test_gpt2_small_has_the_published_count():
    # 124,439,808: GPT-2 small (V=50257, T=1024, d=768, 12 layers, tied head), a known constant.
    config = GPTConfig.preset("gpt2-small")
    assert count_parameters(config) == 124_439_808
    with torch.device("meta"):
        assert GPT(config).num_parameters() == 124_439_808
    # Independent closed form (HF ultra-scale playbook, no position table) + the position table.
    h, v, L, T = 768, 50257, 12, 1024
    assert h * v + L * (12 * h * h + 13 * h) + 2 * h + T * h == 124_439_808


def test_swiglu_default_width_follows_the_8_thirds_rule():
    assert GPTConfig(d_model=128, mlp="swiglu").d_ff == 384  # 341 → next multiple of 64
    assert GPTConfig(d_model=4096, n_head=32, mlp="swiglu").d_ff == 10944
    assert GPTConfig(d_model=128, mlp="gelu").d_ff == 512
    assert GPTConfig(d_model=128, mlp="swiglu", d_ff=100).d_ff == 100


# ---------------------------------------------------------------- correctness against a plain reference


def reference_gpt2_logits(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """GPT-2 forward written independently with torch.nn.functional, in float64, from the state dict."""
    c = model.config
    sd = {k: v.double() for k, v in model.state_dict().items()}
    B, T = idx.shape
    x = sd["tok_emb.weight"][idx] + sd["pos_emb.weight"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(c.n_layer):
        p = f"blocks.{i}."
        h = F.layer_norm(x, (c.d_model,), sd[p + "norm1.weight"], sd[p + "norm1.bias"], c.norm_eps)
        qkv = h @ sd[p + "attn.qkv.weight"].T + sd[p + "attn.qkv.bias"]
        q, k, v = (t.reshape(B, T, c.n_head, -1).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, c.d_model)
        x = x + y @ sd[p + "attn.proj.weight"].T + sd[p + "attn.proj.bias"]
        h = F.layer_norm(x, (c.d_model,), sd[p + "norm2.weight"], sd[p + "norm2.bias"], c.norm_eps)
        h = F.gelu(h @ sd[p + "mlp.fc.weight"].T + sd[p + "mlp.fc.bias"])
        x = x + h @ sd[p + "mlp.proj.weight"].T + sd[p + "mlp.proj.bias"]
    x = F.layer_norm(x, (c.d_model,), sd["norm_f.weight"], sd["norm_f.bias"], c.norm_eps)
    return x @ sd["tok_emb.weight"].T  # tied head


@pytest.mark.parametrize("attn_impl", ["sdpa", "manual"])
def test_gpt2_style_matches_an_independent_float64_forward(attn_impl):
    model = tiny(attn_impl=attn_impl)
    with torch.no_grad():  # non-trivial norm parameters, so a swapped weight/bias would show
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    idx = torch.randint(0, 37, (3, 24), generator=torch.Generator().manual_seed(1))
    got = model(idx).double()
    want = reference_gpt2_logits(model, idx)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def reference_llama_logits(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """Llama-style forward in float64 with complex-number RoPE (half-split pairing), RMSNorm, SwiGLU."""
    c = model.config
    sd = {k: v.double() for k, v in model.state_dict().items()}
    B, T = idx.shape
    hd = c.head_dim

    def rms(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + c.norm_eps) * w

    def rope(t):  # pair (i, i + hd/2) as the complex number a + ib, multiply by e^{i·pos·θ_i}
        theta = c.rope_base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        rot = torch.polar(torch.ones(T, hd // 2, dtype=torch.float64), torch.arange(T)[:, None] * theta)
        z = torch.complex(t[..., : hd // 2], t[..., hd // 2 :]) * rot
        return torch.cat([z.real, z.imag], dim=-1)

    x = sd["tok_emb.weight"][idx]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(c.n_layer):
        p = f"blocks.{i}."
        h = rms(x, sd[p + "norm1.weight"])
        q, k, v = (
            t.reshape(B, T, c.n_head, hd).transpose(1, 2) for t in (h @ sd[p + "attn.qkv.weight"].T).chunk(3, -1)
        )
        q, k = rope(q), rope(k)
        att = torch.softmax(((q @ k.transpose(-1, -2)) / math.sqrt(hd)).masked_fill(~causal, float("-inf")), -1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, c.d_model) @ sd[p + "attn.proj.weight"].T
        h = rms(x, sd[p + "norm2.weight"])
        g = F.silu(h @ sd[p + "mlp.gate.weight"].T) * (h @ sd[p + "mlp.up.weight"].T)
        x = x + g @ sd[p + "mlp.down.weight"].T
    return rms(x, sd["norm_f.weight"]) @ sd["lm_head.weight"].T


@pytest.mark.parametrize("attn_impl", ["sdpa", "manual"])
def test_llama_style_matches_an_independent_float64_forward(attn_impl):
    model = tiny("llama-style", attn_impl=attn_impl)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    idx = torch.randint(0, 37, (2, 24), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(model(idx).double(), reference_llama_logits(model, idx), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("preset", ["gpt2-style", "llama-style"])
@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope", "none"])
def test_manual_and_sdpa_paths_agree(preset, pos):
    a = tiny(preset, pos=pos, attn_impl="sdpa")
    b = tiny(preset, pos=pos, attn_impl="manual")
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 37, (2, 20))
    torch.testing.assert_close(a(idx), b(idx), atol=1e-6, rtol=0)


def test_hidden_states_feed_the_head():
    model = tiny()
    idx = torch.randint(0, 37, (2, 9))
    h = model.hidden_states(idx)
    assert h.shape == (2, 9, 16)
    torch.testing.assert_close(model.lm_head(h), model(idx), atol=0, rtol=0)


def test_attention_weights_are_the_first_layers_softmax_scores():
    model = tiny("llama-style")
    idx = torch.randint(0, 37, (2, 10))
    maps = model.attention_weights(idx)
    assert len(maps) == 2 and maps[1].shape == (2, 2, 10, 10)
    torch.testing.assert_close(maps[1].sum(-1), torch.ones(2, 2, 10), atol=1e-6, rtol=0)
    block = model.blocks[0]
    q, k, _ = block.attn.split_heads(block.norm1(model.tok_emb(idx)))
    q, k = block.attn.rope(q), block.attn.rope(k)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(8)
    want = torch.softmax(scores.masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), float("-inf")), -1)
    torch.testing.assert_close(maps[0], want, atol=1e-6, rtol=0)


def test_causality_future_tokens_do_not_change_past_logits():
    model = tiny("llama-style")
    idx = torch.randint(0, 37, (1, 12))
    changed = idx.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % 37
    torch.testing.assert_close(model(idx)[:, :8], model(changed)[:, :8], atol=1e-6, rtol=0)
    assert not torch.allclose(model(idx)[:, 8:], model(changed)[:, 8:])


# ---------------------------------------------------------------- KV cache


@pytest.mark.parametrize("preset", ["gpt2-style", "llama-style"])
@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope", "none"])
@pytest.mark.parametrize("attn_impl", ["sdpa", "manual"])
def test_kv_cache_decoding_equals_full_recompute(preset, pos, attn_impl):
    model = tiny(preset, pos=pos, attn_impl=attn_impl).eval()
    idx = torch.randint(0, 37, (3, 24), generator=torch.Generator().manual_seed(3))
    full = model(idx)
    cache = model.new_kv_cache(3)
    chunks = [model(idx[:, a:b], kv_cache=cache) for a, b in [(0, 7), (7, 8), (8, 9), (9, 15), (15, 24)]]
    assert cache.length == 24
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=1e-5, rtol=0)


def test_kv_cache_refuses_to_run_past_the_context():
    model = tiny()
    cache = model.new_kv_cache(1)
    model(torch.zeros(1, 20, dtype=torch.long), kv_cache=cache)
    with pytest.raises(ValueError, match="after 20 cached positions exceeds the context length 24"):
        model(torch.zeros(1, 5, dtype=torch.long), kv_cache=cache)
    with pytest.raises(ValueError, match="KV cache was made for batch size 1, got 2"):
        model(torch.zeros(2, 1, dtype=torch.long), kv_cache=cache)  # the layers' append checks nothing itself
    assert cache.length == 20  # neither refused call wrote anything


# ---------------------------------------------------------------- generation and sampling


def test_generate_is_reproducible_with_a_seeded_generator():
    model = tiny()
    prompt = torch.tensor([[1, 2, 3]])
    out = [model.generate(prompt, 10, top_k=10, generator=torch.Generator().manual_seed(s)) for s in (7, 7, 8)]
    assert out[0].shape == (1, 13)
    assert torch.equal(out[0][:, :3], prompt)
    assert torch.equal(out[0], out[1])
    assert not torch.equal(out[0], out[2])


def test_greedy_generate_equals_argmax_of_full_recompute():
    model = tiny("llama-style")
    seq = torch.tensor([[5, 6], [7, 8]])
    out = model.generate(seq, 12, temperature=0)
    for _ in range(12):  # the slow way, without a cache
        seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)


def test_generate_refuses_too_long_prompts_unless_cropping():
    model = tiny()
    long_prompt = torch.zeros(1, 30, dtype=torch.long)
    with pytest.raises(ValueError, match="prompt of 30 tokens is longer than the context length 24"):
        model.generate(long_prompt, 1)
    with pytest.raises(ValueError, match="exceeds the context length 24.*crop=True"):
        model.generate(torch.zeros(1, 20, dtype=torch.long), 5)
    # With crop=True the window slides; greedy output must equal a by-hand sliding-window recompute.
    out = model.generate(long_prompt, 6, temperature=0, crop=True)
    seq = long_prompt
    for _ in range(6):
        seq = torch.cat([seq, model(seq[:, -24:])[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)
    out = model.generate(torch.zeros(1, 20, dtype=torch.long), 10, temperature=0, crop=True)
    assert out.shape == (1, 30)


def test_generate_stops_at_eos_and_restores_training_mode():
    model = tiny(dropout=0.1)
    model.train()
    greedy = model.generate(torch.tensor([[1, 2]]), 8, temperature=0)
    assert model.training
    eos = int(greedy[0, 4])  # the third generated token, used as eos
    out = model.generate(torch.tensor([[1, 2]]), 8, temperature=0, eos_id=eos)
    first = int((out[0, 2:] == eos).nonzero()[0]) + 2
    assert torch.equal(out[0, : first + 1], greedy[0, : first + 1])
    assert out.shape[1] == first + 1  # the only sequence finished, so generation ended there


def test_top_k_and_top_p_keep_the_right_support_and_proportions():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().expand(20000, 4)
    g = torch.Generator().manual_seed(0)
    cases = [  # (top_k, top_p, expected renormalised distribution)
        (1, None, [1, 0, 0, 0]),
        (2, None, [0.625, 0.375, 0, 0]),
        (None, 0.5, [1, 0, 0, 0]),  # the first token alone reaches 0.5
        (None, 0.7, [0.625, 0.375, 0, 0]),
        (None, 0.81, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0]),
        (3, 0.7, [0.625, 0.375, 0, 0]),
        (None, None, [0.5, 0.3, 0.15, 0.05]),
    ]
    for top_k, top_p, expected in cases:
        ids = sample_next_token(logits, 1.0, top_k, top_p, generator=g)
        freq = torch.bincount(ids, minlength=4).double() / ids.numel()
        expected = torch.tensor(expected, dtype=torch.float64)
        assert torch.all(freq[expected == 0] == 0), (top_k, top_p, freq)
        # 20,000 draws: binomial standard error ≤ 0.0036, so 0.015 is > 4 sigma.
        torch.testing.assert_close(freq, expected, atol=0.015, rtol=0)


def test_temperature_sharpens_and_flattens():
    logits = torch.tensor([[2.0, 1.0, 0.0]]).expand(20000, 3)
    g = torch.Generator().manual_seed(1)
    for temperature in (0.5, 2.0):
        ids = sample_next_token(logits, temperature, generator=g)
        freq = torch.bincount(ids, minlength=3).double() / ids.numel()
        expected = torch.softmax(torch.tensor([2.0, 1.0, 0.0], dtype=torch.float64) / temperature, -1)
        torch.testing.assert_close(freq, expected, atol=0.015, rtol=0)


# ---------------------------------------------------------------- config, init, errors


def test_config_round_trips_through_json():
    config = GPTConfig.preset("llama-style", d_model=64, n_head=8, dropout=0.1)
    again = GPTConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    with pytest.raises(ValueError, match="unknown GPTConfig fields"):
        GPTConfig.from_dict({**config.to_dict(), "n_embd": 3})


def test_presets_set_the_documented_switches():
    g, l = GPTConfig.preset("gpt2-style"), GPTConfig.preset("llama-style", n_layer=2)
    assert (g.norm, g.mlp, g.pos, g.bias, g.tie_embeddings) == ("layernorm", "gelu", "learned", True, True)
    assert (l.norm, l.mlp, l.pos, l.bias, l.tie_embeddings) == ("rmsnorm", "swiglu", "rope", False, False)
    assert l.n_layer == 2
    with pytest.raises(ValueError, match="unknown preset 'gpt3'"):
        GPTConfig.preset("gpt3")


def test_submodule_names_and_tying():
    model = tiny()
    names = dict(model.named_parameters())
    for name in ["tok_emb.weight", "pos_emb.weight", "blocks.0.attn.qkv.weight", "blocks.1.attn.proj.bias",
                 "blocks.0.mlp.fc.weight", "blocks.0.mlp.proj.weight", "blocks.0.norm1.weight",
                 "blocks.0.norm2.bias", "norm_f.weight"]:  # fmt: skip
        assert name in names, name
    assert model.lm_head.weight is model.tok_emb.weight
    llama = tiny("llama-style")
    assert {"blocks.0.mlp.gate.weight", "blocks.0.mlp.up.weight", "blocks.0.mlp.down.weight", "lm_head.weight"} <= set(
        dict(llama.named_parameters())
    )
    assert llama.lm_head.weight is not llama.tok_emb.weight
    assert llama.pos_emb is None


def test_gpt2_initialisation_statistics():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=8, d_model=256, n_head=4, vocab_size=512))
    residual = torch.cat(
        [b.attn.proj.weight.flatten() for b in model.blocks] + [b.mlp.proj.weight.flatten() for b in model.blocks]
    )
    other = torch.cat([b.attn.qkv.weight.flatten() for b in model.blocks] + [model.tok_emb.weight.flatten()])
    assert abs(residual.std().item() - 0.02 / math.sqrt(16)) < 2e-4
    assert abs(other.std().item() - 0.02) < 2e-4
    assert torch.all(model.blocks[0].attn.qkv.bias == 0) and torch.all(model.blocks[0].norm1.weight == 1)


def test_every_parameter_gets_a_gradient():
    for preset in ("gpt2-style", "llama-style"):
        model = tiny(preset)
        idx = torch.randint(0, 37, (2, 10))
        F.cross_entropy(model(idx).flatten(0, 1), idx.flatten()).backward()
        for name, p in model.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(d_model=30, n_head=4), "n_head=4 does not divide d_model=30"),
        (dict(norm="batchnorm"), "norm must be one of"),
        (dict(pos="alibi"), "pos must be one of"),
        (dict(attn_impl="flash"), "attn_impl must be one of"),
        (dict(vocab_size=0), "vocab_size must be a positive int, got 0"),
        (dict(dropout=1.0), "dropout must be in"),
        (dict(d_model=18, n_head=2, pos="rope"), "RoPE needs an even head_dim"),
    ],
)
def test_bad_config_is_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**kwargs)


def test_bad_inputs_are_clear_errors():
    model = tiny()
    with pytest.raises(ValueError, match="sequence of length 25 exceeds the context length 24"):
        model(torch.zeros(1, 25, dtype=torch.long))
    # ids are checked where they enter (generate's prompt; token files when minillm.batches.save_tokens writes them),
    # not in every forward pass (reading min/max of the ids is a host sync on a GPU); the lookup still refuses
    with pytest.raises(ValueError, match="token id 37 is outside the vocabulary"):
        model.generate(torch.tensor([[1, 37]]), 2)
    with pytest.raises(ValueError, match="token id -1 is outside the vocabulary"):
        model.generate(torch.tensor([[-1, 3]]), 2)
    with pytest.raises(IndexError):
        model(torch.tensor([[1, 37]]))
    with pytest.raises(TypeError, match="torch.float32"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"shape \[B, T\]"):
        model(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="top_p must be in"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 2, top_p=1.5)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 2, temperature=-1)


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
@pytest.mark.parametrize("preset", ["gpt2-style", "llama-style"])
def test_grouped_query_attention_is_multi_head_attention_with_shared_key_value_heads(preset, n_kv_head):
    """A GQA model equals the multi-head model whose key and value heads are copied to every query head of their
    group (an independent construction of the same function); its parameter count and KV cache follow the closed
    forms, and cached decoding equals recomputation."""
    torch.manual_seed(0)
    config = GPTConfig.preset(
        preset, vocab_size=97, context_length=24, n_layer=2, n_head=4, d_model=32, n_kv_head=n_kv_head
    )
    gqa = GPT(config).eval()
    assert gqa.num_parameters() == count_parameters(config)
    mha = GPT(dataclasses.replace(config, n_kv_head=4)).eval()
    state, d, hd, group = gqa.state_dict(), 32, 8, 4 // n_kv_head
    for name, tensor in state.items():
        if name.endswith("attn.qkv.weight") or name.endswith("attn.qkv.bias"):
            q, k, v = tensor.split([d, n_kv_head * hd, n_kv_head * hd])
            k, v = (t.unflatten(0, (n_kv_head, hd)).repeat_interleave(group, 0).flatten(0, 1) for t in (k, v))
            state[name] = torch.cat([q, k, v])
    mha.load_state_dict(state)
    ids = torch.randint(0, 97, (3, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(gqa(ids), mha(ids), atol=1e-5, rtol=0)
        cache = gqa.new_kv_cache(3)
        stepwise = torch.cat([gqa(ids[:, t : t + 1], kv_cache=cache) for t in range(24)], dim=1)
    torch.testing.assert_close(stepwise, gqa(ids), atol=1e-5, rtol=0)
    held = sum(t.nbytes for layer in cache.layers for t in (layer.keys, layer.values))
    assert held == config.kv_cache_bytes(3, 24, bytes_per_value=4) == 2 * 2 * 3 * 24 * n_kv_head * 8 * 4
    with pytest.raises(ValueError, match="n_kv_head=3 must divide n_head=4"):
        dataclasses.replace(config, n_kv_head=3)


def test_generate_checks_its_sampling_settings_once_per_call(monkeypatch):
    import minillm.model as model_module

    calls = []
    real = model_module._check_sampling
    monkeypatch.setattr(model_module, "_check_sampling", lambda *a: calls.append(a) or real(*a))
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, context_length=32, n_layer=1, n_head=2, d_model=16))
    out = model.generate(torch.zeros(1, 1, dtype=torch.long), 12, temperature=0.8, top_k=5, top_p=0.9)
    assert out.shape == (1, 13) and calls == [(0.8, 5, 0.9)]
    with pytest.raises(ValueError, match="top_p"):
        model.generate(torch.zeros(1, 1, dtype=torch.long), 3, top_p=1.5)


def test_stream_yields_the_tokens_generate_returns_one_at_a_time() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, context_length=24, n_layer=2, n_head=2, d_model=16))
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    for temperature, eos in [(0.0, None), (1.0, None), (1.0, 9), (0.8, 2)]:
        full = model.generate(
            prompt, 19, temperature=temperature, generator=torch.Generator().manual_seed(1), eos_id=eos
        )
        new = full[0, 5:].tolist()
        if eos is not None and eos in new:
            new = new[: new.index(eos)]  # stream stops before the eos, generate pads with it
        streamed = list(
            model.stream(prompt, 19, temperature=temperature, generator=torch.Generator().manual_seed(1), eos_id=eos)
        )
        assert streamed == new
    with pytest.raises(ValueError, match="one prompt of shape"):
        next(model.stream(torch.zeros(2, 3, dtype=torch.long), 4))
    with pytest.raises(ValueError, match="exceeds the context length 24"):
        next(model.stream(prompt, 20))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(d_ff=True), "d_ff must be a positive int or None, got True"),
        (dict(norm_eps=-1.0), "norm_eps must be a small positive number .* got -1.0"),
        (dict(norm_eps=float("nan")), "norm_eps must be"),
        (dict(rope_base=0.0, pos="rope"), "rope_base must be a positive number"),
        (dict(bias=1), "bias must be true or false, got 1"),
        (dict(n_head=3), r"n_head=3 does not divide d_model=128; .* choose n_head from \[1, 2, 4, 8, 16, 32\]"),
    ],
)
def test_gpt_config_refuses_values_that_used_to_pass(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**kwargs)


@pytest.mark.parametrize("temperature", [float("nan"), float("inf"), True])
def test_sampling_temperature_is_checked_before_torch(temperature):
    model = tiny()
    with pytest.raises(
        ValueError, match=re.escape(f"temperature must be a finite number ≥ 0 (0 = greedy), got {temperature!r}")
    ):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 3, temperature=temperature)
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        sample_next_token(torch.zeros(1, 5), temperature=temperature)
