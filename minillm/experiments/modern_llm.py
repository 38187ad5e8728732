"""The 2026 model's parts, measured: experts, the balancing loss, Muon and QK-norm on the course's stories (nb 16).

Five comparisons, each over several seeds (initialisation and batch order), trained with the course's own
:class:`~minillm.train.Trainer` (so every switch runs as ``python -m minillm.train`` runs it). Four use a small
llama-style GPT (2 layers, width 64); Muon against AdamW uses the course model's shape (notebook 06):

* ``moe_vs_dense``: a mixture of 4 experts (top-1, each expert as wide as the dense MLP) against the dense model at
  equal *active* parameters (:func:`~minillm.model.matmul_parameters`: a token meets one MLP in both) and equal
  steps: validation loss, tokens/s, and the parameters each holds;
* ``expert_usage``: the share of routing choices each expert gets on a fixed validation batch, with the Switch
  balancing loss (coefficient 0.01) and without it (0), with the balancing loss itself;
* ``muon_vs_adamw``: the course model's shape (gpt2-style, 4 layers, width 128, 4 heads; a context of 128 rather
  than 256, to fit the CPU budget): a small learning-rate sweep for each optimizer (first seed), then each at its
  best rate over every seed, equal steps; Muon updates the hidden matrices, AdamW (at AdamW's best rate) the
  embeddings, head and gains;
* ``qk_norm``: one learning-rate ladder without clipping, in float32, with and without QK-norm: the largest
  attention logit (q·k/√d over a fixed batch, every ``probe_every`` steps) and the validation loss. In float32 no
  rung diverges at this size (probed up to lr 1.0): the softmax subtracts its maximum, so logits in the thousands
  stay finite; what the ladder shows is the growth itself;
* ``qk_fp16``: the ladder's lr 0.1 rung, and lr 0.2, over eight seeds, in float16 (autocast with loss scaling,
  notebook 08's recipe), with and without QK-norm, probed every ``fp16_probe_every`` steps for the largest attention
  logit and the largest value any layer outputs. A run diverges when a float16 value passes float16's largest
  (65,504): the loss becomes NaN and training stops (``diverged_at``; ``at_divergence`` names the first layer that
  overflows on the probe batch). Which runs diverge is measured, not assumed: see notebook 16 and
  data/modern/README.md.

    python -m minillm.experiments.modern_llm --out data/modern --overwrite     # about 25 CPU-minutes on 1 thread
    python -m minillm.experiments.modern_llm --out /tmp/check --quick          # tiny sizes, seconds

The file records this module's SHA-256 and its dependencies' (``provenance``); ``tests/test_train_modern.py``
fails when the committed result is stale.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from minillm.batches import sequential_windows
from minillm.data import load_text
from minillm.experiments.arguments import run_one_file_experiment
from minillm.experiments.provenance import provenance
from minillm.model import GPT, matmul_parameters
from minillm.paths import data_path
from minillm.seed import seed_everything
from minillm.tokenizer import BPETokenizer
from minillm.train import TrainConfig, Trainer
from minillm.train.config import DTYPES
from minillm.train.loop import validation_loss

__all__ = ["QUICK", "RESULT", "Settings", "Shape", "largest_output", "max_attention_logit", "run", "train_run"]

RESULT = "modern_llm.json"


@dataclass(frozen=True)
class Shape:
    """A model and its run length: the small llama-style GPT of most comparisons, or the course model's shape."""

    preset: str
    n_layer: int
    d_model: int
    n_head: int
    context: int
    batch_size: int
    steps: int


@dataclass(frozen=True)
class Settings:
    """Sizes of every run (one thread: about 25 minutes in all)."""

    seeds: tuple[int, ...] = (0, 1, 2)
    train_chars: int = 1_500_000
    val_chars: int = 200_000
    steps: int = 120
    batch_size: int = 16
    context: int = 64
    d_model: int = 64
    n_layer: int = 2
    n_head: int = 4
    lr: float = 3e-3
    n_experts: int = 4
    qk_lrs: tuple[float, ...] = (3e-2, 1e-1, 3e-1)
    probe_every: int = 20
    fp16_lrs: tuple[float, ...] = (0.1, 0.2)
    fp16_seeds: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6, 7)  # divergence is a yes/no per run: more seeds
    fp16_probe_every: int = 4
    # Muon against AdamW on the course model's shape (configs/course.json: gpt2-style, 4 layers, width 128, 4 heads)
    course_preset: str = "gpt2-style"
    course_n_layer: int = 4
    course_d_model: int = 128
    course_n_head: int = 4
    course_context: int = 128
    course_steps: int = 150
    adamw_lrs: tuple[float, ...] = (1e-3, 3e-3, 1e-2)
    muon_lrs: tuple[float, ...] = (0.005, 0.01, 0.02, 0.05, 0.1)
    val_batches: int = 8

    def small(self) -> Shape:
        return Shape("llama-style", self.n_layer, self.d_model, self.n_head, self.context, self.batch_size, self.steps)

    def course(self) -> Shape:
        return Shape(
            self.course_preset, self.course_n_layer, self.course_d_model, self.course_n_head, self.course_context,
            self.batch_size, self.course_steps,
        )  # fmt: skip


QUICK = Settings(
    seeds=(0,), train_chars=60_000, val_chars=20_000, steps=6, batch_size=4, context=32, d_model=32, n_layer=1,
    n_head=2, qk_lrs=(3e-2,), probe_every=3, fp16_lrs=(3e-2,), fp16_seeds=(0,), fp16_probe_every=3,
    course_n_layer=1, course_d_model=32, course_n_head=2, course_context=32, course_steps=6, adamw_lrs=(3e-3,),
    muon_lrs=(0.02,), val_batches=2,
)  # fmt: skip


def token_streams(settings: Settings) -> tuple[np.ndarray, np.ndarray, int]:
    """Train and validation ids of the course's stories, with the base model's tokenizer; and its vocabulary size."""
    tokenizer = BPETokenizer.load(data_path("base/tokenizer.json"))
    train = tokenizer.encode(load_text(data_path("stories_train.txt"), max_chars=settings.train_chars))
    val = tokenizer.encode(load_text(data_path("stories_val.txt"), max_chars=settings.val_chars))
    return np.asarray(train, dtype=np.int64), np.asarray(val, dtype=np.int64), tokenizer.vocab_size


def train_config(shape: Shape, seed: int, lr: float, **switches: Any) -> TrainConfig:
    return TrainConfig(
        preset=shape.preset, vocab_size=2048, n_layer=shape.n_layer, n_head=shape.n_head, d_model=shape.d_model,
        context_length=shape.context, batch_size=shape.batch_size, max_steps=shape.steps,
        warmup_steps=max(1, shape.steps // 10), lr=lr, min_lr=lr / 10, eval_interval=0, progress=False, seed=seed,
        device="cpu", **switches,
    )  # fmt: skip


@torch.no_grad()
def max_attention_logit(model: GPT, ids: torch.Tensor) -> float:
    """The largest causal attention logit q·k/√head_dim of any layer and head on ``ids`` (after QK-norm and RoPE):
    what grows without bound when attention collapses onto one key (Dehghani et al. 2023)."""
    largest = -math.inf
    inputs: list[torch.Tensor] = []
    hooks = [block.attn.register_forward_pre_hook(lambda m, args: inputs.append(args[0])) for block in model.blocks]
    try:
        model(ids)
    finally:
        for hook in hooks:
            hook.remove()
    T = ids.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for block, x in zip(model.blocks, inputs, strict=True):
        attn = block.attn
        q, k, _ = attn.split_heads(x)
        if attn.qk_norm:
            q, k = attn.q_norm(q), attn.k_norm(k)
        if attn.rope is not None:
            q, k = attn.rope(q, 0), attn.rope(k, 0)
        k = k.repeat_interleave(attn.n_head // attn.n_kv_head, dim=1)
        logits = (q @ k.transpose(-1, -2)) / math.sqrt(attn.head_dim)
        largest = max(largest, logits.masked_fill(~causal, -math.inf).max().item())
    return largest


@torch.no_grad()
def largest_output(model: GPT, ids: torch.Tensor, dtype: torch.dtype | None) -> dict[str, Any]:
    """The largest absolute value any submodule outputs on ``ids`` in the run's precision (autocast ``dtype``), and
    the first submodule whose output is not finite (None when all are): where a float16 run overflows."""
    largest: dict[str, Any] = {"value": 0.0, "module": None, "first_nonfinite": None}

    def record(name: str) -> Any:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            out = output[0] if isinstance(output, tuple) else output
            if not (torch.is_tensor(out) and out.is_floating_point()):
                return
            if largest["first_nonfinite"] is None and not torch.isfinite(out).all():
                largest["first_nonfinite"] = name
            value = out.detach().float().abs().nan_to_num(nan=math.inf).max().item()
            if value > largest["value"]:
                largest["value"], largest["module"] = value, name

        return hook

    hooks = [m.register_forward_hook(record(name)) for name, m in model.named_modules() if name]
    try:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            model(ids)
    finally:
        for hook in hooks:
            hook.remove()
    largest["value"] = round(largest["value"], 3) if math.isfinite(largest["value"]) else "inf"
    return largest


def train_run(
    settings: Settings,
    data: tuple[np.ndarray, np.ndarray, int],
    seed: int,
    shape: Shape | None = None,
    probe_every: int | None = None,
    lr: float | None = None,
    **switches: Any,
) -> dict[str, Any]:
    """One run: train, then validation loss, speed, parameters, and (``probe_every``) the trace of the largest
    attention logit and of the largest value any layer outputs."""
    train, val, vocab = data
    shape = shape or settings.small()
    config = train_config(shape, seed, settings.lr if lr is None else lr, **switches)
    seed_everything(seed)
    model = GPT(config.model_config(vocab))
    trainer = Trainer(model, config, train)
    autocast = DTYPES[config.dtype]
    probe_ids = next(sequential_windows(val, 4, shape.context, 1))[0]
    trace: list[dict[str, Any]] = []
    diverged_at = None
    while trainer.step < shape.steps:
        until = min(shape.steps, trainer.step + probe_every) if probe_every else shape.steps
        try:
            trainer.run(until_step=until)
        except FloatingPointError:
            diverged_at = trainer.step
            break
        if probe_every:
            point = {"step": trainer.step, "max_attention_logit": round(max_attention_logit(model, probe_ids), 3)}
            if autocast is not None:
                point["largest_output"] = largest_output(model, probe_ids, autocast)
            trace.append(point)
    history = trainer.history
    result: dict[str, Any] = {
        "train_loss": [round(r["loss"], 4) for r in history],
        "diverged_at": diverged_at,
        "parameters": model.num_parameters(),
        "active_parameters": matmul_parameters(model.config),
        "tokens_per_s": round(float(np.median([r["tokens_per_s"] for r in history])), 1) if history else None,
    }
    if diverged_at is None:
        result["val_loss"] = round(validation_loss(model, val, shape.context, 16, settings.val_batches), 4)
    elif autocast is not None:  # the weights the failing step started from, on the probe batch
        result["at_divergence"] = largest_output(model, probe_ids, autocast)
    if probe_every:
        result["attention_logits"] = trace
    if model.config.n_experts:
        result["moe_aux_loss"] = [round(r["moe_aux_loss"], 4) for r in history]
        model(probe_ids)
        result["expert_usage"] = [[round(u, 4) for u in s.usage.tolist()] for s in model.moe_stats]
    return result


def run(settings: Settings, command: str) -> dict[str, Any]:
    """Every comparison and seed; the JSON payload of the result file (the caller sets torch's threads)."""
    data = token_streams(settings)
    payload: dict[str, Any] = {
        "settings": asdict(settings),
        "train_tokens": int(len(data[0])),
        "val_tokens": int(len(data[1])),
        "runs": {},
        "best_lr": {},
        "provenance": provenance(sys.modules[__name__], command),
    }
    runs = payload["runs"]

    def one(name: str, seed: int, **switches: Any) -> dict[str, Any]:
        started = time.perf_counter()
        runs[f"{name}_seed{seed}"] = result = {"seed": seed, **train_run(settings, data, seed, **switches)}
        print(f"{name} seed {seed}: val {result.get('val_loss')} ({time.perf_counter() - started:.0f} s)", flush=True)
        return result

    experts = dict(n_experts=settings.n_experts, experts_top_k=1)
    for seed in settings.seeds:
        one("dense", seed)
        one("moe", seed, **experts)  # Switch's coefficient 0.01 (moe_aux_coef's default)
        one("moe_no_aux", seed, **experts, moe_aux_coef=0.0)
    course, adamw_side = settings.course(), None

    def rates(optimizer: str, rate: float, adamw_side: float | None) -> dict[str, Any]:
        if optimizer == "adamw":
            return dict(lr=rate)
        return dict(optimizer="muon", muon_lr=rate, lr=adamw_side)  # the rest at AdamW's best rate

    for optimizer, lrs in (("adamw", settings.adamw_lrs), ("muon", settings.muon_lrs)):
        sweep = {
            rate: one(f"{optimizer}_lr{rate:g}", settings.seeds[0], shape=course, **rates(optimizer, rate, adamw_side))
            for rate in lrs
        }
        best = min(sweep, key=lambda rate: sweep[rate].get("val_loss", math.inf))
        payload["best_lr"][optimizer] = best
        for seed in settings.seeds[1:]:
            one(f"{optimizer}_lr{best:g}", seed, shape=course, **rates(optimizer, best, adamw_side))
        adamw_side = best  # Muon's runs give their embeddings, head and gains AdamW's best rate
    for lr in settings.qk_lrs:
        for qk_norm in (False, True):
            for seed in settings.seeds:
                name = f"qk{'on' if qk_norm else 'off'}_lr{lr:g}"
                one(name, seed, probe_every=settings.probe_every, lr=lr, qk_norm=qk_norm, grad_clip=None)
    for lr in settings.fp16_lrs:
        for qk_norm in (False, True):
            for seed in settings.fp16_seeds:
                name = f"fp16_qk{'on' if qk_norm else 'off'}_lr{lr:g}"
                probe = settings.fp16_probe_every
                one(name, seed, probe_every=probe, lr=lr, qk_norm=qk_norm, grad_clip=None, dtype="fp16")
    return payload


def main(argv: list[str] | None = None) -> None:
    run_one_file_experiment(
        "modern_llm",
        __doc__,
        RESULT,
        "folder for modern_llm.json (the course's is data/modern)",
        lambda quick, command: run(QUICK if quick else Settings(), command),
        argv,
    )


if __name__ == "__main__":
    main()
