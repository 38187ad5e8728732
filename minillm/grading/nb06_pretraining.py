"""Graders for notebook 06: random (x, y) windows, the training step with gradient accumulation, the window loss.

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.

The probes run on tiny float64 models defined here (a few dozen weights), so each grader takes milliseconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from minillm import optim
from minillm.batches import RandomWindows
from minillm.grading.core import Build, Mistake, Probe, grade
from minillm.train.loop import lm_loss, validation_loss

BUILDS = ("get_batch", "train_step", "evaluate_windows")

F64 = torch.float64
VOCAB = 11


def _stream(seed: int, length: int) -> np.ndarray:
    """A token stream as ``encode_documents`` returns it (1-D int64 NumPy array), from its own generator."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (length,), generator=g).numpy()


# ---------------------------------------------------------------------------------------------- get_batch
def _batch_case(seed: int, length: int, batch_size: int, context_length: int, what: str) -> Probe:
    """A stream whose ids are all different (every position identifiable); observe (inputs, targets)."""

    def run(get_batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.randperm(length, generator=torch.Generator().manual_seed(seed)).numpy()
        out = get_batch(ids, batch_size, context_length, torch.Generator().manual_seed(seed + 100))
        return tuple(out) if isinstance(out, list | tuple) else out

    return Probe(f"{what}: {length} tokens, batch_size {batch_size}, context_length {context_length}", run)


def _windows_by_unfold(ids, batch_size, context_length, generator, *, high=None, layout="right"):
    stream = torch.as_tensor(np.asarray(ids), dtype=torch.int64)
    n_starts = len(stream) - context_length if high is None else high
    starts = torch.randint(0, n_starts, (batch_size,), generator=generator)
    windows = stream.unfold(0, context_length + 1, 1)[starts]  # [B, T + 1]: every window of T + 1 tokens
    if layout == "same":
        return windows[:, :-1], windows[:, :-1]
    if layout == "swapped":
        return windows[:, 1:], windows[:, :-1]
    return windows[:, :-1], windows[:, 1:]


def _windows_reference(ids, batch_size, context_length, generator):
    return _windows_by_unfold(ids, batch_size, context_length, generator)


def _random_windows_batch(ids, batch_size, context_length, generator):
    """minillm's RandomWindows drawing one batch from the caller's generator (the build's interface)."""
    windows = RandomWindows(ids, batch_size, context_length)
    windows.generator = generator
    return windows.next_batch()


def _targets_not_shifted(ids, batch_size, context_length, generator):
    return _windows_by_unfold(ids, batch_size, context_length, generator, layout="same")


def _shifted_the_wrong_way(ids, batch_size, context_length, generator):
    return _windows_by_unfold(ids, batch_size, context_length, generator, layout="swapped")


def _last_start_never_drawn(ids, batch_size, context_length, generator):
    return _windows_by_unfold(ids, batch_size, context_length, generator, high=len(ids) - context_length - 1)


BATCH = Build(
    name="get_batch",
    what="random windows shifted by one",
    truth=_windows_reference,
    truth_name="Tensor.unfold's windows at the same torch.randint offsets",
    fallback=_random_windows_batch,
    fallback_name="minillm.batches.RandomWindows",
    probes=(
        _batch_case(0, 40, 4, 8, "a short stream"),
        _batch_case(1, 12, 6, 10, "a stream with room for only 2 windows"),
        _batch_case(2, 200, 3, 1, "windows of one token"),
    ),
    mistakes=(
        Mistake(
            "targets not shifted",
            "the target of position t is the NEXT token: inputs = window[:T], targets = window[1:].",
            _targets_not_shifted,
        ),
        Mistake(
            "targets shifted the wrong way",
            "the inputs are the window's first T tokens and the targets its last T (each one token later).",
            _shifted_the_wrong_way,
        ),
        Mistake(
            "the last window never drawn (offsets off by one)",
            "a window of T + 1 tokens can start anywhere from 0 to len(ids) − T − 1: torch.randint's high bound "
            "(exclusive) is len(ids) − T.",
            _last_start_never_drawn,
        ),
    ),
    rtol=0.0,
    atol=0.0,
    what_is_compared="batch",
)


def get_batch(learner: Any) -> Any:
    """Grade ``get_batch(ids, batch_size, context_length, generator) -> (inputs, targets)``, LongTensors [B, T]."""
    return grade(BATCH, learner)


# ------------------------------------------------------------------------------------------- tiny models
class _ProbeLM(nn.Module):
    """A tiny float64 next-token model: logits [B, T, VOCAB] from a causal running mean of embeddings.

    Its output depends on its mode — in training mode a fixed mask scales the hidden units, like a dropout that
    draws no random numbers — and it notes whether gradients were on in any forward pass.
    """

    def __init__(self, seed: int, width: int = 6) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.emb = nn.Parameter(torch.randn(VOCAB, width, generator=g, dtype=F64))
        self.mix = nn.Parameter(torch.randn(width, width, generator=g, dtype=F64) * 0.5)
        self.head = nn.Parameter(torch.randn(width, VOCAB, generator=g, dtype=F64) * 0.5)
        self.bias = nn.Parameter(torch.randn(VOCAB, generator=g, dtype=F64) * 0.1)
        self.register_buffer("mask", (torch.arange(width) % 2).to(F64) * 2.0)
        self.gradients_seen = False

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        self.gradients_seen |= torch.is_grad_enabled()
        h = self.emb[ids]
        positions = torch.arange(1, ids.shape[1] + 1, dtype=F64, device=ids.device)
        h = torch.tanh((h.cumsum(dim=1) / positions[:, None]) @ self.mix)  # sees positions ≤ t only
        if self.training:
            h = h * self.mask
        return h @ self.head + self.bias


def _weights(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).clone()


# --------------------------------------------------------------------------------------------- train_step
def _step_case(seed: int, optimizer: str, n_micro: int, rows: int, lrs: tuple, grad_clip: float, what: str) -> Probe:
    """``len(lrs)`` steps of ``n_micro`` micro-batches of ``rows`` windows each; observe the weights (and losses)."""

    def run(train_step: Any) -> Any:
        g = torch.Generator().manual_seed(seed)
        model = _ProbeLM(seed)
        if optimizer == "sgd":  # plain SGD: the step is the gradient itself, so its scale shows
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.9, 0.95), weight_decay=0.1)
        losses = []
        for lr in lrs:
            micro = []
            for _ in range(n_micro):
                window = torch.randint(0, VOCAB, (rows, 6), generator=g)
                micro.append((window[:, :-1], window[:, 1:]))
            losses.append(train_step(model, opt, micro, lr, grad_clip))
        if optimizer == "sgd":
            return _weights(model)
        return {"weights": _weights(model), "losses": losses}

    clip = "clipping at work" if grad_clip < 1 else "no clipping at work"
    return Probe(f"{what}: {len(lrs)} steps of {n_micro} micro-batches, {optimizer}, {clip}", run)


def _full_batch_step(model, optimizer, micro_batches, lr, grad_clip):
    """The reference: one loss over all the micro-batches' windows at once (equal-sized micro-batches)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    model.train()
    optimizer.zero_grad()
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.item()


def _library_step(model, optimizer, micro_batches, lr, grad_clip):
    """minillm's Trainer.train_step as a function of the build's interface (set_lr, lm_loss, clip_grad_norm)."""
    optim.set_lr(optimizer, lr)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for batch in micro_batches:
        loss = lm_loss(model, batch) / len(micro_batches)
        loss.backward()
        total += loss.item()
    optim.clip_grad_norm(model.parameters(), grad_clip)
    optimizer.step()
    return total


def _accumulating_step(
    model,
    optimizer,
    micro_batches,
    lr,
    grad_clip,
    *,
    divide=True,
    zero="before",
    set_lr=True,
    clip="after",
    returned="mean",
):
    """The step with accumulation, each switch one way learners write it wrong."""
    if set_lr:
        for group in optimizer.param_groups:
            group["lr"] = lr
    model.train()
    if zero == "before":
        optimizer.zero_grad()
    k = len(micro_batches)
    losses = []
    for inputs, targets in micro_batches:
        if zero == "inside":
            optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        (loss / k if divide else loss).backward()
        losses.append(loss.item())
        if clip == "each":
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    if clip == "after":
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    if clip == "after step":
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    return losses[-1] if returned == "last" else sum(losses) / k


def _not_divided(*args):
    return _accumulating_step(*args, divide=False)


def _zero_grad_inside(*args):
    return _accumulating_step(*args, zero="inside")


def _zero_grad_forgotten(*args):
    return _accumulating_step(*args, zero="never")


def _lr_not_set(*args):
    return _accumulating_step(*args, set_lr=False)


def _clip_each_micro_batch(*args):
    return _accumulating_step(*args, clip="each")


def _clip_after_step(*args):
    return _accumulating_step(*args, clip="after step")


def _last_loss_returned(*args):
    return _accumulating_step(*args, returned="last")


STEP = Build(
    name="train_step",
    what="the training step with gradient accumulation",
    truth=_full_batch_step,
    truth_name="one full-batch step: F.cross_entropy over all windows, clip_grad_norm_, the optimizer",
    fallback=_library_step,
    fallback_name="minillm's Trainer step (set_lr, lm_loss, clip_grad_norm)",
    probes=(
        _step_case(0, "sgd", 3, 2, (0.5, 0.3), 1e6, "a tiny model"),
        _step_case(1, "sgd", 2, 3, (0.5, 0.5), 0.05, "a tiny model"),
        _step_case(2, "adamw", 4, 2, (0.02, 0.01, 0.005), 0.1, "a tiny model"),
    ),
    mistakes=(
        Mistake(
            "the loss not divided by the number of micro-batches",
            "backward() adds up gradients: divide each micro-batch's loss by len(micro_batches) so the sum is the "
            "gradient of the mean loss.",
            _not_divided,
        ),
        Mistake(
            "zero_grad inside the accumulation loop",
            "zero the gradients once per step, before the loop; inside it each micro-batch wipes out the ones before.",
            _zero_grad_inside,
        ),
        Mistake(
            "zero_grad forgotten",
            "without optimizer.zero_grad() every step also adds the gradients of all the steps before it.",
            _zero_grad_forgotten,
        ),
        Mistake(
            "the learning rate not set",
            "set group['lr'] = lr on every one of optimizer.param_groups before the step.",
            _lr_not_set,
        ),
        Mistake(
            "clipping each micro-batch",
            "clip once, after the loop: the global norm is that of the accumulated gradient.",
            _clip_each_micro_batch,
        ),
        Mistake(
            "clipping after the optimizer step",
            "clip between the last backward() and optimizer.step(): the step must use the clipped gradient.",
            _clip_after_step,
        ),
        Mistake(
            "the last micro-batch's loss returned",
            "return the mean of all the micro-batches' losses, the loss of the whole step.",
            _last_loss_returned,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="state after the steps",
)


def train_step(learner: Any) -> Any:
    """Grade ``train_step(model, optimizer, micro_batches, lr, grad_clip) -> float`` (the step's mean loss)."""
    return grade(STEP, learner)


# --------------------------------------------------------------------------------------- evaluate_windows
GRADIENTS_KEY, MODE_KEY = "gradients on in a forward pass", "mode afterwards"


def _evaluate_case(
    seed: int, length: int, context_length: int, batch_size: int, max_batches: int | None, training: bool, what: str
) -> Probe:
    def run(evaluate: Any) -> dict:
        model = _ProbeLM(seed)
        model.train(training)
        loss = evaluate(model, _stream(seed, length), context_length, batch_size, max_batches)
        return {
            "loss": loss,
            GRADIENTS_KEY: model.gradients_seen,
            MODE_KEY: "train" if model.training else "eval",
        }

    n = (length - 1) // context_length
    shown = f"{n} windows of {context_length}, batch_size {batch_size}, max_batches {max_batches}"
    return Probe(f"{what} ({shown}, the model in {'train' if training else 'eval'} mode)", run)


def _all_windows_at_once(model, ids, context_length, batch_size, max_batches=None):
    """The reference: every window in one float64 forward pass, one mean over all their target tokens."""
    stream = torch.as_tensor(np.asarray(ids), dtype=torch.int64)
    windows = stream.unfold(0, context_length + 1, context_length)  # starts 0, T, 2T, …: [n, T + 1]
    if max_batches is not None:
        windows = windows[: max_batches * batch_size]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(windows[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten()).item()
    model.train(was_training)
    return loss


def _window_loss(
    model,
    ids,
    context_length,
    batch_size,
    max_batches,
    *,
    stride=None,
    keep_partial=True,
    mean="tokens",
    eval_mode=True,
    no_grad=True,
    restore=True,
):
    """The batched window loss, each switch one way learners write it wrong."""
    stream = torch.as_tensor(np.asarray(ids), dtype=torch.int64)
    stride = stride or context_length
    n = (len(stream) - context_length - 1) // stride + 1
    if max_batches is not None:
        n = min(n, max_batches * batch_size)
    was_training = model.training
    if eval_mode:
        model.eval()
    sums, counts, means = 0.0, 0, []
    with torch.set_grad_enabled(not no_grad):
        for first in range(0, n, batch_size):
            starts = range(first, min(first + batch_size, n))
            if len(starts) < batch_size and not keep_partial:
                break
            windows = torch.stack([stream[s * stride : s * stride + context_length + 1] for s in starts])
            losses = F.cross_entropy(model(windows[:, :-1]).flatten(0, 1), windows[:, 1:].flatten(), reduction="none")
            sums += losses.sum().item()
            counts += losses.numel()
            means.append(losses.mean().item())
    if restore:
        model.train(was_training)
    return sum(means) / len(means) if mean == "batches" else sums / counts


def _mean_of_batch_means(*args):
    return _window_loss(*args, mean="batches")


def _partial_batch_dropped(*args):
    return _window_loss(*args, keep_partial=False)


def _stride_t_plus_one(model, ids, context_length, batch_size, max_batches):
    return _window_loss(model, ids, context_length, batch_size, max_batches, stride=context_length + 1)


def _train_mode(*args):
    return _window_loss(*args, eval_mode=False)


def _with_gradients(*args):
    return _window_loss(*args, no_grad=False)


def _mode_not_restored(*args):
    return _window_loss(*args, restore=False)


EVALUATE = Build(
    name="evaluate_windows",
    what="the loss over fixed validation windows",
    truth=_all_windows_at_once,
    truth_name="every window in one float64 forward pass (Tensor.unfold, F.cross_entropy)",
    fallback=validation_loss,
    fallback_name="minillm.train.loop.validation_loss",
    probes=(
        _evaluate_case(0, 39, 5, 3, None, True, "a stream whose last batch is partial"),
        _evaluate_case(1, 60, 4, 2, 2, True, "only the first max_batches batches"),
        _evaluate_case(2, 31, 6, 5, 3, False, "a stream of exactly 5 windows"),
    ),
    mistakes=(
        Mistake(
            "the mean of the batch means",
            "add up the loss of every target token (reduction='sum') and divide by their count: a partial last batch "
            "must not weigh as much as a full one.",
            _mean_of_batch_means,
        ),
        Mistake(
            "the last, partial batch dropped",
            "keep the windows of the last batch even when there are fewer than batch_size of them.",
            _partial_batch_dropped,
        ),
        Mistake(
            "windows every T + 1 tokens",
            "window k starts at k·T: its last token, a target, is the first input of window k + 1, so every token "
            "but the first is predicted exactly once.",
            _stride_t_plus_one,
        ),
        Mistake(
            "evaluation in train mode",
            "call model.eval() before the forward passes: dropout (and anything else that acts only in training) "
            "must be off.",
            _train_mode,
        ),
        Mistake(
            "evaluation with gradients on",
            "run the forward passes under torch.no_grad(): evaluation needs no graph, and building one costs memory.",
            _with_gradients,
        ),
        Mistake(
            "the model left in eval mode",
            "remember model.training before model.eval() and restore it at the end: model.train(was_training).",
            _mode_not_restored,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="evaluation",
)


def evaluate_windows(learner: Any) -> Any:
    """Grade ``evaluate_windows(model, ids, context_length, batch_size, max_batches=None) -> float``."""
    return grade(EVALUATE, learner)
