"""Notebook 15's graders: each passes correct versions, names every known mistake, and survives stubs and junk."""

from __future__ import annotations

import pytest
import torch

from minillm.grading import nb15_inference as nb15
from minillm.inference import quantize
from tests.grading_helpers import assert_fails, assert_passes, stub


# ------------------------------------------------------------------------------------------------ left padding
def pad_correct(prompts, pad_id=0):
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_id)
    positions = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        start = width - len(prompt)
        ids[row, start:] = torch.tensor(prompt)
        positions[row, start:] = torch.arange(len(prompt))
        mask[row, start:] = True
    return ids, positions, mask


def pad_right(prompts, pad_id=0):
    width = max(map(len, prompts))
    ids = torch.tensor([p + [pad_id] * (width - len(p)) for p in prompts])
    mask = torch.tensor([[True] * len(p) + [False] * (width - len(p)) for p in prompts])
    positions = torch.tensor([list(range(len(p))) + [0] * (width - len(p)) for p in prompts])
    return ids, positions, mask


def pad_column_positions(prompts, pad_id=0):
    ids, _, mask = pad_correct(prompts, pad_id)
    return ids, torch.arange(ids.shape[1]).repeat(len(prompts), 1) * mask, mask


def pad_positions_from_one(prompts, pad_id=0):
    ids, positions, mask = pad_correct(prompts, pad_id)
    return ids, (positions + 1) * mask, mask


def pad_mask_inverted(prompts, pad_id=0):
    ids, positions, mask = pad_correct(prompts, pad_id)
    return ids, positions, ~mask


def test_left_pad_correct_versions_pass(capsys):
    assert_passes(nb15.my_left_pad, pad_correct, capsys)
    assert_passes(nb15.my_left_pad, nb15.LEFT_PAD.fallback, capsys)
    assert_passes(nb15.my_left_pad, lambda prompts, pad_id=0: list(pad_correct(prompts, pad_id)), capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (pad_right, "right padding"),
        (pad_column_positions, "positions counted from the first column, not from each prompt's first token"),
        (pad_positions_from_one, "positions counted from 1"),
        (pad_mask_inverted, "the mask marking the pads instead of the real tokens"),
    ],
)
def test_left_pad_names_the_mistake(wrong, name, capsys):
    assert_fails(nb15.my_left_pad, wrong, capsys, says=f"Looks like {name}", fallback=nb15.LEFT_PAD.fallback)


def test_left_pad_stub_raising_and_wrong_type(capsys):
    assert_fails(nb15.my_left_pad, stub("my_left_pad"), capsys, says="my_left_pad is not written yet")
    assert_fails(nb15.my_left_pad, lambda prompts, pad_id=0: prompts[5], capsys, says="raised IndexError")
    assert_fails(nb15.my_left_pad, lambda prompts, pad_id=0: 3, capsys, says="expected a tuple")


# ---------------------------------------------------------------------------------------- block-table lookup
def slots_correct(table, positions, block_size):
    return torch.stack([table[int(p) // block_size] * block_size + int(p) % block_size for p in positions])


def slots_contiguous(table, positions, block_size):
    return positions


def slots_swapped(table, positions, block_size):
    return torch.tensor([int(table[int(p) % block_size]) * block_size + int(p) // block_size for p in positions])


def slots_no_offset(table, positions, block_size):
    return torch.tensor([int(table[int(p) // block_size]) * block_size for p in positions])


def slots_not_scaled(table, positions, block_size):
    return torch.tensor([int(table[int(p) // block_size]) + int(p) % block_size for p in positions])


def test_block_slots_correct_versions_pass(capsys):
    assert_passes(nb15.my_block_slots, slots_correct, capsys)
    assert_passes(nb15.my_block_slots, nb15.BLOCK_SLOTS.fallback, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (slots_contiguous, "the positions used as slots (a contiguous cache)"),
        (slots_swapped, "// and % swapped"),
        (slots_no_offset, "the offset inside the block left out"),
        (slots_not_scaled, "the block id not multiplied by the block size"),
    ],
)
def test_block_slots_names_the_mistake(wrong, name, capsys):
    assert_fails(nb15.my_block_slots, wrong, capsys, says=f"Looks like {name}", fallback=nb15.BLOCK_SLOTS.fallback)


def test_block_slots_stub_and_wrong_shape(capsys):
    assert_fails(nb15.my_block_slots, stub("my_block_slots"), capsys, says="my_block_slots is not written yet")
    assert_fails(nb15.my_block_slots, lambda t, p, bs: p[:1], capsys, says="returned shape")


# --------------------------------------------------------------------------------------- int8 quantisation
def int8_correct(weight):
    scale = weight.abs().max(dim=1).values / 127
    return torch.round(weight / scale.unsqueeze(1)).to(torch.int8), scale


def int8_reciprocal(weight):  # multiplying by 1/scale, as quantisation kernels do, rounds the same on the probes
    scale = weight.abs().amax(1) / 127.0
    return (weight * (1 / scale)[:, None]).round().clamp(-127, 127).to(torch.int8), scale


def int8_per_tensor(weight):
    scale = weight.abs().max() / 127
    return torch.round(weight / scale).to(torch.int8), torch.full((weight.shape[0],), float(scale))


def int8_per_column(weight):
    scale = weight.abs().max(dim=0).values / 127
    return torch.round(weight / scale).to(torch.int8), scale


def int8_truncated(weight):
    scale = weight.abs().max(dim=1).values / 127
    return torch.trunc(weight / scale[:, None]).to(torch.int8), scale


def int8_by_128(weight):
    scale = weight.abs().max(dim=1).values / 128
    return torch.clamp(torch.round(weight / scale[:, None]), -128, 127).to(torch.int8), scale


def int8_inverted(weight):
    scale = 127 / weight.abs().max(dim=1).values
    return torch.round(weight * scale[:, None]).to(torch.int8), scale


def test_int8_correct_versions_pass(capsys):
    assert_passes(nb15.my_quantize_int8, int8_correct, capsys)
    assert_passes(nb15.my_quantize_int8, int8_reciprocal, capsys)
    assert_passes(nb15.my_quantize_int8, quantize.quantize_int8, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (int8_per_tensor, "one scale for the whole tensor"),
        (int8_per_column, "one scale per input column"),
        (int8_truncated, "truncated instead of rounded"),
        (int8_by_128, "the scale absmax / 128"),
        (int8_inverted, "the scale inverted (127 / absmax)"),
    ],
)
def test_int8_names_the_mistake(wrong, name, capsys):
    assert_fails(nb15.my_quantize_int8, wrong, capsys, says=f"Looks like {name}", fallback=nb15.QUANT_INT8.fallback)


def test_int8_stub_wrong_dtype_and_nan(capsys):
    assert_fails(nb15.my_quantize_int8, stub("my_quantize_int8"), capsys, says="my_quantize_int8 is not written yet")
    wrong_dtype = lambda w: (int8_correct(w)[0].float(), int8_correct(w)[1])  # noqa: E731
    assert_fails(nb15.my_quantize_int8, wrong_dtype, capsys, says="returned dtype torch.float32")
    nan_scale = lambda w: (int8_correct(w)[0], int8_correct(w)[1] * float("nan"))  # noqa: E731
    assert_fails(nb15.my_quantize_int8, nan_scale, capsys, says="returned NaN")


# ---------------------------------------------------------------------------------------------- int4 packing
def pack_correct(q):
    rows = []
    for row in q.tolist():
        rows.append([((a + 8) & 15) + 16 * ((b + 8) & 15) for a, b in zip(row[0::2], row[1::2], strict=True)])
    return torch.tensor(rows, dtype=torch.uint8)


def pack_swapped(q):
    rows = [[16 * (a + 8) + (b + 8) for a, b in zip(r[0::2], r[1::2], strict=True)] for r in q.tolist()]
    return torch.tensor(rows, dtype=torch.uint8)


def pack_no_offset(q):
    rows = [[(a & 15) | ((b & 15) << 4) for a, b in zip(r[0::2], r[1::2], strict=True)] for r in q.tolist()]
    return torch.tensor(rows, dtype=torch.uint8)


def pack_halves(q):
    half = q.shape[1] // 2
    rows = [[(a + 8) | ((b + 8) << 4) for a, b in zip(r[:half], r[half:], strict=True)] for r in q.tolist()]
    return torch.tensor(rows, dtype=torch.uint8)


def pack_shift_8(q):
    rows = [[((a + 8) | ((b + 8) << 8)) & 0xFF for a, b in zip(r[0::2], r[1::2], strict=True)] for r in q.tolist()]
    return torch.tensor(rows, dtype=torch.uint8)


def test_pack_int4_correct_versions_pass(capsys):
    assert_passes(nb15.my_pack_int4, pack_correct, capsys)
    assert_passes(nb15.my_pack_int4, quantize.pack_int4, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (pack_swapped, "the nibbles swapped"),
        (pack_no_offset, "the values stored without the + 8 offset"),
        (pack_halves, "the first and second half of the row paired"),
        (pack_shift_8, "the high nibble shifted by 8 (lost from a uint8)"),
    ],
)
def test_pack_int4_names_the_mistake(wrong, name, capsys):
    assert_fails(nb15.my_pack_int4, wrong, capsys, says=f"Looks like {name}", fallback=nb15.PACK_INT4.fallback)


def test_pack_int4_stub_and_wrong_dtype(capsys):
    assert_fails(nb15.my_pack_int4, stub("my_pack_int4"), capsys, says="my_pack_int4 is not written yet")
    assert_fails(nb15.my_pack_int4, lambda q: pack_correct(q).long(), capsys, says="returned dtype torch.int64")


# -------------------------------------------------------------------------------- accept / resample (sampling)
def accept_correct(p, q, x):
    residual = torch.where(p > q, p - q, torch.zeros_like(p))
    return float(min(p[x] / q[x], 1.0)), residual / residual.sum()


def accept_uncapped(p, q, x):
    residual = torch.where(p > q, p - q, torch.zeros_like(p))
    return float(p[x] / q[x]), residual / residual.sum()


def accept_upside_down(p, q, x):
    residual = torch.where(p > q, p - q, torch.zeros_like(p))
    return float(min(q[x] / p[x], 1.0)), residual / residual.sum()


def residual_q_minus_p(p, q, x):
    residual = torch.where(q > p, q - p, torch.zeros_like(p))
    return float(min(p[x] / q[x], 1.0)), residual / residual.sum()


def residual_unnormalised(p, q, x):
    return float(min(p[x] / q[x], 1.0)), torch.where(p > q, p - q, torch.zeros_like(p))


def residual_p(p, q, x):
    return float(min(p[x] / q[x], 1.0)), p


def residual_abs(p, q, x):
    d = torch.abs(p - q)
    return float(min(p[x] / q[x], 1.0)), d / d.sum()


def test_accept_correct_versions_pass(capsys):
    assert_passes(nb15.my_accept_and_residual, accept_correct, capsys)
    assert_passes(nb15.my_accept_and_residual, nb15.ACCEPT.fallback, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (accept_uncapped, "the acceptance probability not capped at 1"),
        (accept_upside_down, "the ratio upside down (q/p)"),
        (residual_q_minus_p, "the residual max(0, q − p)"),
        (residual_unnormalised, "the residual not normalised"),
        (residual_p, "resampled from p instead of the residual"),
        (residual_abs, "the residual |p − q|"),
    ],
)
def test_accept_names_the_mistake(wrong, name, capsys):
    assert_fails(nb15.my_accept_and_residual, wrong, capsys, says=f"Looks like {name}", fallback=nb15.ACCEPT.fallback)


def test_accept_stub_and_nan(capsys):
    assert_fails(nb15.my_accept_and_residual, stub("my_accept_and_residual"), capsys, says="is not written yet")
    nan = lambda p, q, x: (float("nan"), p)  # noqa: E731
    assert_fails(nb15.my_accept_and_residual, nan, capsys, says="returned NaN")
