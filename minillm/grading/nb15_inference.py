"""Graders for notebook 15: left padding with per-row positions and a key mask, the paged cache's block-table
lookup, int8 absmax quantisation, int4 packing two values per byte, and speculative sampling's accept/resample rule.

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, the course's otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.

The references are written element by element in plain Python (lists, ints, float64), independent of the
vectorised versions in :mod:`minillm.inference`, which serve as the fallbacks.
"""

from __future__ import annotations

from typing import Any

import torch

from minillm.grading.core import Build, Mistake, Probe, grade
from minillm.inference import batched, quantize

BUILDS = ("my_left_pad", "my_block_slots", "my_quantize_int8", "my_pack_int4", "my_accept_and_residual")


# ------------------------------------------------------------------------------------------------ left padding
def _left_pad_truth(prompts, pad_id=0):
    """Row by row in Python: pads first, then the prompt; position c − pad (0 on pads); True on real tokens."""
    width = max(len(p) for p in prompts)
    ids, positions, mask = [], [], []
    for prompt in prompts:
        pad = width - len(prompt)
        ids.append([pad_id] * pad + list(prompt))
        positions.append([0] * pad + list(range(len(prompt))))
        mask.append([False] * pad + [True] * len(prompt))
    return torch.tensor(ids), torch.tensor(positions), torch.tensor(mask)


def _left_pad_minillm(prompts, pad_id=0):
    ids, pad = batched.left_pad([list(p) for p in prompts], pad_id)
    columns = torch.arange(ids.shape[1])
    return ids, (columns[None, :] - pad[:, None]).clamp(min=0), columns[None, :] >= pad[:, None]


def _left_pad_variant(*, side="left", offset=True, start=0, invert=False):
    def left_pad(prompts, pad_id=0):
        width = max(len(p) for p in prompts)
        lengths = torch.tensor([len(p) for p in prompts])
        pad = width - lengths
        columns = torch.arange(width)
        if side == "left":
            ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts])
            real = columns[None, :] >= pad[:, None]
            pos = (columns[None, :] - (pad[:, None] if offset else 0)).clamp(min=0) + start
        else:
            ids = torch.tensor([list(p) + [pad_id] * (width - len(p)) for p in prompts])
            real = columns[None, :] < lengths[:, None]
            pos = columns[None, :].expand(len(prompts), -1) + start
        pos = torch.where(real, pos, torch.zeros_like(pos)) if side == "left" else pos * real
        return ids, pos, ~real if invert else real

    return left_pad


def _left_pad_case(name: str, prompts: list[list[int]], pad_id: int) -> Probe:
    def run(my_left_pad: Any) -> Any:
        got = my_left_pad([list(p) for p in prompts], pad_id)
        return tuple(got) if isinstance(got, list | tuple) else got

    return Probe(name, run)


LEFT_PAD = Build(
    name="my_left_pad",
    what="the left-padded ids, per-row positions and key mask",
    truth=_left_pad_truth,
    truth_name="the rows written one by one in Python",
    fallback=_left_pad_minillm,
    fallback_name="minillm.inference.batched.left_pad (+ positions and mask)",
    probes=(
        _left_pad_case("three prompts of 3, 5 and 1 tokens", [[5, 6, 7], [1, 2, 3, 4, 5], [9]], 0),
        _left_pad_case("two prompts of equal length (no padding)", [[3, 1], [4, 1]], 0),
        _left_pad_case("four prompts, pad id 2047", [[10] * 6, [11, 12], [13, 14, 15, 16], [17]], 2047),
    ),
    mistakes=(
        Mistake(
            "right padding",
            "put the pads on the left, so every prompt's last token sits in the last column.",
            _left_pad_variant(side="right"),
        ),
        Mistake(
            "positions counted from the first column, not from each prompt's first token",
            "a prompt padded by `pad` starts at column `pad` but at position 0: position = column − pad.",
            _left_pad_variant(offset=False),
        ),
        Mistake(
            "positions counted from 1",
            "the first real token is at position 0, as when the prompt runs alone.",
            _left_pad_variant(start=1),
        ),
        Mistake(
            "the mask marking the pads instead of the real tokens",
            "the key mask is True where a query may look: on the real tokens, False on the pads.",
            _left_pad_variant(invert=True),
        ),
    ),
    what_is_compared="(ids, positions, mask)",
)


def my_left_pad(learner: Any) -> Any:
    """Grade ``my_left_pad(prompts, pad_id) -> (ids [B, P], positions [B, P], mask [B, P] bool)``."""
    return grade(LEFT_PAD, learner)


# ---------------------------------------------------------------------------------------- block-table lookup
def _slots_truth(table, positions, block_size):
    """Position by position: the block the table names for p // block_size, at offset p % block_size."""
    ids = [int(b) for b in table]
    return torch.tensor([ids[p // block_size] * block_size + p % block_size for p in positions.tolist()])


def _slots_minillm(table, positions, block_size):
    return table[positions // block_size] * block_size + positions % block_size


def _slots_contiguous(table, positions, block_size):
    return positions.clone()


def _slots_swapped(table, positions, block_size):
    return table[positions % block_size] * block_size + positions // block_size


def _slots_no_offset(table, positions, block_size):
    return table[positions // block_size] * block_size


def _slots_not_scaled(table, positions, block_size):
    return table[positions // block_size] + positions % block_size


def _slots_case(name: str, table: list[int], positions: list[int], block_size: int) -> Probe:
    def run(my_block_slots: Any) -> Any:
        return my_block_slots(torch.tensor(table), torch.tensor(positions), block_size)

    return Probe(name, run)


BLOCK_SLOTS = Build(
    name="my_block_slots",
    what="the pool slots of the positions",
    truth=_slots_truth,
    truth_name="table[p // block_size] · block_size + p % block_size, one position at a time",
    fallback=_slots_minillm,
    fallback_name="the block-table gather of minillm.inference.paged_kv",
    probes=(
        _slots_case("blocks [7, 2, 5, 1] of 4, positions 0…13", [7, 2, 5, 1], list(range(14)), 4),
        _slots_case("blocks [3, 0] of 16, positions 15, 16, 17, 31", [3, 0], [15, 16, 17, 31], 16),
        _slots_case("blocks [9, 4, 1, 6] of 2, positions out of order", [9, 4, 1, 6], [6, 0, 3, 7, 2], 2),
    ),
    mistakes=(
        Mistake(
            "the positions used as slots (a contiguous cache)",
            "look the block up in the table: the blocks of a sequence need not be adjacent or in order.",
            _slots_contiguous,
        ),
        Mistake(
            "// and % swapped",
            "the block is p // block_size (which entry of the table), the offset inside it p % block_size.",
            _slots_swapped,
        ),
        Mistake(
            "the offset inside the block left out", "add p % block_size to the block's first slot.", _slots_no_offset
        ),
        Mistake(
            "the block id not multiplied by the block size",
            "block b's first slot is b · block_size in the flat pool.",
            _slots_not_scaled,
        ),
    ),
    what_is_compared="slots",
)


def my_block_slots(learner: Any) -> Any:
    """Grade ``my_block_slots(table [n_blocks], positions [T], block_size) -> slots [T]`` (long)."""
    return grade(BLOCK_SLOTS, learner)


# --------------------------------------------------------------------------------------- int8 quantisation
def _int8_truth(weight):
    """Row by row in float64: scale = max|w| / 127, q = round(w / scale) (half to even, as torch.round)."""
    w = weight.detach().double()
    absmax = w.abs().amax(dim=1)
    scale = torch.where(absmax > 0, absmax / 127, torch.ones_like(absmax))
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale.float()


def _int8_minillm(weight):
    return quantize.quantize_int8(weight)


def _int8_per_tensor(weight):
    scale = weight.abs().max() / 127
    q = torch.round(weight / scale).clamp(-127, 127).to(torch.int8)
    return q, scale.expand(weight.shape[0]).float().clone()


def _int8_per_column(weight):
    scale = weight.abs().amax(dim=0) / 127
    return torch.round(weight / scale).clamp(-127, 127).to(torch.int8), scale.float()


def _int8_truncated(weight):
    scale = weight.abs().amax(dim=1) / 127
    return (weight / scale[:, None]).to(torch.int8), scale.float()


def _int8_by_128(weight):
    scale = weight.abs().amax(dim=1) / 128
    return torch.round(weight / scale[:, None]).clamp(-128, 127).to(torch.int8), scale.float()


def _int8_inverted(weight):
    inverse = 127 / weight.abs().amax(dim=1)
    return torch.round(weight * inverse[:, None]).clamp(-127, 127).to(torch.int8), inverse.float()


def _int8_case(name: str, seed: int, out_features: int, in_features: int, outliers: bool) -> Probe:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out_features, in_features, generator=g) * torch.rand(out_features, 1, generator=g)
    if outliers:
        w[0, 3], w[2, 0] = 8.0, -5.0

    def run(my_quantize_int8: Any) -> Any:
        got = my_quantize_int8(w.clone())
        return tuple(got) if isinstance(got, list | tuple) else got

    return Probe(name, run)


QUANT_INT8 = Build(
    name="my_quantize_int8",
    what="the int8 weights and their per-row scales",
    truth=_int8_truth,
    truth_name="round(w / (max|w_row| / 127)) in float64",
    fallback=_int8_minillm,
    fallback_name="minillm.inference.quantize.quantize_int8",
    probes=(
        _int8_case("a 6 × 10 float32 weight, rows of different sizes", 0, 6, 10, False),
        _int8_case("a 5 × 8 weight with two outliers", 1, 5, 8, True),
        _int8_case("a 16 × 24 weight", 2, 16, 24, False),
    ),
    mistakes=(
        Mistake(
            "one scale for the whole tensor",
            "take the absmax of each output row (amax over dim 1): one outlier then spoils only its row.",
            _int8_per_tensor,
        ),
        Mistake(
            "one scale per input column",
            "per output channel means per row of W [out, in]: amax over dim 1, not dim 0.",
            _int8_per_column,
        ),
        Mistake(
            "truncated instead of rounded",
            ".to(torch.int8) drops the fraction; torch.round(w / scale) first.",
            _int8_truncated,
        ),
        Mistake(
            "the scale absmax / 128",
            "divide by 127 so that ±absmax maps to ±127 and the grid is symmetric; 128 clips the largest weight.",
            _int8_by_128,
        ),
        Mistake(
            "the scale inverted (127 / absmax)",
            "store scale = absmax / 127, the size of one integer step, so that w ≈ q · scale.",
            _int8_inverted,
        ),
    ),
    rtol=1e-6,
    atol=0.0,
    what_is_compared="(q, scale)",
)


def my_quantize_int8(learner: Any) -> Any:
    """Grade ``my_quantize_int8(weight [out, in]) -> (q int8 [out, in], scale float32 [out])``."""
    return grade(QUANT_INT8, learner)


# ---------------------------------------------------------------------------------------------- int4 packing
def _pack_truth(q):
    """Byte by byte in Python: (q[2j] + 8) in the low nibble, (q[2j + 1] + 8) in the high one."""
    rows = [[(int(r[2 * j]) + 8) | ((int(r[2 * j + 1]) + 8) << 4) for j in range(len(r) // 2)] for r in q.tolist()]
    return torch.tensor(rows, dtype=torch.uint8)


def _pack_minillm(q):
    return quantize.pack_int4(q)


def _nibbles(q):
    return (q.to(torch.int16) + 8).to(torch.uint8)


def _pack_swapped(q):
    n = _nibbles(q)
    return (n[:, 0::2] << 4) | n[:, 1::2]


def _pack_no_offset(q):
    n = (q.to(torch.int16) & 0x0F).to(torch.uint8)  # two's-complement nibbles
    return n[:, 0::2] | (n[:, 1::2] << 4)


def _pack_halves(q):
    n = _nibbles(q)
    half = n.shape[1] // 2
    return n[:, :half] | (n[:, half:] << 4)


def _pack_shift_8(q):
    n = _nibbles(q)
    return n[:, 0::2] | (n[:, 1::2] << 8)


def _pack_case(name: str, q: torch.Tensor) -> Probe:
    def run(my_pack_int4: Any) -> Any:
        return my_pack_int4(q.clone())

    return Probe(name, run)


def _random_int4(seed: int, rows: int, cols: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-8, 8, (rows, cols), generator=g, dtype=torch.int8)


PACK_INT4 = Build(
    name="my_pack_int4",
    what="the packed bytes",
    truth=_pack_truth,
    truth_name="(q[2j] + 8) | (q[2j+1] + 8) << 4, byte by byte in Python",
    fallback=_pack_minillm,
    fallback_name="minillm.inference.quantize.pack_int4",
    probes=(
        _pack_case("one row [−8, 7, 0, −1, 3, −3]", torch.tensor([[-8, 7, 0, -1, 3, -3]], dtype=torch.int8)),
        _pack_case("a 4 × 8 block of random int4 values", _random_int4(0, 4, 8)),
        _pack_case("a 3 × 32 block of random int4 values", _random_int4(1, 3, 32)),
    ),
    mistakes=(
        Mistake(
            "the nibbles swapped", "the even column goes in the low nibble, the odd one in the high.", _pack_swapped
        ),
        Mistake(
            "the values stored without the + 8 offset",
            "add 8 so each value is 0…15 before packing; unpacking subtracts it again.",
            _pack_no_offset,
        ),
        Mistake(
            "the first and second half of the row paired",
            "pack neighbours: columns 2j and 2j + 1 share byte j.",
            _pack_halves,
        ),
        Mistake(
            "the high nibble shifted by 8 (lost from a uint8)",
            "a nibble is 4 bits: shift the odd value left by 4.",
            _pack_shift_8,
        ),
    ),
    what_is_compared="packed bytes",
)


def my_pack_int4(learner: Any) -> Any:
    """Grade ``my_pack_int4(q int8 [out, in]) -> uint8 [out, in / 2]``."""
    return grade(PACK_INT4, learner)


# -------------------------------------------------------------------------------- accept / resample (sampling)
def _accept_truth(p, q, x):
    """In float64, entry by entry: min(1, p(x)/q(x)) and max(0, p − q) normalised."""
    p, q = p.double().tolist(), q.double().tolist()
    accept = min(1.0, p[x] / q[x])
    residual = [max(0.0, a - b) for a, b in zip(p, q, strict=True)]
    total = sum(residual)
    return accept, torch.tensor([r / total for r in residual], dtype=torch.float64)


def _accept_minillm(p, q, x):
    residual = (p - q).clamp(min=0)
    return min(1.0, float(p[x] / q[x])), residual / residual.sum()


def _accept_uncapped(p, q, x):
    residual = (p - q).clamp(min=0)
    return float(p[x] / q[x]), residual / residual.sum()


def _accept_upside_down(p, q, x):
    residual = (p - q).clamp(min=0)
    return min(1.0, float(q[x] / p[x])), residual / residual.sum()


def _residual_swapped(p, q, x):
    residual = (q - p).clamp(min=0)
    return min(1.0, float(p[x] / q[x])), residual / residual.sum()


def _residual_unnormalised(p, q, x):
    return min(1.0, float(p[x] / q[x])), (p - q).clamp(min=0)


def _residual_is_p(p, q, x):
    return min(1.0, float(p[x] / q[x])), p.clone()


def _residual_abs(p, q, x):
    residual = (p - q).abs()
    return min(1.0, float(p[x] / q[x])), residual / residual.sum()


def _accept_case(name: str, p: list[float], q: list[float], x: int) -> Probe:
    pt, qt = torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)

    def run(my_accept_and_residual: Any) -> Any:
        got = my_accept_and_residual(pt.clone(), qt.clone(), x)
        return tuple(got) if isinstance(got, list | tuple) else got

    return Probe(name, run)


def _random_pair(seed: int, vocab: int) -> tuple[list[float], list[float]]:
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(vocab, generator=g, dtype=torch.float64) * 2, 0)
    q = torch.softmax(torch.randn(vocab, generator=g, dtype=torch.float64) * 2, 0)
    return p.tolist(), q.tolist()


_P5, _Q5 = _random_pair(3, 5)
_X5 = max(range(5), key=lambda i: _Q5[i] / _P5[i])  # the token the draft over-proposes most: p(x) < q(x)

ACCEPT = Build(
    name="my_accept_and_residual",
    what="the acceptance probability and the residual distribution",
    truth=_accept_truth,
    truth_name="min(1, p(x)/q(x)) and max(0, p − q)/Σ, entry by entry in float64",
    fallback=_accept_minillm,
    fallback_name="minillm.inference.speculative's rule",
    probes=(
        _accept_case(
            "p = [0.5, 0.3, 0.2], q = [0.2, 0.6, 0.2], x = 1 (over-proposed)", [0.5, 0.3, 0.2], [0.2, 0.6, 0.2], 1
        ),
        _accept_case(
            "p = [0.5, 0.3, 0.2], q = [0.2, 0.6, 0.2], x = 0 (under-proposed)", [0.5, 0.3, 0.2], [0.2, 0.6, 0.2], 0
        ),
        _accept_case("five random tokens, the most over-proposed one drafted", _P5, _Q5, _X5),
    ),
    mistakes=(
        Mistake(
            "the acceptance probability not capped at 1",
            "accept with min(1, p(x)/q(x)): a probability cannot exceed 1.",
            _accept_uncapped,
        ),
        Mistake(
            "the ratio upside down (q/p)",
            "accept with p(x)/q(x): a token the draft proposes more often than the target would must be thinned out.",
            _accept_upside_down,
        ),
        Mistake(
            "the residual max(0, q − p)",
            "resample where the target wants more than the draft gave: max(0, p − q).",
            _residual_swapped,
        ),
        Mistake(
            "the residual not normalised",
            "divide max(0, p − q) by its sum so it is a distribution.",
            _residual_unnormalised,
        ),
        Mistake(
            "resampled from p instead of the residual",
            "after a rejection draw from norm(max(0, p − q)): drawing from p counts the accepted mass twice.",
            _residual_is_p,
        ),
        Mistake(
            "the residual |p − q|", "keep only where p exceeds q: max(0, p − q), not the absolute value.", _residual_abs
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="(acceptance probability, residual)",
)


def my_accept_and_residual(learner: Any) -> Any:
    """Grade ``my_accept_and_residual(p [V], q [V], x) -> (accept probability, residual distribution [V])``."""
    return grade(ACCEPT, learner)
