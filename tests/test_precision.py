"""Precision: formats vs closed forms, rounding facts, underflow vs thresholds, the loss scaler vs
torch.amp.GradScaler, master weights vs stagnation, bf16 autocast vs fp32."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from minillm.model import GPT, GPTConfig
from minillm.precision import (
    DynamicLossScaler,
    MasterWeightOptimizer,
    available_dtypes,
    cast,
    cast_statistics,
    closed_form,
    float_format,
    format_table,
    gradients_of,
    repeated_add,
    rounding_examples,
    train_mixed_precision,
    train_regression,
    train_with_autocast,
    ulp,
    underflow_curve,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_format_table_matches_closed_forms_and_published_values():
    table = {f.name: f for f in format_table()}
    assert list(table)[:3] == ["float32", "float16", "bfloat16"]
    for f in table.values():
        expected = closed_form(f.exponent_bits, f.mantissa_bits, finite_only=f.name == "float8_e4m3fn")
        for key, value in expected.items():
            assert getattr(f, key) == value, (f.name, key)
    # Bit layouts and the IEEE / bfloat16 constants as published (REFERENCE §G1).
    assert (table["float16"].exponent_bits, table["float16"].mantissa_bits) == (5, 10)
    assert (table["bfloat16"].exponent_bits, table["bfloat16"].mantissa_bits) == (8, 7)
    assert table["float16"].max == 65504.0 and table["float16"].smallest_subnormal == 2.0**-24
    assert table["bfloat16"].smallest_subnormal == 2.0**-133 and table["float32"].smallest_subnormal == 2.0**-149
    if "float8_e4m3fn" in table:
        assert table["float8_e4m3fn"].max == 448.0 and table["float8_e5m2"].max == 57344.0


def test_rounding_facts():
    rows = {expr: (f16, bf16) for expr, _, f16, bf16 in rounding_examples()}
    assert rows["2048 + 1"][0] == 2048.0  # the gap between fp16 numbers at 2048 is 2
    assert rows["256 + 1"] == (257.0, 256.0)
    assert rows["1 + 1e-4"] == (1.0, 1.0)
    assert rows["1e-8"][0] == 0.0 and rows["1e-8"][1] == pytest.approx(1e-8, rel=2**-7)
    assert math.isinf(rows["7e4"][0]) and rows["7e4"][1] == 70144.0
    assert cast(3e-8, torch.float16) == 2.0**-24
    assert ulp(1.0, torch.float16) == 2.0**-10 and ulp(2048.0, torch.float16) == 2.0
    assert ulp(1.0, torch.bfloat16) == 2.0**-7 and ulp(1e-7, torch.float16) == 2.0**-24


def test_underflow_fraction_on_powers_of_two_matches_the_threshold():
    values = torch.tensor([2.0**-k for k in range(41)], dtype=torch.float64)
    # Round-to-nearest-even flushes |x| ≤ 2^−25 (half the smallest fp16 subnormal) to zero.
    assert cast_statistics(values, torch.float16, 1.0)["zero"] == pytest.approx(16 / 41)
    assert cast_statistics(values, torch.float16, 2.0**10)["zero"] == pytest.approx(6 / 41)
    # 2^20 … 2^16 overflow: 65536 lies past the largest fp16 number, 65504
    assert cast_statistics(values, torch.float16, 2.0**20)["overflow"] == pytest.approx(5 / 41)
    assert cast_statistics(values, torch.bfloat16, 1.0)["zero"] == 0.0


def test_real_gpt_gradient_underflow_vs_loss_scale():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, d_model=32, vocab_size=64, context_length=16))
    ids = torch.randint(0, 64, (4, 17))
    logits = model(ids[:, :-1])
    grads = gradients_of(model, F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()))
    scales = [1.0, 2.0**8, 2.0**16]
    curve = underflow_curve(grads, scales, torch.float16)
    g = grads.double()
    g = g[g != 0]
    for point in curve:  # the cast agrees with the threshold |g·S| ≤ 2^−25, counted independently
        assert point["zero"] == pytest.approx(((g * point["scale"]).abs() <= 2.0**-25).double().mean().item())
    zeros = [p["zero"] for p in curve]
    assert zeros == sorted(zeros, reverse=True)
    assert cast_statistics(grads, torch.bfloat16)["zero"] == 0.0


def test_dynamic_loss_scaler_follows_grad_scaler():
    overflow = [False, False, True, False, False, False, True, True, False, False, False, False]
    runs = {}
    for kind in ("ours", "torch"):
        torch.manual_seed(0)
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        if kind == "ours":
            scaler = DynamicLossScaler(init_scale=4.0, growth_interval=2)
        else:
            scaler = torch.amp.GradScaler("cpu", init_scale=4.0, growth_interval=2)
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
        scales, weights = [], []
        for inject in overflow:
            opt.zero_grad()
            scaler.scale(model(x).pow(2).mean()).backward()
            if inject:
                model.weight.grad[0, 0] = float("inf")
            before = model.weight.detach().clone()
            scaler.step(opt)
            if inject:
                assert torch.equal(model.weight, before)  # an overflowing step is skipped
            scaler.update()
            scales.append(scaler.scale_value if kind == "ours" else scaler.get_scale())
            weights.append(model.weight.detach().clone())
        runs[kind] = scales, weights
    assert runs["ours"][0] == runs["torch"][0]
    assert runs["ours"][0][:4] == [4.0, 8.0, 4.0, 4.0]  # PyTorch's own semantics (REFERENCE §G3)
    for a, b in zip(runs["ours"][1], runs["torch"][1], strict=True):
        assert torch.equal(a, b)


def test_master_weights_keep_small_updates():
    assert repeated_add(1.0, 1e-4, 1000, torch.float16) == 1.0
    assert repeated_add(1.0, 1e-3, 1000, torch.bfloat16) == 1.0
    assert repeated_add(1.0, 1e-4, 1000, torch.float32) == pytest.approx(1.1, abs=1e-3)
    pure, master, reference = (train_regression(m, steps=300) for m in ("fp16", "fp16_master", "fp32"))
    assert pure[-1] > 20 * master[-1]  # pure fp16 stagnates: its late updates are below half an ulp
    assert master[-1] == pytest.approx(reference[-1], rel=0.05)


def test_master_weight_optimizer_rounds_masters_into_the_model():
    model = nn.Linear(3, 1, bias=False).half()
    opt = MasterWeightOptimizer(model, torch.optim.SGD, lr=1e-4)
    model.weight.grad = torch.ones_like(model.weight)
    opt.step()
    assert opt.masters[0].dtype == torch.float32 and model.weight.dtype == torch.float16
    assert torch.equal(model.weight, opt.masters[0].detach().half())


def _tiny_lm_batches(n: int = 20, vocab: int = 32):
    g = torch.Generator().manual_seed(0)
    # A learnable stream: each token is the previous plus 1 or 3, modulo the vocabulary.
    starts = torch.randint(0, vocab, (n, 8, 1), generator=g)
    steps = torch.where(torch.rand(n, 8, 17, generator=g) < 0.8, 1, 3)
    tokens = (starts + steps.cumsum(-1)) % vocab
    return [(t[:, :-1], t[:, 1:]) for t in tokens]


def test_mixed_precision_run_matches_grad_scaler_on_fp32_masters():
    """minillm's fp16 recipe vs the same recipe written with torch.amp.GradScaler: bit-identical steps."""
    config = GPTConfig(n_layer=1, n_head=2, d_model=16, vocab_size=32, context_length=16)
    batches = _tiny_lm_batches(12)

    def make_model():
        torch.manual_seed(0)
        return GPT(config)

    def loss_fn(model, x, y):
        return F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())

    # 2^20 overflows at first: the run skips steps and backs off, then grows again after 3 clean steps
    run = train_mixed_precision(make_model, batches, loss_fn, lr=3e-3, init_scale=2.0**20, growth_interval=3)

    model = make_model().half()
    masters = [p.detach().float().clone().requires_grad_() for p in model.parameters()]
    optimizer = torch.optim.AdamW(masters, lr=3e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20, growth_interval=3)
    losses, scales, skipped = [], [], []
    for x, y in batches:
        for p in model.parameters():
            p.grad = None
        loss = loss_fn(model, x, y)
        scaler.scale(loss).backward()
        for p, m in zip(model.parameters(), masters, strict=True):
            m.grad = p.grad.float()
        scales.append(scaler.get_scale())
        before = [m.detach().clone() for m in masters]
        scaler.step(optimizer)
        skipped.append(all(torch.equal(m, b) for m, b in zip(masters, before, strict=True)))
        scaler.update()
        with torch.no_grad():
            for p, m in zip(model.parameters(), masters, strict=True):
                p.copy_(m)
        losses.append(loss.item())
    assert run.scales == scales and run.skipped == skipped and run.losses == losses
    assert skipped[0] and not all(skipped)  # it overflowed, backed off and trained
    assert any(b == 2 * a for a, b in zip(scales[:-1], scales[1:], strict=True))  # and grew S again
    for a, b in zip(run.masters, masters, strict=True):
        assert a.dtype == torch.float32 and torch.equal(a, b)


def test_bf16_autocast_tracks_fp32():
    config = GPTConfig(n_layer=2, n_head=2, d_model=32, vocab_size=32, context_length=16)
    g = torch.Generator().manual_seed(0)
    # A learnable stream: each token is the previous plus 1 or 3, modulo the vocabulary.
    starts = torch.randint(0, 32, (20, 8, 1), generator=g)
    steps = torch.where(torch.rand(20, 8, 17, generator=g) < 0.8, 1, 3)
    tokens = (starts + steps.cumsum(-1)) % 32
    batches = [(t[:, :-1], t[:, 1:]) for t in tokens]

    def make_model():
        torch.manual_seed(0)
        return GPT(config)

    def loss_fn(model, x, y):
        return F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())

    fp32 = train_with_autocast(make_model, batches, loss_fn)
    bf16 = train_with_autocast(make_model, batches, loss_fn, autocast_dtype=torch.bfloat16)
    assert fp32[-1] < fp32[0] - 0.5  # it learns
    gaps = [abs(a - b) for a, b in zip(fp32, bf16, strict=True)]
    assert max(gaps) <= 0.1 and sum(gaps) / len(gaps) <= 0.01  # stated tolerance: 0.1 nats per step, 0.01 mean


def test_bad_inputs():
    with pytest.raises(TypeError):
        float_format(torch.int32)
    with pytest.raises(ValueError, match="scale"):
        cast_statistics(torch.ones(3), torch.float16, 0.0)
    with pytest.raises(ValueError, match="mode"):
        train_regression("fp8")
    assert "float16" in available_dtypes()
