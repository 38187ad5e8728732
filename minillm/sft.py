"""Supervised fine-tuning (SFT): teach a text completer the chat format, with the loss on responses only.

A pretrained model continues text. To make it answer, we show it conversations written in the chat
format (:mod:`minillm.chat`: ``<|endoftext|><|user|>…<|end|><|assistant|>…<|end|>``) and train with the
ordinary next-token loss — but only on the assistant's tokens (its content and the closing ``<|end|>``, so
it learns to stop). The prompt still conditions every prediction; it just is not a
target: we want the model to learn to answer, not to imitate users.

Normalisation is a choice, made explicit by :func:`sft_loss`: ``"token"`` averages over every response
token in the batch (long answers weigh more, the usual default), ``"sequence"`` averages within each
example first (every example weighs the same). Either way padding adds nothing: pad tokens sit after
the real ones (right padding), a causal model never looks ahead, and their mask is 0.

The learning rate matters: SFT moves the weights towards a narrow task, and too large a step erases what
pretraining taught (catastrophic forgetting) — see :func:`lm_validation_loss` and notebook 09.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from minillm.batches import right_pad
from minillm.chat import ChatTokens, encode_chat
from minillm.train.config import TrainConfig
from minillm.train.loop import Trainer, lm_loss, validation_loss

__all__ = [
    "fitting_examples",
    "SFTBatch",
    "collate",
    "sft_loss",
    "ChatBatches",
    "SFTHistory",
    "train_sft",
    "lm_validation_loss",
]


def fitting_examples(rows: Sequence[dict], tokenizer, context_length: int) -> list[ChatTokens]:
    """The SFT set's conversations (rows with ``messages``) encoded in the chat format, keeping those that fit.

    An example of ``context_length + 1`` tokens still fits: training predicts tokens 1… from tokens …T−1, so the
    model sees ``context_length`` positions. Longer ones are dropped, not truncated — a cut conversation would
    teach replies that stop mid-sentence without ``<|end|>``.
    """
    examples = (encode_chat(row["messages"], tokenizer) for row in rows)
    return [example for example in examples if len(example.ids) <= context_length + 1]


@dataclass
class SFTBatch:
    """Right-padded model inputs, next-token targets and the loss mask, each ``[B, T]``."""

    inputs: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor

    def to(self, device: torch.device | str) -> SFTBatch:
        return SFTBatch(self.inputs.to(device), self.targets.to(device), self.mask.to(device))


def collate(examples: Sequence[ChatTokens], pad_id: int, max_len: int | None = None) -> SFTBatch:
    """Shift by one (inputs predict the next id) and right-pad to the longest example (mask 0 on padding).

    ``max_len`` truncates inputs to the model's context length.
    """
    if not examples:
        raise ValueError("collate needs at least one example")
    rows = []
    for ex in examples:
        if len(ex.ids) < 2:
            raise ValueError(f"an example needs at least 2 tokens, got {len(ex.ids)}")
        inputs, targets, mask = ex.ids[:-1], ex.ids[1:], ex.loss_mask[1:]
        if max_len is not None:
            inputs, targets, mask = inputs[:max_len], targets[:max_len], mask[:max_len]
        rows.append((inputs, targets, mask))
    inputs, targets, mask = zip(*rows, strict=True)
    return SFTBatch(right_pad(inputs, pad_id), right_pad(targets, pad_id), right_pad(mask, 0))


def sft_loss(
    logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, normalization: str = "token"
) -> torch.Tensor:
    """Cross-entropy on the masked (response) targets.

    ``"token"``: sum over all response tokens of the batch / their count. ``"sequence"``: mean over each
    example's response tokens, then mean over examples.
    """
    if logits.shape[:2] != targets.shape or targets.shape != mask.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)}, targets {tuple(targets.shape)} and mask {tuple(mask.shape)} disagree"
        )
    per_token = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none").view_as(targets)
    m = mask.to(per_token.dtype)
    if normalization == "token":
        count = m.sum()
        if count == 0:
            raise ValueError("the batch has no response token to train on")
        return (per_token * m).sum() / count
    if normalization == "sequence":
        per_row = m.sum(dim=1)
        if torch.any(per_row == 0):
            raise ValueError("an example has no response token to train on")
        return ((per_token * m).sum(dim=1) / per_row).mean()
    raise ValueError(f"normalization must be 'token' or 'sequence', got {normalization!r}")


@dataclass
class SFTHistory:
    """Losses logged by :func:`train_sft` (one entry per step): the SFT loss and the full step records."""

    loss: list[float] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)


class ChatBatches:
    """Random batches of chat examples for :class:`minillm.train.Trainer` (inputs, targets, loss mask)."""

    def __init__(
        self,
        examples: Sequence[ChatTokens],
        pad_id: int,
        batch_size: int,
        max_len: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if not examples:
            raise ValueError("no chat examples to train on")
        self.examples, self.pad_id, self.batch_size, self.max_len = examples, pad_id, batch_size, max_len
        self.generator = generator

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        picks = torch.randint(len(self.examples), (self.batch_size,), generator=self.generator).tolist()
        batch = collate([self.examples[i] for i in picks], self.pad_id, max_len=self.max_len)
        return batch.inputs, batch.targets, batch.mask

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()} if self.generator is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.generator is not None and "generator" in state:
            self.generator.set_state(state["generator"])


def train_sft(
    model: nn.Module,
    examples: Sequence[ChatTokens],
    pad_id: int,
    steps: int,
    lr: float,
    batch_size: int = 16,
    weight_decay: float = 0.0,
    normalization: str = "token",
    pretrain_batches: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None,
    pretrain_weight: float = 0.0,
    generator: torch.Generator | None = None,
    progress: bool = False,
    warmup_steps: int = 0,
    schedule: str = "constant",
    min_lr: float | None = None,
) -> SFTHistory:
    """Fine-tune ``model`` on chat examples with :class:`minillm.train.Trainer`'s loop.

    The pretraining loop, optimizer (AdamW, betas 0.9/0.95), schedule, gradient clipping at 1 and NaN guard
    are reused; only the batches (:class:`ChatBatches`) and the loss (:func:`sft_loss`, response tokens
    only) change. ``pretrain_batches()`` may return an ``(inputs, targets)`` batch of plain text; its LM
    loss, weighted by ``pretrain_weight``, is added each step (mixing pretraining data back in against
    forgetting). ``history.loss`` is the SFT loss alone.
    """
    if steps < 1 or lr <= 0 or batch_size < 1:
        raise ValueError(f"need steps ≥ 1, lr > 0, batch_size ≥ 1; got {steps}, {lr}, {batch_size}")
    if normalization not in ("token", "sequence"):
        raise ValueError(f"normalization must be 'token' or 'sequence', got {normalization!r}")
    device = next(model.parameters()).device
    context = getattr(getattr(model, "config", None), "context_length", None)
    config = TrainConfig(
        batch_size=batch_size,
        context_length=context or 1,
        max_steps=steps,
        lr=lr,
        min_lr=lr if min_lr is None else min_lr,
        warmup_steps=warmup_steps,
        schedule=schedule,
        weight_decay=weight_decay,
        grad_clip=1.0,
        eval_interval=0,
        progress=progress,
    )
    mixing = pretrain_batches is not None and pretrain_weight > 0

    def loss_fn(net: nn.Module, batch: tuple[torch.Tensor, ...]):
        inputs, targets, mask = batch
        loss = sft_loss(net(inputs), targets, mask, normalization)
        if not mixing:
            return loss
        lm = lm_loss(net, tuple(t.to(device) for t in pretrain_batches()))
        return loss + pretrain_weight * lm, {"sft_loss": loss.item(), "pretrain_loss": lm.item()}

    batches = ChatBatches(examples, pad_id, batch_size, max_len=context, generator=generator)
    trainer = Trainer(model, config, device=device, batches=batches, loss_fn=loss_fn)
    records = trainer.run()
    model.eval()
    return SFTHistory(loss=[r.get("sft_loss", r["loss"]) for r in records], records=records)


def lm_validation_loss(model: nn.Module, token_ids: torch.Tensor, context: int, batch_size: int = 32) -> float:
    """The pretraining loss on held-out text after fine-tuning: :func:`minillm.train.loop.validation_loss` over
    every window of ``token_ids``. Fixed windows, so a before/after difference measures forgetting, not noise."""
    return validation_loss(model, token_ids, context, batch_size)
