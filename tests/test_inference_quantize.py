"""Weight-only int8 and int4 by hand, checked against float64 on the same integers and against PyTorch's own
int8 quantisation."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from minillm.inference.quantize import (
    QuantizedLinear,
    dequantize_int4,
    dequantize_int8,
    int4_matmul,
    int8_matmul,
    pack_int4,
    quantize_int4,
    quantize_int8,
    quantize_model,
    unpack_int4,
    weight_bytes,
)
from minillm.model import GPT, GPTConfig, count_parameters

MATMUL_TOL = 1e-5  # float32 products of exact small integers and scales, relative to max |y|


def weights(out: int = 48, inp: int = 64, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, inp, generator=g) * 0.02
    w[3] *= 10  # rows of different ranges: per-channel scales matter
    w[5] = 0  # an all-zero row must not divide by zero
    return w


def test_pack_unpack_round_trips_exactly() -> None:
    every = torch.arange(-8, 8, dtype=torch.int8)
    grid = torch.cartesian_prod(every, every).to(torch.int8)  # every (even, odd) pair: all 256 bytes
    assert torch.equal(unpack_int4(pack_int4(grid)), grid)
    assert sorted(pack_int4(grid).flatten().tolist()) == list(range(256))
    q = torch.randint(-8, 8, (7, 32), generator=torch.Generator().manual_seed(0), dtype=torch.int8)
    packed = pack_int4(q)
    assert packed.dtype == torch.uint8 and packed.shape == (7, 16)
    assert torch.equal(unpack_int4(packed), q)
    # Layout: the even column in the low nibble, the odd one in the high nibble, each stored as q + 8.
    assert pack_int4(torch.tensor([[-8, 7, 0, 1]], dtype=torch.int8)).tolist() == [[0xF0, 0x98]]


def test_int8_rounds_each_weight_to_its_rows_grid() -> None:
    w = weights()
    q, scale = quantize_int8(w)
    assert q.dtype == torch.int8 and scale.shape == (48,)
    absmax = w.abs().amax(dim=1)
    assert torch.allclose(scale[absmax > 0], absmax[absmax > 0] / 127) and scale[5] == 1 and not q[5].any()
    assert int(q.abs().max()) == 127
    assert ((w - dequantize_int8(q, scale)).abs() <= scale[:, None] / 2 * (1 + 1e-6)).all()  # half a step


def test_int4_rounds_each_weight_to_its_groups_grid() -> None:
    w = weights()
    q, scale = quantize_int4(w, group_size=16)
    assert scale.shape == (48, 4) and int(q.min()) >= -8 and int(q.max()) <= 7
    group_absmax = w.view(48, 4, 16).abs().amax(-1)
    assert torch.allclose(scale[group_absmax > 0], group_absmax[group_absmax > 0] / 7)
    step = scale.repeat_interleave(16, dim=1)
    assert ((w - dequantize_int4(q, scale)).abs() <= step / 2 * (1 + 1e-6)).all()


def test_dequantised_matmuls_equal_float64_on_the_same_integers() -> None:
    w, bias = weights(), torch.randn(48) * 0.1
    x = torch.randn(5, 3, 64, generator=torch.Generator().manual_seed(1))
    q8, s8 = quantize_int8(w)
    ref8 = x.double() @ (q8.double() * s8.double()[:, None]).t() + bias.double()
    assert (int8_matmul(x, q8, s8, bias) - ref8).abs().max() <= MATMUL_TOL * ref8.abs().max()
    q4, s4 = quantize_int4(w, group_size=32)
    w4 = (q4.double().view(48, 2, 32) * s4.double()[..., None]).view(48, 64)
    ref4 = x.double() @ w4.t() + bias.double()
    assert (int4_matmul(x, pack_int4(q4), s4, bias) - ref4).abs().max() <= MATMUL_TOL * ref4.abs().max()


def test_int8_against_pytorch_dynamic_quantisation() -> None:
    """PyTorch's per-channel dynamic int8 (torch.ao.quantization.quantize_dynamic) as the independent reference.

    Its symmetric observer picks scale = absmax / 127.5 (the range [−128, 127]); quantising on *its* grid our
    integers equal its integers, except at exact ties x.5 where a rounding convention may differ by one. On
    our own grid (absmax / 127) each dequantised weight is within one of our steps of its (each is within
    half a step of w). Its outputs also quantise the activations to 8 bits per tensor (7 with x86's
    reduce_range): 4% of max |y| covers that (measured ≈ 2%).
    """
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    torch.manual_seed(0)
    layer = nn.Linear(128, 96)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(96, 128) * 0.02)
        layer.bias.normal_(0, 0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        reference = quantize_dynamic(nn.Sequential(layer), {nn.Linear: per_channel_dynamic_qconfig}, torch.qint8)
        theirs = reference[0].weight()
        their_ints, their_scales = theirs.int_repr(), theirs.q_per_channel_scales()
        x = torch.randn(8, 128)
        their_y = reference(x)
    ours_on_their_grid, _ = quantize_int8(layer.weight, their_scales)
    differ = ours_on_their_grid != their_ints
    ratio = layer.weight.detach().double() / their_scales[:, None]
    assert ((ours_on_their_grid.int() - their_ints.int()).abs() <= 1).all()
    distance_to_a_tie = (ratio - ratio.floor() - 0.5).abs()
    assert (distance_to_a_tie[differ] <= 1e-4).all()  # they differ only where w / scale is (nearly) x.5
    q, scale = quantize_int8(layer.weight)
    assert ((dequantize_int8(q, scale) - theirs.dequantize()).abs() < scale[:, None]).all()
    ours_y = int8_matmul(x, q, scale, layer.bias.detach())
    assert (ours_y - their_y).abs().max() <= 0.04 * their_y.abs().max()


@pytest.mark.skipif(not hasattr(torch, "_weight_int8pack_mm"), reason="this torch has no int8 weight-only kernel")
def test_int8_matmul_equals_pytorchs_weight_only_int8_kernel() -> None:
    w, x = weights(), torch.randn(6, 64)
    q, scale = quantize_int8(w)
    theirs = torch._weight_int8pack_mm(x, q, scale)
    assert (int8_matmul(x, q, scale) - theirs).abs().max() <= MATMUL_TOL * theirs.abs().max()


def tiny(preset: str) -> GPT:
    torch.manual_seed(0)
    config = GPTConfig.preset(preset, vocab_size=64, context_length=32, n_layer=3, n_head=4, d_model=64, n_kv_head=2)
    return GPT(config).eval()


def linear_bytes_int8(config: GPTConfig) -> tuple[int, int]:
    """(float32 bytes, int8 bytes) of the block Linear layers, from the shapes: int8 weights plus a float32
    scale per output row; biases stay float32."""
    d, f, kv = config.d_model, config.d_ff, config.n_kv_head * config.head_dim
    shapes = [(d + 2 * kv, d), (d, d)] + ([(f, d), (d, f)] if config.mlp == "gelu" else [(f, d), (f, d), (d, f)])
    weights_ = sum(o * i for o, i in shapes)
    biases = sum(o for o, _ in shapes) if config.bias else 0
    rows = sum(o for o, _ in shapes)
    per_layer_float = 4 * (weights_ + biases)
    per_layer_int8 = weights_ + 4 * rows + 4 * biases
    return config.n_layer * per_layer_float, config.n_layer * per_layer_int8


@pytest.mark.parametrize("preset", ["gpt2-style", "llama-style"])
def test_a_quantised_gpt_runs_and_stores_fewer_bytes(preset) -> None:
    model = tiny(preset)
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        exact = model(ids)
    assert weight_bytes(model) == 4 * count_parameters(model.config)
    float_linear, int8_linear = linear_bytes_int8(model.config)
    quantize_model(model, bits=8)
    assert all(not isinstance(m, nn.Linear) for m in model.blocks.modules())
    assert weight_bytes(model) == 4 * count_parameters(model.config) - float_linear + int8_linear
    with torch.no_grad():
        assert (model(ids) - exact).abs().max() <= 0.02 * exact.abs().max()
    out = model.generate(ids[:1, :4], 8, temperature=0)
    assert out.shape == (1, 12)


def test_int4_model_is_smaller_still_and_close() -> None:
    model = tiny("llama-style")
    int8_model = quantize_model(tiny("llama-style"), bits=8)
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        exact = model(ids)
        quantize_model(model, bits=4, group_size=32)
        assert (model(ids) - exact).abs().max() <= 0.15 * exact.abs().max()
    assert weight_bytes(model) < weight_bytes(int8_model)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="bits must be 8 or 4"):
        QuantizedLinear.from_linear(nn.Linear(4, 4), bits=3)
    with pytest.raises(ValueError, match="multiple of group_size"):
        quantize_int4(torch.randn(4, 48), group_size=32)
    with pytest.raises(ValueError, match="2-D float"):
        quantize_int8(torch.randn(4))
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        pack_int4(torch.full((1, 2), 8, dtype=torch.int8))
    with pytest.raises(TypeError, match="blocks"):
        quantize_model(nn.Linear(4, 4))
