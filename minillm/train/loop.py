"""The training loop: one optimizer step, evaluation, the run, and exact resume.

One optimizer step is: for each of ``grad_accum`` micro-batches, forward, cross-entropy, backward
(gradients add up); then clip the global gradient norm and let AdamW update the weights at the
scheduled learning rate. Around it: periodic validation, a metrics history, checkpoints that resume the
exact run, and a guard against NaN/inf losses.

The loop is not tied to plain text: ``batches`` (anything with ``next_batch()``, ``state_dict()`` and
``load_state_dict()``) and ``loss_fn(model, batch)`` may be swapped in, which is how supervised
fine-tuning (:func:`minillm.sft.train_sft`) trains chat examples with a response-only loss on the same
loop — same optimizer, schedule, clipping, NaN guard, history and checkpoints.

Data parallelism: launched under ``torchrun --nproc_per_node=N`` (gloo on CPU, NCCL on GPUs) the model is
wrapped in PyTorch's ``DistributedDataParallel``, or with ``parallel="fsdp"`` sharded block by block with
``fully_shard``. ``batch_size`` is the *global* batch: every rank draws the same windows and trains on its own
slice, and the gradients are averaged, so N processes take the same steps as one process with the whole batch.

Precision and speed switches (``TrainConfig``): ``dtype`` (fp32, bf16 or fp16 autocast with fp32 master
weights; fp16 adds loss scaling), ``activation_checkpointing``, ``compile``; ``peak_tflops`` adds MFU to the
history.

The 2026 training switches (notebook 16): ``optimizer="muon"`` (:class:`~minillm.optim.MuonAdamW`: Muon on the
hidden 2-D matrices at ``muon_lr``, AdamW on the rest, one optimizer, one checkpointed state); with experts,
``moe_aux_coef · model.moe_aux_loss`` is added to the loss; ``z_loss_coef · z_loss(logits)`` over the positions
whose target counts. The history's ``loss`` stays the cross-entropy; the auxiliary terms are logged beside it
(``moe_aux_loss``, ``z_loss``, unscaled) and only their gradients join the step.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from minillm.batches import RandomWindows, sequential_windows
from minillm.checkpoint import load_checkpoint, save_checkpoint
from minillm.loss import z_loss
from minillm.model import GPT, GPTConfig
from minillm.optim import MuonAdamW, muon_param_groups, param_groups, set_lr
from minillm.train.config import DTYPES, TrainConfig
from minillm.train.sharded import SHARDS_KEY, read_full_state, read_local_shards, save_sharded

__all__ = [
    "Trainer",
    "DistContext",
    "BatchSource",
    "DataError",
    "LossFn",
    "lm_loss",
    "lm_loss_and_z_loss",
    "validation_loss",
]


class DataError(ValueError):
    """Training data the model cannot read (token ids outside its vocabulary); the message names the data."""


class BatchSource(Protocol):
    """What the loop draws micro-batches from (:class:`~minillm.batches.RandomWindows` is one)."""

    def next_batch(self) -> tuple[torch.Tensor, ...]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


# loss_fn(model, batch) -> loss, or (loss, {name: float}) to log extra metrics per step
LossFn = Callable[[nn.Module, tuple[torch.Tensor, ...]], Any]


def lm_loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Next-token cross-entropy of an ``(inputs, targets)`` batch: the pretraining loss."""
    inputs, targets = batch
    logits = model(inputs)
    # PyTorch's fused kernel (notebook 04's written-out minillm.loss.cross_entropy is tested equal to it); under
    # bf16/fp16 autocast the logits come out in half precision: the softmax is taken in (at least) fp32
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def lm_loss_and_z_loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`lm_loss` and :func:`~minillm.loss.z_loss` of the same logits, the z-loss over the positions whose
    target counts (not ``ignore_index``, -100), in at least fp32."""
    inputs, targets = batch
    logits = model(inputs)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), z_loss(logits[targets != -100])


@torch.no_grad()
def validation_loss(
    model: nn.Module, tokens, context_length: int, batch_size: int = 32, max_batches: int | None = None
) -> float:
    """Mean next-token loss over fixed windows of held-out ``tokens`` (:func:`~minillm.batches.sequential_windows`).

    The same windows at every call, so losses of different steps — or of a model before and after
    fine-tuning (forgetting, notebook 09) — differ only by what the model learned. Runs in eval mode, then
    restores the model's mode.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for inputs, targets in sequential_windows(tokens, batch_size, context_length, max_batches):
        logits = model(inputs.to(device))
        total += F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten(), reduction="sum").item()
        count += targets.numel()
    model.train(was_training)
    return total / count


@dataclass
class DistContext:
    """Where this process sits in a data-parallel job (rank 0 of 1 when not distributed)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def broadcast_object(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (``value`` itself when not distributed).

        Why: checks that only rank 0 makes (the run folder's lock and record) must stop every rank
        together; a rank that raised alone would leave the others waiting at the next barrier.
        """
        if not self.enabled:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    @classmethod
    def from_env(cls) -> DistContext:
        """Read torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` and join the process group if needed."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size == 1:
            return cls()
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        return cls(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def _mean_over_ranks(value: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    if ctx.enabled:
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)  # SUM then divide works on every backend
        value /= ctx.world_size
    return value


class Trainer:
    """Owns the model, optimizer, schedule, batch stream and history of one pretraining run."""

    def __init__(
        self,
        model: nn.Module,
        config: TrainConfig,
        train_tokens: np.ndarray | torch.Tensor | None = None,
        val_tokens: np.ndarray | torch.Tensor | None = None,
        device: torch.device | str = "cpu",
        dist_ctx: DistContext | None = None,
        batches: BatchSource | None = None,
        loss_fn: LossFn = lm_loss,
        data_name: str | None = None,
        run_id: str | None = None,
    ) -> None:
        """``train_tokens`` feed random windows; or pass ``batches`` (and a ``loss_fn`` that reads them).

        ``data_name`` (e.g. the token file) is named when the data does not fit the model; ``run_id`` is saved in
        every checkpoint, and the id of a loaded one is kept in ``loaded_run`` (with its config), so a caller can
        tell a checkpoint of another run from its own.
        """
        self.config = c = config
        self.data_name = data_name or "the training data"
        self.run_id = run_id
        self.loaded_run: dict[str, Any] | None = None
        self._ids_checked = False
        self.ctx = dist_ctx or DistContext()
        self.device = torch.device(device)
        self.raw_model = model.to(self.device)
        if c.activation_checkpointing:
            if not hasattr(model, "activation_checkpointing"):
                raise ValueError(f"activation_checkpointing needs a minillm GPT, got {type(model).__name__}")
            model.activation_checkpointing = True
        self.fsdp = self.ctx.enabled and c.parallel == "fsdp"
        if self.fsdp:
            self._shard_blocks()  # the model's own parameters become shards: no wrapper
            self.model: nn.Module = self.raw_model
        elif self.ctx.enabled:
            ids = [self.ctx.local_rank] if self.device.type == "cuda" else None
            self.model = DistributedDataParallel(self.raw_model, device_ids=ids)
        else:
            self.model = self.raw_model
        if c.compile:  # the compiled wrapper shares the raw model's parameters; checkpoints save the raw model
            self.model = torch.compile(self.model)
        self.optimizer = self._build_optimizer()
        self.schedule = c.lr_schedule()
        if c.z_loss_coef and loss_fn is not lm_loss:
            raise ValueError(
                f"z_loss_coef={c.z_loss_coef} adds the z-loss to the pretraining loss (lm_loss); a custom loss_fn "
                "must add its own (minillm.loss.z_loss), so set z_loss_coef=0 here"
            )
        # With experts, the load-balancing loss the model leaves after each forward joins the loss (and the log).
        self.has_experts = isinstance(getattr(self.raw_model, "config", None), GPTConfig) and bool(
            self.raw_model.config.n_experts
        )
        if batches is None:
            if train_tokens is None:
                raise ValueError("give the Trainer train_tokens or a batch source")
            batches = RandomWindows(
                train_tokens, c.batch_size, c.context_length, c.seed, self.ctx.rank, self.ctx.world_size
            )
        self.batches = batches
        self.loss_fn = loss_fn
        self.val_tokens = val_tokens
        self.step = 0
        self.history: list[dict] = []
        flops = getattr(self.raw_model, "flops_per_token", None)  # a GPT knows its FLOPs; other models skip MFU
        self.flops_per_token = flops(c.context_length) if flops is not None else None
        # Mixed precision (notebook 08): the forward pass runs under autocast in bf16/fp16 while the weights, their
        # gradients and AdamW's states stay fp32 (the master weights). fp16's narrow range needs loss scaling.
        self.autocast_dtype = None if self.fsdp else DTYPES[c.dtype]  # under FSDP its precision policy casts
        self.scaler = torch.amp.GradScaler(self.device.type) if c.dtype == "fp16" else None

    def _build_optimizer(self) -> torch.optim.Optimizer:
        """AdamW on every parameter, or (``optimizer="muon"``) one :class:`~minillm.optim.MuonAdamW`: the hidden
        2-D matrices (:func:`~minillm.optim.muon_param_groups`) in a Muon group at ``muon_lr``, everything else in
        the AdamW groups of the AdamW run, with the same decay rules."""
        c = self.config
        groups = param_groups(self.raw_model, c.weight_decay, decay_embeddings=c.decay_embeddings)
        # PyTorch's AdamW, multi-tensor (fused into one kernel on a GPU): notebook 05's written-out
        # minillm.optim.AdamW computes the same update (tests/test_optim.py) but one parameter at a time.
        speed = {"fused": True} if self.device.type == "cuda" else {"foreach": True}
        if c.optimizer == "adamw":
            return torch.optim.AdamW(groups, lr=c.lr, betas=(c.beta1, c.beta2), **speed)
        matrices, _ = muon_param_groups(self.raw_model)
        in_muon = {id(p) for p in matrices}
        adamw_groups = [{**group, "params": [p for p in group["params"] if id(p) not in in_muon]} for group in groups]
        muon_group = dict(
            params=matrices, muon=True, lr=c.muon_lr, lr_scale=c.muon_lr / c.lr, momentum=c.muon_momentum,
            nesterov=True, ns_steps=5, weight_decay=c.muon_weight_decay,
        )  # fmt: skip
        return MuonAdamW([*adamw_groups, muon_group], lr=c.lr, betas=(c.beta1, c.beta2), **speed)

    def _losses(
        self, model: nn.Module, batch: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor | None]:
        """(the loss that is logged, its metrics, the auxiliary terms to add for the gradient or None)."""
        c, extra = self.config, None
        if c.z_loss_coef:
            loss, z = lm_loss_and_z_loss(model, batch)
            metrics: dict[str, Any] = {"z_loss": z.detach()}
            extra = c.z_loss_coef * z
        else:
            out = self.loss_fn(model, batch)
            loss, metrics = out if isinstance(out, tuple) else (out, {})
        if self.has_experts:
            aux = self.raw_model.moe_aux_loss
            metrics = {**metrics, "moe_aux_loss": aux.detach()}
            if c.moe_aux_coef:
                extra = c.moe_aux_coef * aux if extra is None else extra + c.moe_aux_coef * aux
        return loss, metrics, extra

    def _shard_blocks(self) -> None:
        """FSDP (PyTorch's ``fully_shard``): every block's parameters, gradients and AdamW states are split across
        the ranks and gathered only while that block computes — ZeRO-3, notebook 07. bf16 gathers and computes
        in bf16 and reduces gradients in fp32; the shards (master weights) stay fp32."""
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        blocks = getattr(self.raw_model, "blocks", None)
        if blocks is None:
            raise ValueError(
                f"parallel='fsdp' shards a minillm GPT block by block, got {type(self.raw_model).__name__}"
            )
        dtype = DTYPES[self.config.dtype]
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
        for block in blocks:
            fully_shard(block, mp_policy=policy)
        fully_shard(self.raw_model, mp_policy=policy)

    def _forward_precision(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    # ---------------------------------------------------------------------------------------- one step
    def train_step(self) -> dict:
        """One optimizer step over ``grad_accum`` micro-batches; returns its metrics."""
        c, model = self.config, self.model
        start = time.perf_counter()
        model.train()
        lr = self.schedule(self.step)
        set_lr(self.optimizer, lr)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float64)
        extra: dict[str, float] = {}
        tokens = 0
        for micro in range(c.grad_accum):
            batch = tuple(t.to(self.device, non_blocking=True) for t in self.batches.next_batch())
            if not self._ids_checked:
                self._check_ids(batch[0])
            tokens += batch[0].numel() * self.ctx.world_size
            last = micro == c.grad_accum - 1
            if self.fsdp:  # reduce-scatter the gradients only after the last micro-batch
                self.raw_model.set_requires_gradient_sync(last)
            sync = contextlib.nullcontext() if last or not self.ctx.enabled or self.fsdp else model.no_sync()
            with sync:
                with self._forward_precision():
                    loss, metrics, aux = self._losses(model, batch)
                loss = loss / c.grad_accum
                objective = loss if aux is None else loss + aux / c.grad_accum
                (objective if self.scaler is None else self.scaler.scale(objective)).backward()
            loss_sum += loss.detach()
            for name, value in metrics.items():
                extra[name] = extra.get(name, 0.0) + float(value) / c.grad_accum
        loss_value = _mean_over_ranks(loss_sum, self.ctx).item()
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        # the global norm (over every rank's shards under FSDP); without clipping the bound is infinite: norm only
        norm = torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), c.grad_clip or math.inf, foreach=True)
        grad_norm = (norm.full_tensor() if hasattr(norm, "full_tensor") else norm).item()
        record = {"step": self.step, "loss": loss_value, "lr": lr, "grad_norm": grad_norm, **extra}
        if self.scaler is not None and math.isfinite(loss_value):
            # an overflowed gradient (inf norm) is expected now and then: the scaler skips that step and halves S
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            record["loss_scale"] = scale
            if self.scaler.get_scale() < scale:
                record["skipped"] = True
        elif math.isfinite(loss_value) and math.isfinite(grad_norm):
            self.optimizer.step()
        elif c.on_nonfinite == "skip":
            self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:
                self.scaler.update()  # the NaN counts as an overflow: S halves, as for any skipped step
            record["skipped"] = True
        else:
            raise FloatingPointError(
                f"non-finite training loss {loss_value} (grad norm {grad_norm}) at step {self.step}; "
                "lower the learning rate, or set on_nonfinite='skip' to skip such steps"
            )
        seconds = time.perf_counter() - start
        record["seconds"] = seconds
        record["tokens_per_s"] = tokens / seconds  # input positions (padding included), all ranks
        if c.peak_tflops is not None and self.flops_per_token is not None:  # model FLOPs utilisation
            record["mfu"] = record["tokens_per_s"] * self.flops_per_token / (c.peak_tflops * 1e12 * self.ctx.world_size)
        self.step += 1
        return record

    def _check_ids(self, inputs: torch.Tensor) -> None:
        """Stop with the data named if the first batch holds ids the model has no embedding for.

        Why only the first batch: the check reads the ids back to the host, which every step would pay for; a
        token file of another tokenizer, or of random bytes, shows itself in the first batch. Without it the
        embedding fails with a bare "index out of range" (or a CUDA device assert) naming no file.
        """
        self._ids_checked = True
        vocab_size = getattr(getattr(self.raw_model, "config", None), "vocab_size", None)
        if vocab_size is None or inputs.is_floating_point() or inputs.numel() == 0:
            return
        low, high = torch.stack([inputs.min(), inputs.max()]).tolist()
        if low < 0 or high >= vocab_size:
            bad = high if high >= vocab_size else low
            raise DataError(
                f"{self.data_name}: the first training batch holds token id {bad}, but the model has "
                f"vocab_size={vocab_size} (ids 0 to {vocab_size - 1}): the tokens were not encoded with this "
                "model's tokenizer, or the file is damaged; encode the text again with the run's tokenizer"
            )

    def evaluate(self, max_batches: int | None = None) -> float:
        """Mean loss over the fixed validation windows (the same windows at every evaluation)."""
        if self.val_tokens is None:
            raise ValueError("no validation tokens were given to this Trainer")
        c = self.config
        return validation_loss(
            self.raw_model, self.val_tokens, c.context_length, c.batch_size, max_batches or c.eval_batches
        )

    # ---------------------------------------------------------------------------------------- the loop
    def run(self, until_step: int | None = None, checkpoint_path: str | os.PathLike | None = None) -> list[dict]:
        """Train from the current step to ``until_step`` (default ``max_steps``); returns the history.

        Evaluates every ``eval_interval`` steps and at the end (rank 0), and saves a checkpoint every
        ``checkpoint_interval`` steps and at the end when ``checkpoint_path`` is given.
        """
        c = self.config
        end = c.max_steps if until_step is None else min(until_step, c.max_steps)
        bar = tqdm(total=end, initial=self.step, disable=not (c.progress and self.ctx.is_main), desc="train")
        try:
            while self.step < end:
                record = self.train_step()
                last = self.step == end
                if self.val_tokens is not None and (self.ctx.is_main or self.fsdp) and c.eval_interval:
                    if self.step % c.eval_interval == 0 or (last and end == c.max_steps):
                        record["val_loss"] = self.evaluate()
                self.history.append(record)
                bar.update(1)
                speed = {"tok/s": f"{record['tokens_per_s']:,.0f}"} | (
                    {"mfu": f"{record['mfu']:.1%}"} if "mfu" in record else {}
                )
                bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}", **speed)
                due = c.checkpoint_interval and self.step % c.checkpoint_interval == 0
                if checkpoint_path is not None and (due or last):
                    self.save(checkpoint_path)
        finally:
            bar.close()
        return self.history

    # ---------------------------------------------------------------------------------------- resume
    def state_dict(self) -> dict:
        # Full (unsharded) tensors keyed by parameter name, whatever the parallelism (under FSDP every rank must
        # call it: the shards are gathered); loads with weights_only=True (no DTensors). :meth:`save` under FSDP
        # writes shards instead.
        full = StateDictOptions(full_state_dict=True, cpu_offload=self.fsdp)
        return {
            "model": get_model_state_dict(self.raw_model, options=full),
            "optimizer": get_optimizer_state_dict(self.raw_model, self.optimizer, options=full),
            **self._run_state(),
        }

    def _run_state(self) -> dict:
        """Everything but the weights and optimizer states: step, data position, random state, history."""
        state = {
            "step": self.step,
            "batches": self.batches.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "history": self.history,
            "config": self.config.to_dict(),
        }
        if self.run_id is not None:
            state["run_id"] = self.run_id
        if torch.cuda.is_available():
            state["cuda_rng"] = torch.cuda.get_rng_state_all()
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        full = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.raw_model, state["model"], options=full)
        if all(isinstance(key, int) for key in state["optimizer"].get("state", {})):  # written before names
            self.optimizer.load_state_dict(state["optimizer"])
        else:
            set_optimizer_state_dict(self.raw_model, self.optimizer, state["optimizer"], options=full)
        self._load_run_state(state)

    def _load_run_state(self, state: dict) -> None:
        self.batches.load_state_dict(state["batches"])
        torch.set_rng_state(state["torch_rng"])
        if "cuda_rng" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        if self.scaler is not None and "scaler" in state:  # a checkpoint of another dtype starts a fresh scale
            self.scaler.load_state_dict(state["scaler"])
        self.history = list(state["history"])
        self.step = int(state["step"])
        self.loaded_run = {"run_id": state.get("run_id"), "config": state.get("config")}

    def save(self, path: str | os.PathLike) -> None:
        """Write a resumable checkpoint: rank 0 writes it, or under FSDP every rank writes its own shards
        (:mod:`minillm.train.sharded`) and rank 0 the rest."""
        if self.fsdp:
            save_sharded(self.raw_model, self.optimizer, self._run_state(), path, self.step)
            return
        if self.ctx.is_main:
            save_checkpoint(self.state_dict(), path)
        self.ctx.barrier()

    def full_model(self) -> nn.Module | None:
        """The trained model as one ordinary module on rank 0 (None on the others), e.g. to sample from and save.

        Under FSDP its shards are gathered, so every rank must call this; otherwise it is the model itself.
        """
        if not self.fsdp:
            return self.raw_model if self.ctx.is_main else None
        weights = get_model_state_dict(self.raw_model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if not self.ctx.is_main:
            return None
        model = GPT(self.raw_model.config)
        model.load_state_dict(weights)
        return model.to(self.device).eval()

    def load(self, path: str | os.PathLike) -> None:
        """Continue from a checkpoint written by :meth:`save`, whatever the parallelism that wrote it: an FSDP
        run's shards go straight to the same number of FSDP ranks, and are joined into full tensors otherwise."""
        state = load_checkpoint(path, map_location="cpu")
        manifest = state.pop(SHARDS_KEY, None)
        if manifest is None:
            self.load_state_dict(state)
        elif self.fsdp and manifest["world_size"] == self.ctx.world_size:
            read_local_shards(path, manifest, self.raw_model, self.optimizer)
            self._load_run_state(state)
        else:
            state["model"], state["optimizer"] = read_full_state(path, manifest)
            self.load_state_dict(state)
