"""LoRA: fine-tune a few low-rank adapters instead of every weight.

Full fine-tuning moves every matrix ``W`` [out, in] of the model. LoRA (Hu et al., 2021) freezes ``W`` and
learns a low-rank change instead::

    y = x·Wᵀ + b + (α/r)·(x·Aᵀ)·Bᵀ          A [r, in] (small random), B [out, r] (zeros)

so the layer computes ``W + (α/r)·B·A`` without ever forming it. ``B = 0`` at the start, so the adapted model
is *exactly* the pretrained one before the first step; only ``r·(in + out)`` numbers per matrix are trained
(rank 8 on a 128 → 384 matrix: 4,096 of 49,152). After training, :func:`merge_lora` folds ``(α/r)·B·A`` into
``W``: a plain model of the original shape, with no extra cost at inference.

Why it forgets less: the update can only move ``W`` inside an ``r``-dimensional subspace, and the embeddings,
norms and biases do not move at all, so much of what pretraining stored cannot be overwritten.

``apply_lora(model, rank)`` wraps the attention (``attn.qkv``, ``attn.proj``) and MLP (``mlp.fc``/``mlp.proj``
or ``mlp.gate``/``mlp.up``/``mlp.down``) matrices of every block of a :class:`minillm.model.GPT` in place and
freezes everything else; any training loop then trains only the adapters (an optimizer built from
``requires_grad`` parameters, like :func:`minillm.optim.param_groups`, picks exactly them).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from minillm.model import GPTConfig, _is_positive_int, _is_real

__all__ = [
    "LoRALinear",
    "LORA_TARGETS",
    "apply_lora",
    "lora_layers",
    "merge_lora",
    "count_trainable",
    "lora_parameter_count",
]

#: What :func:`apply_lora` may wrap: a group name, or the path of a matrix inside a block.
LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "attn": ("attn.qkv", "attn.proj"),
    "mlp": ("mlp.fc", "mlp.proj", "mlp.gate", "mlp.up", "mlp.down"),
}
_MATRICES = tuple(name for names in LORA_TARGETS.values() for name in names)


def _check_rank_alpha(rank: int, alpha: float | None) -> float:
    """Validate ``rank`` and ``alpha``; return the scale α/r (α defaults to r, scale 1)."""
    if not _is_positive_int(rank):
        raise ValueError(f"rank must be a positive int, got {rank!r}")
    if alpha is None:
        return 1.0
    if not (_is_real(alpha) and alpha > 0):
        raise ValueError(f"alpha must be a positive number (or None for alpha = rank), got {alpha!r}")
    return float(alpha) / rank


class LoRALinear(nn.Module):
    """A frozen linear layer plus a trainable low-rank update: ``base(x) + (α/r)·(x·Aᵀ)·Bᵀ``.

    ``A`` [rank, in] is drawn N(0, 1/in) (so ``x·Aᵀ`` has about the scale of one input component) and ``B``
    [out, rank] starts at zero, so at initialisation the layer equals ``base`` exactly and the first step's
    gradient reaches ``B`` (it is ``A``'s that is zero then). ``alpha`` defaults to ``rank`` (scale 1);
    keeping α fixed while changing r keeps the update's size comparable across ranks.
    ``generator`` makes ``A`` reproducible. The base layer's parameters are frozen here.
    """

    def __init__(
        self,
        base: nn.Module,
        rank: int,
        alpha: float | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"LoRALinear wraps an nn.Linear layer, got {type(base).__name__}")
        self.scale = _check_rank_alpha(rank, alpha)
        out_features, in_features = base.weight.shape
        if rank > min(in_features, out_features):
            raise ValueError(
                f"rank {rank} is larger than the matrix allows (min(in, out) = {min(in_features, out_features)})"
            )
        self.rank, self.alpha = rank, float(rank if alpha is None else alpha)
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        w = base.weight
        # drawn on the CPU in float32 whatever the layer's device and dtype, so a seed gives the same A everywhere
        a = torch.randn(rank, in_features, generator=generator) / math.sqrt(in_features)
        self.lora_A = nn.Parameter(a.to(device=w.device, dtype=w.dtype))
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank, device=w.device, dtype=w.dtype))

    @property
    def in_features(self) -> int:
        return self.lora_A.shape[1]

    @property
    def out_features(self) -> int:
        return self.lora_B.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Two thin products (x·Aᵀ is [.., r]) instead of forming the [out, in] update: cheaper for r ≪ in, out.
        return self.base(x) + self.scale * F.linear(F.linear(x, self.lora_A), self.lora_B)

    @torch.no_grad()
    def merged_weight(self) -> torch.Tensor:
        """``W + (α/r)·B·A``: the full-rank weight this layer computes with."""
        return self.base.weight + self.scale * (self.lora_B @ self.lora_A)

    def extra_repr(self) -> str:
        return f"rank={self.rank}, alpha={self.alpha:g}, scale={self.scale:g}"


def _resolve_targets(targets: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each requested target with the matrix paths it stands for (a group stands for several)."""
    if isinstance(targets, str):
        targets = (targets,)
    if not targets:
        raise ValueError(f"targets is empty; choose from {sorted(LORA_TARGETS)} or {list(_MATRICES)}")
    resolved: dict[str, tuple[str, ...]] = {}
    for target in targets:
        if target in LORA_TARGETS:
            resolved[target] = LORA_TARGETS[target]
        elif target in _MATRICES:
            resolved[target] = (target,)
        else:
            raise ValueError(f"unknown LoRA target {target!r}; choose from {sorted(LORA_TARGETS)} or {list(_MATRICES)}")
    return resolved


def _matrices(resolved: dict[str, tuple[str, ...]], present: Sequence[str], mlp: str) -> tuple[str, ...]:
    """The matrix paths to wrap; a target none of whose matrices the model has is an error."""
    for target, names in resolved.items():
        if not any(name in present for name in names):
            raise ValueError(f"LoRA target {target!r} matches no layer of this model (its MLP is {mlp})")
    return tuple(dict.fromkeys(name for names in resolved.values() for name in names if name in present))


def apply_lora(
    model: nn.Module,
    rank: int,
    alpha: float | None = None,
    targets: Sequence[str] = ("attn", "mlp"),
    generator: torch.Generator | None = None,
) -> nn.Module:
    """Wrap the ``targets`` matrices of every block of ``model`` (a GPT) in :class:`LoRALinear`, in place.

    Every other parameter (embeddings, norms, biases, the head) is frozen, so only the adapters train.
    ``targets``: group names ("attn", "mlp": whichever MLP matrices the model has) or matrix paths
    ("attn.qkv", "mlp.fc", ...). Layers are wrapped block by block, in the order of ``LORA_TARGETS``, each
    drawing its ``A`` from ``generator`` (or the global generator). Returns ``model``.
    """
    _check_rank_alpha(rank, alpha)
    resolved = _resolve_targets(targets)
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
        raise ValueError("apply_lora expects a minillm GPT (a model with a non-empty .blocks ModuleList)")
    if lora_layers(model):
        raise ValueError("the model already has LoRA adapters; merge_lora it first or start from a fresh copy")

    def layer_at(block: nn.Module, name: str) -> nn.Module | None:
        parent_name, child_name = name.split(".")
        layer = getattr(getattr(block, parent_name, None), child_name, None)
        return layer if isinstance(layer, nn.Linear) else None

    present = [name for name in _MATRICES if layer_at(blocks[0], name) is not None]
    mlp = getattr(getattr(model, "config", None), "mlp", "of another kind")
    names = _matrices(resolved, present, mlp)
    plan = [(block, name, layer_at(block, name)) for block in blocks for name in names]
    for _, name, layer in plan:  # refuse before changing anything
        if layer is None:
            raise ValueError(
                f"a block of this model has no {name} layer; apply_lora needs the same layers in every block"
            )
        if rank > min(layer.weight.shape):
            raise ValueError(f"rank {rank} is larger than {name} allows (min(in, out) = {min(layer.weight.shape)})")
    for p in model.parameters():
        p.requires_grad_(False)
    for block, name, layer in plan:
        parent_name, child_name = name.split(".")
        setattr(getattr(block, parent_name), child_name, LoRALinear(layer, rank, alpha, generator))
    return model


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    """Every :class:`LoRALinear` in ``model``, by module path (e.g. ``blocks.0.attn.qkv``)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


@torch.no_grad()
def merge_lora(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with each adapter folded into its weight (``W + (α/r)·B·A``), all of it trainable.

    Why a copy: the adapted model stays as it was, to compare with or to train further. The copy has the
    original architecture and parameter names (it saves and loads like the base model) and computes the same
    function as the adapted model, up to float rounding.
    """
    merged = copy.deepcopy(model)
    layers = lora_layers(merged)
    if not layers:
        raise ValueError("the model has no LoRA adapters to merge")
    for name, layer in layers.items():
        layer.base.weight.copy_(layer.merged_weight())
        parent_name, _, child_name = name.rpartition(".")
        setattr(merged.get_submodule(parent_name), child_name, layer.base)
    for p in merged.parameters():
        p.requires_grad_(True)
    return merged


def count_trainable(model: nn.Module) -> int:
    """Number of distinct parameters that receive gradients (``requires_grad``; a tied weight counted once,
    as ``model.parameters()`` yields it once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def lora_parameter_count(config: GPTConfig, rank: int, targets: Sequence[str] = ("attn", "mlp")) -> int:
    """Closed form of the adapters' size for a :class:`minillm.model.GPTConfig`: Σ r·(in + out) per matrix.

    Per block: qkv d→d + 2·kv (kv = n_kv_head·head_dim, d without grouped-query attention), proj d→d; GELU MLP
    fc d→f, proj f→d; SwiGLU gate and up d→f, down f→d.
    """
    _check_rank_alpha(rank, None)
    d, f, kv = config.d_model, config.d_ff, config.n_kv_head * config.head_dim
    shapes = {"attn.qkv": (d, d + 2 * kv), "attn.proj": (d, d)}
    if config.mlp == "gelu":
        shapes |= {"mlp.fc": (d, f), "mlp.proj": (f, d)}
    else:
        shapes |= {"mlp.gate": (d, f), "mlp.up": (d, f), "mlp.down": (f, d)}
    names = _matrices(_resolve_targets(targets), list(shapes), config.mlp)
    return config.n_layer * sum(rank * sum(shapes[name]) for name in names)
