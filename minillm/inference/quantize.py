"""Weight-only quantisation by hand: int8 per output channel, int4 in groups packed two to a byte.

Decoding reads every weight once per step, so its speed follows the bytes of the weights: int8 stores a weight
in 1 byte instead of float32's 4, int4 in half a byte. Only the weights are stored in few bits; activations
stay in floating point and each matmul runs on the dequantised weights (``q · scale``).

* **int8, per output channel (absmax)**: row i of W [out, in] gets scale_i = max|W_i| / 127 and
  q = round(W / scale) ∈ [−127, 127]. One scale per row factors out of that row's dot product:
  y_i = scale_i · Σ_j x_j q_ij.
* **int4, per group**: each run of ``group_size`` weights in a row gets scale = max|w| / 7 and
  q ∈ [−8, 7]; two 4-bit values share a byte (q + 8 in each nibble: the even column low, the odd one high).
  Small groups follow the weights' local range, at the price of one float scale per group.

:func:`quantize_model` swaps a GPT's block ``nn.Linear`` layers for :class:`QuantizedLinear` in place, so the
model (and ``GPT.generate``) runs unchanged on the smaller weights.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "quantize_int8",
    "dequantize_int8",
    "int8_matmul",
    "quantize_int4",
    "dequantize_int4",
    "pack_int4",
    "unpack_int4",
    "int4_matmul",
    "QuantizedLinear",
    "quantize_model",
    "weight_bytes",
]


def _check_weight(weight: torch.Tensor) -> None:
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError(f"weight must be a 2-D float tensor [out, in], got {getattr(weight, 'shape', weight)!r}")


def _round_to(weight: torch.Tensor, scale: torch.Tensor, low: int, high: int) -> torch.Tensor:
    # Multiply by the reciprocal, as quantisation kernels do; round half to even; clamp to the integer range.
    return torch.round(weight * (1.0 / scale)).clamp(low, high).to(torch.int8)


def quantize_int8(weight: torch.Tensor, scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 [out, in], scale float32 [out]): symmetric per-output-channel int8 of ``weight`` [out, in].

    ``scale`` defaults to each row's absmax / 127 (an all-zero row gets scale 1, so q = 0); pass one to quantise
    on another grid (e.g. a reference's).
    """
    _check_weight(weight)
    w = weight.detach().float()
    if scale is None:
        absmax = w.abs().amax(dim=1)
        scale = torch.where(absmax > 0, absmax / 127.0, torch.ones_like(absmax))
    scale = scale.float()
    return _round_to(w, scale[:, None], -128, 127), scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The float32 weights q · scale the int8 ones stand for."""
    return q.float() * scale[:, None]


def int8_matmul(
    x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x [..., in] @ (q · scale)ᵀ + bias: dot products with the integer weights first, each output channel's
    scale applied once after (it factors out of the row's sum)."""
    y = (x @ q.to(x.dtype).t()) * scale.to(x.dtype)
    return y + bias if bias is not None else y


def quantize_int4(weight: torch.Tensor, group_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 [out, in] with values in [−8, 7], scale float32 [out, in / group_size]): grouped absmax int4."""
    _check_weight(weight)
    out_features, in_features = weight.shape
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2 or group_size % 2:
        raise ValueError(f"group_size must be an even int ≥ 2, got {group_size!r}")
    if in_features % group_size:
        raise ValueError(f"in_features={in_features} is not a multiple of group_size={group_size}")
    groups = weight.detach().float().view(out_features, in_features // group_size, group_size)
    absmax = groups.abs().amax(dim=-1)
    scale = torch.where(absmax > 0, absmax / 7.0, torch.ones_like(absmax))
    return _round_to(groups, scale[..., None], -8, 7).view(out_features, in_features), scale


def dequantize_int4(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The float32 weights of grouped int4 values q [out, in] with scales [out, groups]."""
    group_size = q.shape[1] // scale.shape[1]
    return (q.float().view(*scale.shape, group_size) * scale[..., None]).view(q.shape)


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """int4 values [out, in] (int8 in [−8, 7], ``in`` even) → uint8 [out, in / 2], two values per byte."""
    if q.dim() != 2 or q.shape[1] % 2 or q.dtype != torch.int8:
        raise ValueError(f"pack_int4 needs int8 values of shape [out, even in], got {q.dtype} {tuple(q.shape)}")
    if int(q.min()) < -8 or int(q.max()) > 7:
        raise ValueError("int4 values must lie in [-8, 7]")
    nibbles = (q.to(torch.int16) + 8).to(torch.uint8)  # 0..15
    return nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [out, in / 2] → int8 values [out, in] in [−8, 7]: the inverse of :func:`pack_int4`."""
    if packed.dim() != 2 or packed.dtype != torch.uint8:
        raise ValueError(f"unpack_int4 needs a 2-D uint8 tensor, got {packed.dtype} {tuple(packed.shape)}")
    low = (packed & 0x0F).to(torch.int8) - 8
    high = (packed >> 4).to(torch.int8) - 8
    return torch.stack([low, high], dim=-1).view(packed.shape[0], -1)


def int4_matmul(
    x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x [..., in] @ Wᵀ + bias with W the dequantised packed int4 weights (unpacked on the fly)."""
    y = x @ dequantize_int4(unpack_int4(packed), scale).to(x.dtype).t()
    return y + bias if bias is not None else y


class QuantizedLinear(nn.Module):
    """A drop-in for ``nn.Linear`` whose weight is stored as int8 (``bits=8``) or packed int4 (``bits=4``).

    Buffers: ``qweight`` (int8 [out, in] or uint8 [out, in/2]), ``scale`` (float32 [out] or [out, groups]) and
    ``bias`` (float, if the layer had one). Inference only: nothing here is a trainable parameter.
    """

    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None, bits: int) -> None:
        super().__init__()
        self.bits = bits
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale)
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self.in_features = qweight.shape[1] * (2 if bits == 4 else 1)
        self.out_features = qweight.shape[0]

    @classmethod
    def from_linear(cls, layer: nn.Linear, bits: int = 8, group_size: int = 32) -> QuantizedLinear:
        if not isinstance(layer, nn.Linear):
            raise TypeError(f"expected an nn.Linear, got {type(layer).__name__}")
        if bits == 8:
            q, scale = quantize_int8(layer.weight)
            return cls(q, scale, layer.bias, 8)
        if bits == 4:
            q, scale = quantize_int4(layer.weight, group_size)
            return cls(pack_int4(q), scale, layer.bias, 4)
        raise ValueError(f"bits must be 8 or 4, got {bits!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if self.bits == 8:
            return int8_matmul(x, self.qweight, self.scale, bias)
        return int4_matmul(x, self.qweight, self.scale, bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}"


def quantize_model(model: nn.Module, bits: int = 8, group_size: int = 32) -> nn.Module:
    """Replace every ``nn.Linear`` inside ``model.blocks`` by a :class:`QuantizedLinear`, in place; returns it.

    The embedding and the output head stay in float: the head is usually tied to the embedding table, and
    quantising it would store that table twice.
    """
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.Module):
        raise TypeError(f"expected a GPT with .blocks, got {type(model).__name__}")
    if bits not in (4, 8):
        raise ValueError(f"bits must be 8 or 4, got {bits!r}")
    for parent in list(blocks.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, QuantizedLinear.from_linear(child, bits, group_size))
    return model


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the stored weights: every tensor of the state dict (quantised buffers included), a tied tensor
    counted once; tables recomputed from the shape (RoPE, sinusoids) are not stored and not counted."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for tensor in model.state_dict().values():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if key not in seen:
            seen.add(key)
            total += tensor.numel() * tensor.element_size()
    return total
