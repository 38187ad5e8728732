"""Tests for minillm.embeddings: token lookup, learned/sinusoidal positions and RoPE."""

from __future__ import annotations

import math

import pytest
import torch

from minillm.checkpoint import load_pretrained, save_pretrained
from minillm.embeddings import (
    ROPE_STYLES,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEmbedding,
    apply_rope,
    rope_angles,
    rope_permutation,
    sinusoidal_positions,
)
from minillm.model import GPT, GPTConfig


def test_sinusoidal_matches_the_paper_formula_in_float64():
    length, dim = 50, 16
    pe = sinusoidal_positions(length, dim)
    assert pe.shape == (length, dim) and pe.dtype == torch.float32
    want = torch.tensor(
        [
            [
                math.sin(p / 10000 ** (c / dim)) if c % 2 == 0 else math.cos(p / 10000 ** ((c - 1) / dim))
                for c in range(dim)
            ]
            for p in range(length)
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(pe.double(), want, atol=1e-6, rtol=0)
    assert torch.equal(pe[0, 0::2], torch.zeros(8)) and torch.equal(pe[0, 1::2], torch.ones(8))


def test_sinusoidal_offsets_are_a_linear_rotation():
    # The paper's motivation: PE[p + k] is a fixed linear map (a rotation per pair) of PE[p]:
    # [sin a, cos a] @ [[cos b, -sin b], [sin b, cos b]] = [sin(a + b), cos(a + b)].
    pe = sinusoidal_positions(40, 8).double()
    k = 5
    freqs = 10000 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    for i, w in enumerate(freqs.tolist()):
        rot = torch.tensor(
            [[math.cos(k * w), -math.sin(k * w)], [math.sin(k * w), math.cos(k * w)]], dtype=torch.float64
        )
        pair = pe[:, 2 * i : 2 * i + 2]
        torch.testing.assert_close(pair[:-k] @ rot, pair[k:], atol=1e-6, rtol=0)


def test_position_modules_slice_by_start():
    learned = LearnedPositionalEmbedding(16, 8)
    assert torch.equal(learned(4, start=3), learned.weight[3:7])
    fixed = SinusoidalPositionalEmbedding(16, 8)
    assert list(fixed.parameters()) == [] and fixed.state_dict() == {}
    torch.testing.assert_close(fixed(5, start=2), sinusoidal_positions(16, 8)[2:7], atol=0, rtol=0)
    for pos in ("learned", "sinusoidal", "rope"):  # the model checks its positions once per call, not the tables
        model = GPT(GPTConfig(vocab_size=11, context_length=16, n_layer=1, n_head=2, d_model=8, pos=pos))
        cache = model.new_kv_cache(1)
        model(torch.zeros(1, 14, dtype=torch.long), kv_cache=cache)
        with pytest.raises(ValueError, match="length 4 after 14 cached positions exceeds the context length 16"):
            model(torch.zeros(1, 4, dtype=torch.long), kv_cache=cache)


def test_bad_shapes_are_clear_errors():
    with pytest.raises(ValueError, match="positive even dim, got 7"):
        sinusoidal_positions(4, 7)
    with pytest.raises(ValueError, match="positive even head_dim, got 5"):
        rope_angles(4, 5)


def rope_complex_float64(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE as complex multiplication: pair (i, i+h/2) is a + ib, multiplied by e^{i·p·base^(-2i/h)}."""
    h = x.shape[-1]
    theta = base ** (-torch.arange(0, h, 2, dtype=torch.float64) / h)
    rot = torch.polar(torch.ones(len(positions), h // 2, dtype=torch.float64), positions.double()[:, None] * theta)
    z = torch.complex(x[..., : h // 2].double(), x[..., h // 2 :].double()) * rot
    return torch.cat([z.real, z.imag], dim=-1)


def test_rope_matches_complex_rotation_and_keeps_norms():
    x = torch.randn(2, 3, 10, 8, generator=torch.Generator().manual_seed(0))
    rope = RotaryEmbedding(8, 32)
    got = rope(x, start=5)
    torch.testing.assert_close(got.double(), rope_complex_float64(x, torch.arange(5, 15)), atol=1e-5, rtol=0)
    torch.testing.assert_close(got.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(rope(x, 0)[..., :1, :], x[..., :1, :], atol=0, rtol=0)  # position 0: no turn
    cos, sin = rope_angles(10, 8, start=5)
    torch.testing.assert_close(apply_rope(x, cos, sin), got, atol=1e-6, rtol=0)


def test_rope_scores_depend_only_on_relative_position():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(16, generator=g), torch.randn(16, generator=g)
    rope = RotaryEmbedding(16, 64)

    def score(m: int, n: int) -> float:
        qm = rope(q.view(1, 16), start=m)
        kn = rope(k.view(1, 16), start=n)
        return float((qm * kn).sum())

    for m, n in [(3, 1), (10, 10), (7, 20)]:
        for shift in (1, 5, 30):
            assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-5)
    assert score(3, 1) != pytest.approx(score(4, 1), abs=1e-3)  # but it does depend on the offset


def test_rope_rejects_mismatched_angles():
    cos, sin = rope_angles(4, 8)
    with pytest.raises(ValueError, match="do not match"):
        apply_rope(torch.zeros(5, 8), cos, sin)


# ----------------------------------------------------------------------------------- RoPE pairing styles


def rope_pairs(head_dim: int, style: str) -> list[tuple[int, int]]:
    """The coordinates each style rotates together, pair j first (it turns at frequency base^(-2j/h))."""
    if style == "half":
        return [(j, j + head_dim // 2) for j in range(head_dim // 2)]
    return [(2 * j, 2 * j + 1) for j in range(head_dim // 2)]


def rope_complex_reference(x: torch.Tensor, positions: torch.Tensor, style: str, base: float = 10000.0):
    """RoPE from the complex formula in float64: pair j (a, b) is a + ib, times e^{i·p·base^(-2j/h)}."""
    h = x.shape[-1]
    out = x.double().clone()
    for j, (a, b) in enumerate(rope_pairs(h, style)):
        z = torch.complex(x[..., a].double(), x[..., b].double())
        turn = torch.polar(torch.ones(len(positions), dtype=torch.float64), positions.double() * base ** (-2 * j / h))
        z = z * turn
        out[..., a], out[..., b] = z.real, z.imag
    return out


@pytest.mark.parametrize("style", ROPE_STYLES)
def test_each_rope_style_matches_its_complex_pairing_in_float64(style):
    x = torch.randn(2, 3, 12, 16, generator=torch.Generator().manual_seed(3))
    rope = RotaryEmbedding(16, 40, style=style)
    got = rope(x, start=7)
    torch.testing.assert_close(got.double(), rope_complex_reference(x, torch.arange(7, 19), style), atol=1e-5, rtol=0)
    torch.testing.assert_close(got.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=0)
    cos, sin = rope_angles(12, 16, start=7, style=style)
    torch.testing.assert_close(apply_rope(x, cos, sin, style), got, atol=0, rtol=0)
    other = "interleaved" if style == "half" else "half"  # the two pairings really are different maps
    assert (got.double() - rope_complex_reference(x, torch.arange(7, 19), other)).abs().max() > 0.1


def test_rope_styles_are_one_rotation_up_to_a_permutation_of_the_head_dims():
    h = 16
    perm = rope_permutation(h)
    assert perm.tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15]
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(2, 20, h, generator=g), torch.randn(2, 20, h, generator=g)
    half, inter = RotaryEmbedding(h, 32, style="half"), RotaryEmbedding(h, 32, style="interleaved")
    torch.testing.assert_close(half(q[..., perm], start=4), inter(q, start=4)[..., perm], atol=1e-6, rtol=0)
    # so permuting q and k alike turns one style's attention scores into the other's
    scores_inter = inter(q) @ inter(k).transpose(-1, -2)
    scores_half = half(q[..., perm]) @ half(k[..., perm]).transpose(-1, -2)
    torch.testing.assert_close(scores_half, scores_inter, atol=1e-5, rtol=0)


@pytest.mark.parametrize("style", ROPE_STYLES)
def test_both_styles_give_scores_that_depend_only_on_the_offset(style):
    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(1, 16, generator=g), torch.randn(1, 16, generator=g)
    rope = RotaryEmbedding(16, 80, style=style)

    def score(m: int, n: int) -> float:
        return float((rope(q, start=m) * rope(k, start=n)).sum())

    for m, n in [(3, 1), (10, 10), (7, 20)]:
        for shift in (1, 9, 40):
            assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-5)
    assert score(3, 1) != pytest.approx(score(4, 1), abs=1e-3)


def test_bad_rope_style_is_a_clear_error():
    with pytest.raises(ValueError, match="RoPE style must be one of"):
        rope_angles(4, 8, style="adjacent")
    with pytest.raises(ValueError, match="rope_style must be one of"):
        GPTConfig.preset("llama-style", rope_style="neox")
    assert GPTConfig().rope_style == "half" and GPTConfig.preset("llama-style").rope_style == "half"


def _tiny_llama(style: str, **overrides) -> GPTConfig:
    shape = dict(vocab_size=40, context_length=24, n_layer=2, n_head=2, d_model=32)
    return GPTConfig.preset("llama-style", **{**shape, "rope_style": style, **overrides})


@pytest.mark.parametrize("style", ROPE_STYLES)
def test_a_model_with_each_style_trains_generates_and_round_trips(tmp_path, style):
    torch.manual_seed(0)
    model = GPT(_tiny_llama(style))
    assert all(block.attn.rope.style == style for block in model.blocks)
    seq = torch.arange(24) % 5 + 3  # a cyclic pattern: learnable only by knowing positions/neighbours
    batch = seq.view(1, -1).repeat(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = None
    for _ in range(60):
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 40), batch[:, 1:].reshape(-1))
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 3.0 and loss.item() < 0.25, (first, loss.item())  # ln 40 = 3.69 at the start; ≈0.08 here
    model.eval()
    prompt = seq[:4].view(1, -1)
    out = model.generate(prompt, max_new_tokens=12, temperature=0.0)
    assert out[0].tolist() == seq[:16].tolist()  # it continues the pattern
    # incremental decoding with the KV cache rotates by the right positions in both styles
    ids = torch.randint(0, 40, (2, 20), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_kv_cache(2)
        stepped = torch.cat([model(ids[:, :9], kv_cache=cache), model(ids[:, 9:], kv_cache=cache)], dim=1)
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=0)
    # the style is saved with the model and restored with it
    save_pretrained(tmp_path, model)
    loaded, _, config = load_pretrained(tmp_path)
    assert config["model"]["rope_style"] == style and loaded.config.rope_style == style
    assert torch.equal(loaded(ids), model(ids))


def test_interleaved_model_exports_to_hf_llama_as_half_split_with_equal_logits(tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers is part of the test extra")
    from minillm.interop import export_pretrained, import_pretrained

    torch.manual_seed(0)
    model = GPT(_tiny_llama("interleaved", n_kv_head=1)).eval()
    with torch.no_grad():  # sharper attention than at initialisation, so that positions matter to the logits
        for block in model.blocks:
            block.attn.qkv.weight.mul_(10.0)
    ids = torch.randint(0, 40, (2, 24), generator=torch.Generator().manual_seed(7))
    export_pretrained(model, tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        ours, theirs = model(ids), hf(ids).logits
        as_half = GPT(_tiny_llama("half", n_kv_head=1)).eval()
        as_half.load_state_dict(model.state_dict())
        unconverted = as_half(ids)  # the same weights read with the other pairing: a different model
    assert (theirs - ours).abs().max().item() <= 1e-4
    assert (unconverted - ours).abs().max().item() > 1e-2
    back = import_pretrained(hf)
    assert back.config.rope_style == "half"  # Hugging Face Llama is half-split; the converted rows stay converted
    with torch.no_grad():
        assert (back(ids) - ours).abs().max().item() <= 1e-4
