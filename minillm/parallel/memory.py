"""The memory model: bytes of weights, gradients, optimizer states and activations, for any config.

Model states follow ZeRO's accounting (Rajbhandari et al. 2019 §3.1): bytes per parameter depend on the
precision regime and the optimizer. Activations follow Korthikanti et al. 2022 §4 term by term, with
switches for tensor/sequence parallelism, recomputation, dropout and fused (flash) attention, so the
estimate can be held against the tensors autograd really saves (:func:`measure_saved_activation_bytes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

#: Bytes per parameter of (weights, gradients, fp32 master copy) in each precision regime.
PRECISION_REGIMES: dict[str, tuple[int, int, int]] = {
    "fp32": (4, 4, 0),
    "mixed": (2, 2, 4),  # fp16/bf16 weights and grads, fp32 master weights (ZeRO's K = 12 with Adam)
    "mixed_fp32_grads": (2, 6, 4),  # plus an fp32 gradient-accumulation buffer (the playbook's 20 B/param)
    "megatron": (2, 4, 4),  # bf16 weights, fp32 main grads (Megatron-LM's estimator: 18 B/param)
    "bf16_pure": (2, 2, 0),  # no master copy: cheap, but small updates vanish (see minillm.precision)
}

#: fp32 state tensors per parameter kept by each optimizer.
OPTIMIZER_STATES: dict[str, int] = {"adamw": 2, "adam": 2, "sgd_momentum": 1, "sgd": 0}


@dataclass(frozen=True)
class ModelStateBytes:
    """Bytes of the model states; ``optimizer`` includes the fp32 master weights when there are any."""

    weights: int
    grads: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.weights + self.grads + self.optimizer


def _check_positive_int(value: int, name: str) -> None:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def bytes_per_param(optimizer: str = "adamw", precision: str = "fp32") -> tuple[int, int, int]:
    """(weights, grads, optimizer incl. master) bytes per parameter, e.g. (2, 2, 12) for mixed + AdamW."""
    if precision not in PRECISION_REGIMES:
        raise ValueError(f"unknown precision regime {precision!r}; choose one of {sorted(PRECISION_REGIMES)}")
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {sorted(OPTIMIZER_STATES)}")
    weights, grads, master = PRECISION_REGIMES[precision]
    return weights, grads, master + 4 * OPTIMIZER_STATES[optimizer]


def model_state_bytes(num_params: int, optimizer: str = "adamw", precision: str = "fp32") -> ModelStateBytes:
    """Bytes of weights, gradients and optimizer states for ``num_params`` parameters (no sharding)."""
    _check_positive_int(num_params, "num_params")
    w, g, o = bytes_per_param(optimizer, precision)
    return ModelStateBytes(w * num_params, g * num_params, o * num_params)


def measure_model_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes actually held by the parameters, their ``.grad`` and the optimizer's state tensors.

    Per-parameter state tensors (Adam's m and v) count as ``optimizer``; scalar bookkeeping such as
    Adam's ``step`` counter is reported apart as ``optimizer_scalars``.
    """
    out = {"weights": 0, "grads": 0, "optimizer": 0, "optimizer_scalars": 0}
    for p in model.parameters():
        out["weights"] += p.numel() * p.element_size()
        if p.grad is not None:
            out["grads"] += p.grad.numel() * p.grad.element_size()
        for value in optimizer.state.get(p, {}).values():
            if isinstance(value, torch.Tensor):
                key = "optimizer" if value.shape == p.shape else "optimizer_scalars"
                out[key] += value.numel() * value.element_size()
    return out


def activation_bytes_per_layer(
    seq_len: int,
    micro_batch: int,
    hidden: int,
    n_head: int,
    ffn_hidden: int | None = None,
    tensor_parallel: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    bytes_per_value: int = 2,
    dropout: bool = True,
    mask_bytes: int = 1,
    flash_attention: bool = False,
    norm_statistics: bool = False,
) -> int:
    """Activation bytes one transformer layer keeps for backward (Korthikanti et al. 2022, §4).

    With the paper's defaults (16-bit values, 1-byte dropout masks, ffn = 4h) this is sbh·(34 + 5as/h)
    without parallelism and sbh·(10 + 24/t + 5as/(ht)) with t-way tensor parallelism. ``recompute``:
    'none', 'selective' (drop the attention core, i.e. every s² term) or 'full' (keep the layer input).
    ``flash_attention``: a fused kernel keeps no s × s matrix, only a per-row log-sum-exp (fp32).
    ``norm_statistics``: also count the per-token mean and 1/std the two LayerNorms keep (the paper
    neglects these 4·s·b values; a measurement sees them).
    """
    for value, name in ((seq_len, "seq_len"), (micro_batch, "micro_batch"), (hidden, "hidden"), (n_head, "n_head")):
        _check_positive_int(value, name)
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute must be 'none', 'selective' or 'full', got {recompute!r}")
    t = tensor_parallel
    _check_positive_int(t, "tensor_parallel")
    if hidden % t or n_head % t:
        raise ValueError(f"hidden {hidden} and n_head {n_head} must be divisible by tensor_parallel {t}")
    ffn = 4 * hidden if ffn_hidden is None else ffn_hidden
    sbh, B, M = seq_len * micro_batch * hidden, bytes_per_value, mask_bytes
    rep = t if sequence_parallel else 1  # replicated regions are split only under sequence parallelism
    if recompute == "full":
        return B * sbh // rep
    # Regions outside the tensor-parallel matmuls: two LayerNorm inputs, the QKV and MLP inputs, two masks.
    replicated = (
        4 * B * sbh + (2 * M * sbh if dropout else 0) + (4 * B * seq_len * micro_batch if norm_statistics else 0)
    )
    # Inside the split regions: Q, K, V, the out-projection input, the GELU input and the fc2 input.
    split = 4 * B * sbh + 2 * B * seq_len * micro_batch * ffn
    # The attention core: every term with s².
    if flash_attention:
        core = 4 * n_head * seq_len * micro_batch
    else:
        a_s2b = n_head * seq_len * seq_len * micro_batch
        core = a_s2b * (B + M + B) if dropout else a_s2b * B
    if recompute == "selective":
        core = 0
    return replicated // rep + (split + core) // t


def measure_saved_activation_bytes(
    fn: Callable[..., torch.Tensor], *inputs: torch.Tensor, exclude: list[torch.Tensor] | None = None
) -> int:
    """Bytes of the distinct storages autograd saves for backward while running ``fn(*inputs)``.

    Parameters (pass them as ``exclude``) do not count; the inputs do, since in a stack of layers a
    layer's input is the previous layer's output. A tensor saved by two operations (or views of one
    storage, like q, k, v split from a fused projection) counts once.
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude or []}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in skip and storage.nbytes() > 0:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*inputs)
    del out
    return sum(seen.values())
