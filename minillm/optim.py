"""Optimisers, gradient clipping and learning-rate schedules, written out so each line can be read.

- :class:`AdamW`: Adam's per-parameter step size (first and second moment estimates with bias
  correction) plus *decoupled* weight decay: weights shrink by ``lr * weight_decay`` directly instead of
  through the gradient, so the decay is not rescaled by Adam's normaliser.
- :class:`SGD`: plain gradient descent and heavy-ball momentum, for comparison.
- :class:`Muon`: momentum whose update is *orthogonalised* (:func:`newton_schulz`) before it is applied, for the
  2-D weight matrices of the hidden layers; :func:`muon_param_groups` / :func:`muon_with_adamw` give everything
  else (embeddings, the output head, norm gains, biases) to AdamW, as nanochat and Kimi's Moonlight do;
  :class:`MuonAdamW` is the pair as one optimizer object (what the training loop uses for ``optimizer="muon"``).
- :func:`param_groups`: no weight decay on norms, biases and (optionally) embeddings.
- :func:`clip_grad_norm`: rescale all gradients together when their global norm exceeds a limit.
- Schedules (:func:`warmup_cosine`, :func:`warmup_linear`, :func:`warmup_stable_decay`): pure functions
  of the step, so a resumed run recomputes exactly the same learning rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from functools import partial

import torch
from torch import nn

# --------------------------------------------------------------------------------------------- optimisers


def _closure_loss(closure: Callable[[], torch.Tensor] | None) -> torch.Tensor | None:
    """``torch.optim``'s closure contract: re-evaluate the loss with gradients on (steps run under no_grad)."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class AdamW(torch.optim.Optimizer):
    """AdamW (Loshchilov & Hutter) with the same update, in the same order, as ``torch.optim.AdamW``.

    Per parameter ``p`` with gradient ``g`` at step ``t``::

        p   <- p * (1 - lr * weight_decay)                 # decoupled decay
        m   <- beta1 * m + (1 - beta1) * g                 # first moment
        v   <- beta2 * v + (1 - beta2) * g * g             # second moment
        p   <- p - lr / (1 - beta1**t) * m / (sqrt(v / (1 - beta2**t)) + eps)
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"betas must lie in [0, 1), got {betas}")
        if eps <= 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                t = state["step"].item()
                m, v = state["exp_avg"], state["exp_avg_sq"]
                p.mul_(1 - lr * decay)
                m.lerp_(p.grad, 1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                step_size = lr / (1 - beta1**t)
                denom = (v.sqrt() / math.sqrt(1 - beta2**t)).add_(eps)
                p.addcdiv_(m, denom, value=-step_size)
        return loss


class SGD(torch.optim.Optimizer):
    """Stochastic gradient descent, optionally with heavy-ball momentum (as ``torch.optim.SGD``).

    ``buf <- momentum * buf + g`` (``buf = g`` on the first step), then ``p <- p - lr * buf``.
    ``weight_decay`` here is the classic L2 penalty added to the gradient (``g + weight_decay * p``).
    """

    def __init__(self, params: Iterable, lr: float = 1e-2, momentum: float = 0.0, weight_decay: float = 0.0):
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must lie in [0, 1), got {momentum}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        loss = _closure_loss(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if group["weight_decay"]:
                    g = g.add(p, alpha=group["weight_decay"])
                if group["momentum"]:
                    state = self.state[p]
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = g.clone()
                    else:
                        state["momentum_buffer"].mul_(group["momentum"]).add_(g)
                    g = state["momentum_buffer"]
                p.add_(g, alpha=-group["lr"])
        return loss


#: Muon's quintic Newton–Schulz coefficients (a, b, c) of φ(σ) = a·σ + b·σ³ + c·σ⁵ (Keller Jordan, 2024).
MUON_NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz(
    g: torch.Tensor, steps: int = 5, coefficients: tuple[float, float, float] = MUON_NS_COEFFICIENTS, eps: float = 1e-7
) -> torch.Tensor:
    """An approximation of U·Vᵀ for G = U·Σ·Vᵀ (the nearest semi-orthogonal matrix), by matmuls only.

    Why it works: X ← a·X + b·(XXᵀ)X + c·(XXᵀ)²X keeps U and V and maps each singular value σ to
    φ(σ) = aσ + bσ³ + cσ⁵, because (XXᵀ)ʲX = U·Σ^(2j+1)·Vᵀ. Dividing G by its Frobenius norm first puts every σ in
    [0, 1]; iterating φ then pushes them all towards 1. Choosing the coefficients:

    * the textbook quintic (15/8, −10/8, 3/8) has φ(1) = 1 and φ'(1) = φ''(1) = 0, so it converges to exactly 1,
      but its slope at 0 is only 15/8: a singular value of 1e-3 needs about a dozen steps to get near 1;
    * Muon only needs *roughly* orthogonal updates, so it takes the slope at 0 as large as it can, a = 3.4445
      (five steps multiply a tiny σ by 3.4445⁵ ≈ 480), and pays with φ(1) = a + b + c = 0.701: the values
      do not converge but settle in a band around 1. Iterating φ on a grid of σ ∈ [0.003, 1] for five steps
      lands every value in [0.68, 1.21] (φ's maximum on [0, 1] is 1.2024); smaller σ are still on their way
      (σ = 1e-3 reaches 0.47). That is accurate enough for an update direction, at 3 matmuls a step.

    Works on the smaller Gram matrix (transposing a tall G), in G's dtype (Muon runs it in bf16 on accelerators).
    """
    if g.dim() != 2:
        raise ValueError(f"newton_schulz orthogonalises a 2-D matrix, got shape {tuple(g.shape)}")
    a, b, c = coefficients
    tall = g.shape[0] > g.shape[1]
    x = g.t() if tall else g
    x = x / (torch.linalg.matrix_norm(x) + eps)
    for _ in range(steps):
        gram = x @ x.t()
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.t() if tall else x


class Muon(torch.optim.Optimizer):
    """Muon ("MomentUm Orthogonalized by Newton–Schulz"): SGD momentum, orthogonalised, for 2-D weight matrices.

    Per matrix ``p`` [out, in] with gradient ``g``::

        buf <- momentum * buf + g
        u   <- g + momentum * buf   if nesterov else buf
        p   <- p * (1 - lr * weight_decay) - lr * sqrt(max(1, out / in)) * newton_schulz(u)

    Why orthogonalise: a gradient matrix is usually dominated by a few directions; replacing it by U·Vᵀ gives
    every direction it contains the same step size, so rare directions learn too. The result has singular
    values ≈ 1 whatever the gradient's scale (the momentum's scale therefore does not matter either).
    Why sqrt(max(1, out/in)): a semi-orthogonal out × in matrix has entries of RMS 1/sqrt(max(out, in)); the factor
    makes it 1/sqrt(in) for every shape, so wide and tall matrices move alike. Only 2-D parameters are accepted:
    vectors and embedding tables belong to AdamW (see :func:`muon_param_groups`).
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 0.02,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        weight_decay: float = 0.0,
    ) -> None:
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must lie in [0, 1), got {momentum}")
        if not isinstance(ns_steps, int) or isinstance(ns_steps, bool) or ns_steps < 1:
            raise ValueError(f"ns_steps must be a positive int, got {ns_steps!r}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        defaults = dict(lr=lr, momentum=momentum, nesterov=bool(nesterov), ns_steps=ns_steps, weight_decay=weight_decay)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        for p in self.param_groups[-1]["params"]:
            if p.dim() != 2:
                raise ValueError(
                    f"Muon updates 2-D weight matrices only, got a parameter of shape {tuple(p.shape)}: give "
                    "vectors (norm gains, biases) and embedding tables to AdamW (minillm.optim.muon_param_groups)"
                )

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        loss = _closure_loss(closure)
        for group in self.param_groups:
            _muon_update(group, self.state)
        return loss


def _muon_update(group: dict, state: dict) -> None:
    """One Muon step of the parameters of ``group`` (lr, momentum, nesterov, ns_steps, weight_decay), whose
    momentum buffers live in ``state`` (the optimizer's per-parameter state)."""
    lr, momentum, decay = group["lr"], group["momentum"], group["weight_decay"]
    for p in group["params"]:
        if p.grad is None:
            continue
        g = p.grad
        entry = state[p]
        if "momentum_buffer" not in entry:
            entry["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        buf = entry["momentum_buffer"]
        buf.mul_(momentum).add_(g)
        update = g.add(buf, alpha=momentum) if group["nesterov"] else buf
        scale = math.sqrt(max(1.0, p.shape[0] / p.shape[1]))
        p.mul_(1 - lr * decay)
        p.add_(_orthogonalised(update, group["ns_steps"]).to(p.dtype), alpha=-lr * scale)


def _orthogonalised(update: torch.Tensor, steps: int) -> torch.Tensor:
    """:func:`newton_schulz` of ``update``; a sharded one (an FSDP ``DTensor``) is gathered first, because
    orthogonalising is a property of the whole matrix, not of each rank's rows. Every rank computes the same full
    result and keeps its own rows (no second communication)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if not isinstance(update, DTensor):
        return newton_schulz(update, steps)
    full = newton_schulz(update.full_tensor(), steps)
    return distribute_tensor(full, update.device_mesh, update.placements, src_data_rank=None)


class MuonAdamW(torch.optim.AdamW):
    """Muon and AdamW as *one* optimizer: groups marked ``muon=True`` take Muon's step, every other group PyTorch's
    AdamW step (the same kernel as ``torch.optim.AdamW``, foreach or fused as asked).

    Why one object: a training loop, a gradient scaler, a checkpoint (``state_dict``, PyTorch's distributed
    state-dict helpers) and :func:`set_lr` all handle a single optimizer; two would mean doubling every one of
    those places. The Muon groups hold ``momentum``, ``nesterov``, ``ns_steps`` and their own ``weight_decay``;
    give them ``lr_scale`` (Muon's rate over AdamW's) and :func:`set_lr` moves both rates along one schedule.
    Split a model's parameters with :func:`muon_param_groups`.
    """

    def __init__(self, params: Iterable, **adamw: object) -> None:
        super().__init__(params, **adamw)

    def add_param_group(self, param_group: dict) -> None:
        if param_group.get("muon"):
            param_group = {"momentum": 0.95, "nesterov": True, "ns_steps": 5, **param_group}
            for p in param_group["params"]:
                if p.dim() != 2:
                    raise ValueError(
                        f"a Muon group holds 2-D weight matrices only, got a parameter of shape {tuple(p.shape)}"
                    )
        super().add_param_group(param_group)

    def __setstate__(self, state: dict) -> None:
        # Adam's __setstate__ (run by load_state_dict) expects Adam's "step" in every state; Muon's states have
        # only a momentum buffer, so they are set aside while it runs.
        muon = {p for group in state["param_groups"] if group.get("muon") for p in group["params"]}
        aside = {p: state["state"].pop(p) for p in list(state["state"]) if p in muon}
        super().__setstate__(state)
        self.state.update(aside)

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        loss = _closure_loss(closure)
        every_group = self.param_groups
        for group in every_group:
            if group.get("muon"):
                _muon_update(group, self.state)
        self.param_groups = [group for group in every_group if not group.get("muon")]
        try:
            super().step()  # AdamW on the other groups
        finally:
            self.param_groups = every_group
        return loss


def _is_embedding(module: nn.Module) -> bool:
    """An embedding table: ``nn.Embedding`` or any module class named ``*Embedding`` with a ``weight``."""
    is_table = isinstance(module, nn.Embedding) or type(module).__name__.endswith("Embedding")
    return is_table and isinstance(getattr(module, "weight", None), nn.Parameter)


def param_groups(model: nn.Module, weight_decay: float, decay_embeddings: bool = False) -> list[dict]:
    """Split parameters into a decayed group and a non-decayed one.

    Weight decay pulls weights towards zero; that regularises matrices, but pulling norm gains and
    biases (vectors) towards zero only fights the model, so they are never decayed. Embedding tables
    (token and learned position tables: ``nn.Embedding`` or a module class named ``*Embedding``) are
    decayed only if ``decay_embeddings``. Shared (tied) parameters appear once, in the group of the
    first module that owns them.
    """
    embedding_ids = {id(m.weight) for m in model.modules() if _is_embedding(m)}
    decay, no_decay = [], []
    for p in model.parameters():  # yields a tied parameter once
        if not p.requires_grad:
            continue
        is_vector = p.dim() < 2
        is_embedding = id(p) in embedding_ids
        (no_decay if is_vector or (is_embedding and not decay_embeddings) else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def muon_param_groups(
    model: nn.Module, head_names: tuple[str, ...] = ("lm_head",)
) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """``(muon, adamw)``: the hidden layers' 2-D weight matrices for Muon, every other parameter for AdamW.

    AdamW keeps the embedding tables (a row is looked up, not multiplied: orthogonalising the whole table mixes
    unrelated tokens), the output head (modules named in ``head_names``; its rows are per-token scores too, and
    a tied head is the token table itself), and all vectors (norm gains, biases), which have no matrix to
    orthogonalise. Each parameter lands in exactly one list, a tied one once.
    """
    excluded = {id(m.weight) for m in model.modules() if _is_embedding(m)}
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in head_names:
            excluded.update(id(p) for p in module.parameters())
    muon, adamw = [], []
    for p in model.parameters():  # yields a tied parameter once
        if p.requires_grad:
            (muon if p.dim() == 2 and id(p) not in excluded else adamw).append(p)
    return muon, adamw


def muon_with_adamw(
    model: nn.Module,
    lr: float = 0.02,
    momentum: float = 0.95,
    adamw_lr: float = 3e-3,
    adamw_betas: tuple[float, float] = (0.9, 0.95),
    weight_decay: float = 0.0,
) -> tuple[Muon, AdamW]:
    """The two optimisers of a Muon run (:func:`muon_param_groups`); call ``step`` and ``zero_grad`` on both.

    ``weight_decay`` applies to the Muon matrices; the AdamW side (tables, head, vectors) is not decayed.
    """
    muon_params, adamw_params = muon_param_groups(model)
    return (
        Muon(muon_params, lr=lr, momentum=momentum, weight_decay=weight_decay),
        AdamW(adamw_params, lr=adamw_lr, betas=adamw_betas, weight_decay=0.0),
    )


# --------------------------------------------------------------------------------------------- clipping


def clip_grad_norm(parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale all gradients by ``min(1, max_norm / (norm + 1e-6))`` where ``norm`` is their global L2 norm.

    Returns the norm before clipping (what training logs as "grad norm"). Parameters without a gradient
    are ignored. Same result as ``torch.nn.utils.clip_grad_norm_``.
    """
    if max_norm <= 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm}")
    parameters = [parameters] if torch.is_tensor(parameters) else list(parameters)
    total = global_grad_norm(parameters)
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in parameters:
        if p.grad is not None:
            p.grad.detach().mul_(scale.to(p.grad.device, p.grad.dtype))
    return total


def global_grad_norm(parameters: Iterable[torch.Tensor]) -> torch.Tensor:
    """The global L2 norm of all gradients, without changing them."""
    grads = [p.grad.detach() for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


# --------------------------------------------------------------------------------------------- schedules
# All schedules share the warmup: lr(step) = max_lr * (step + 1) / warmup_steps for step < warmup_steps,
# so the first step already moves (lr(0) = max_lr / warmup_steps) and lr(warmup_steps - 1) = max_lr.
# After total_steps the learning rate stays at min_lr.


def _check(step: int, max_lr: float, warmup_steps: int, total_steps: int, min_lr: float) -> None:
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if warmup_steps < 0 or total_steps <= 0 or warmup_steps > total_steps:
        raise ValueError(
            f"need 0 <= warmup_steps <= total_steps and total_steps > 0, got {warmup_steps}, {total_steps}"
        )
    if not 0 <= min_lr <= max_lr:
        raise ValueError(f"need 0 <= min_lr <= max_lr, got min_lr={min_lr}, max_lr={max_lr}")


def _warmup_then(step: int, max_lr: float, warmup_steps: int, total_steps: int, min_lr: float) -> float | None:
    """The checks and the part every schedule shares: the warmup's rate, ``min_lr`` past the end, else None
    (the schedule's own decay applies)."""
    _check(step, max_lr, warmup_steps, total_steps, min_lr)
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    return min_lr if step >= total_steps else None


def warmup_cosine(step: int, *, max_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> float:
    """Linear warmup, then half a cosine from ``max_lr`` (at ``warmup_steps``) to ``min_lr`` (at ``total_steps``)."""
    shared = _warmup_then(step, max_lr, warmup_steps, total_steps, min_lr)
    if shared is not None:
        return shared
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


def warmup_linear(step: int, *, max_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> float:
    """Linear warmup, then a straight line from ``max_lr`` (at ``warmup_steps``) to ``min_lr`` (at ``total_steps``)."""
    shared = _warmup_then(step, max_lr, warmup_steps, total_steps, min_lr)
    if shared is not None:
        return shared
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return max_lr + (min_lr - max_lr) * progress


def warmup_stable_decay(
    step: int,
    *,
    max_lr: float,
    warmup_steps: int,
    total_steps: int,
    decay_steps: int,
    min_lr: float = 0.0,
) -> float:
    """Warmup, a long flat stretch at ``max_lr``, then a linear cool-down over the last ``decay_steps``.

    ``lr = max_lr`` for ``warmup_steps <= step <= total_steps - decay_steps`` and reaches ``min_lr`` at
    ``total_steps``. Because the flat part does not depend on the run length, a WSD run can be extended
    and cooled down from any saved checkpoint.
    """
    shared = _warmup_then(step, max_lr, warmup_steps, total_steps, min_lr)
    if not 0 <= decay_steps <= total_steps - warmup_steps:
        raise ValueError(f"decay_steps must lie in [0, total_steps - warmup_steps], got {decay_steps}")
    if shared is not None:
        return shared
    decay_start = total_steps - decay_steps
    if step <= decay_start:
        return max_lr
    return max_lr + (min_lr - max_lr) * (step - decay_start) / decay_steps


def constant(step: int, *, max_lr: float, **_: object) -> float:
    """The same learning rate at every step (a baseline for the schedules above)."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return max_lr


SCHEDULES: dict[str, Callable[..., float]] = {
    "cosine": warmup_cosine,
    "linear": warmup_linear,
    "wsd": warmup_stable_decay,
    "constant": constant,
}


def make_schedule(name: str, **kwargs: float) -> Callable[[int], float]:
    """``make_schedule("cosine", max_lr=3e-3, warmup_steps=50, total_steps=1000)`` → ``lr(step)``."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose from {sorted(SCHEDULES)}")
    schedule = partial(SCHEDULES[name], **kwargs)
    schedule(0)  # validate the arguments now, not at step 0 of a long run
    return schedule


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group; a group with an ``lr_scale`` gets ``lr · lr_scale`` (the
    Muon groups of :class:`MuonAdamW`, whose own rate follows the same schedule)."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group["lr_scale"] if "lr_scale" in group else lr
