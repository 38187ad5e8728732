"""Notebook 06's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong shape or NaN get a clear line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from grading_helpers import assert_fails, assert_passes, stub

from minillm.batches import RandomWindows
from minillm.grading import nb06_pretraining as nb06
from minillm.model import GPT, GPTConfig
from minillm.train import TrainConfig, Trainer
from minillm.train.loop import validation_loss


# -------------------------------------------------------------------------------------------- get_batch
def batch_correct(ids, batch_size, context_length, generator):
    starts = torch.randint(0, len(ids) - context_length, (batch_size,), generator=generator).numpy()
    rows = np.stack([ids[s : s + context_length + 1] for s in starts])
    return torch.from_numpy(rows[:, :-1].copy()), torch.from_numpy(rows[:, 1:].copy())


def batch_same_targets(ids, batch_size, context_length, generator):
    starts = torch.randint(0, len(ids) - context_length, (batch_size,), generator=generator)
    x = torch.stack([torch.as_tensor(ids[s : s + context_length]) for s in starts])
    return x, x.clone()


def batch_backwards(ids, batch_size, context_length, generator):
    starts = torch.randint(0, len(ids) - context_length, (batch_size,), generator=generator)
    x = torch.stack([torch.as_tensor(ids[s + 1 : s + context_length + 1]) for s in starts])
    y = torch.stack([torch.as_tensor(ids[s : s + context_length]) for s in starts])
    return x, y


def batch_high_too_low(ids, batch_size, context_length, generator):
    starts = torch.randint(0, len(ids) - context_length - 1, (batch_size,), generator=generator)
    x = torch.stack([torch.as_tensor(ids[s : s + context_length]) for s in starts])
    y = torch.stack([torch.as_tensor(ids[s + 1 : s + context_length + 1]) for s in starts])
    return x, y


def test_get_batch_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb06.get_batch, nb06.BATCH.truth, capsys)
    assert_passes(nb06.get_batch, batch_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (batch_same_targets, "targets not shifted"),
        (batch_backwards, "targets shifted the wrong way"),
        (batch_high_too_low, "the last window never drawn (offsets off by one)"),
    ],
)
def test_get_batch_names_the_mistake(wrong, name, capsys):
    assert_fails(nb06.get_batch, wrong, capsys, says=f"Looks like {name}")


def test_get_batch_stub_raising_shape_and_dtype(capsys):
    assert_fails(
        nb06.get_batch, stub("get_batch"), capsys, says="get_batch is not written yet", fallback=nb06.BATCH.fallback
    )
    assert_fails(nb06.get_batch, lambda ids, b, t, g: ids[len(ids) + b], capsys, says="raised IndexError")

    def whole_windows(ids, batch_size, context_length, generator):
        x, y = batch_correct(ids, batch_size, context_length, generator)
        return torch.cat([x, y[:, -1:]], dim=1), y  # the inputs are the whole T + 1 window

    assert_fails(nb06.get_batch, whole_windows, capsys, says="returned shape")

    def int32(ids, batch_size, context_length, generator):
        return tuple(t.int() for t in batch_correct(ids, batch_size, context_length, generator))

    assert_fails(nb06.get_batch, int32, capsys, says="returned dtype torch.int32")


def test_get_batch_fallback_draws_what_random_windows_draws(capsys):
    assert_fails(nb06.get_batch, batch_same_targets, capsys, says="targets not shifted", fallback=nb06.BATCH.fallback)
    ids = np.arange(500, dtype=np.int64) * 3
    x, y = nb06.BATCH.fallback(ids, 4, 16, torch.Generator().manual_seed(0))
    want = RandomWindows(ids, batch_size=4, context_length=16, seed=0).next_batch()
    assert torch.equal(x, want[0]) and torch.equal(y, want[1])
    assert x.shape == (4, 16) and x.dtype == torch.int64


# ------------------------------------------------------------------------------------------- train_step
def step_correct(model, optimizer, micro_batches, lr, grad_clip):
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for x, y in micro_batches:
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        (loss / len(micro_batches)).backward()
        losses.append(loss.item())
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return sum(losses) / len(losses)


def _loss(model, x, y):
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


def step_not_divided(model, optimizer, micro_batches, lr, grad_clip):
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        loss = _loss(model, x, y)
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return total / len(micro_batches)


def step_zero_grad_in_loop(model, optimizer, micro_batches, lr, grad_clip):
    for group in optimizer.param_groups:
        group["lr"] = lr
    total = 0.0
    for x, y in micro_batches:
        optimizer.zero_grad()
        loss = _loss(model, x, y) / len(micro_batches)
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return total


def step_never_zeroed(model, optimizer, micro_batches, lr, grad_clip):
    for group in optimizer.param_groups:
        group["lr"] = lr
    total = 0.0
    for x, y in micro_batches:
        loss = _loss(model, x, y) / len(micro_batches)
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return total


def step_lr_ignored(model, optimizer, micro_batches, lr, grad_clip):
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        loss = _loss(model, x, y) / len(micro_batches)
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return total


def step_clip_in_loop(model, optimizer, micro_batches, lr, grad_clip):
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        loss = _loss(model, x, y) / len(micro_batches)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        total += loss.item()
    optimizer.step()
    return total


def step_clip_too_late(model, optimizer, micro_batches, lr, grad_clip):
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        loss = _loss(model, x, y) / len(micro_batches)
        loss.backward()
        total += loss.item()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    return total


def step_returns_last_loss(model, optimizer, micro_batches, lr, grad_clip):
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss = _loss(model, x, y)
        (loss / len(micro_batches)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.item()


def test_train_step_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb06.train_step, nb06.STEP.truth, capsys)
    assert_passes(nb06.train_step, step_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (step_not_divided, "the loss not divided by the number of micro-batches"),
        (step_zero_grad_in_loop, "zero_grad inside the accumulation loop"),
        (step_never_zeroed, "zero_grad forgotten"),
        (step_lr_ignored, "the learning rate not set"),
        (step_clip_in_loop, "clipping each micro-batch"),
        (step_clip_too_late, "clipping after the optimizer step"),
        (step_returns_last_loss, "the last micro-batch's loss returned"),
    ],
)
def test_train_step_names_the_mistake(wrong, name, capsys):
    assert_fails(nb06.train_step, wrong, capsys, says=f"Looks like {name}")


def test_train_step_stub_raising_and_nan(capsys):
    assert_fails(nb06.train_step, stub("train_step"), capsys, says="train_step is not written yet")
    assert_fails(nb06.train_step, lambda *args: args[0].no_such_method(), capsys, says="raised AttributeError")

    def nan_loss(model, optimizer, micro_batches, lr, grad_clip):
        step_correct(model, optimizer, micro_batches, lr, grad_clip)
        return float("nan")  # e.g. a 0/0 in the average

    assert_fails(nb06.train_step, nan_loss, capsys, says="returned NaN")

    def nan_weights(model, optimizer, micro_batches, lr, grad_clip):
        loss = step_correct(model, optimizer, micro_batches, lr, grad_clip)
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))
        return loss

    assert_fails(nb06.train_step, nan_weights, capsys, says="returned NaN")


def _tiny_gpt(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(
        GPTConfig.preset("gpt2-style", vocab_size=40, context_length=8, n_layer=1, n_head=2, d_model=16)
    ).double()


def test_train_step_fallback_takes_the_trainers_steps(capsys):
    """The notebook replays Trainer's steps with what the grader hands back: minillm's step must do the same."""
    assert_fails(nb06.train_step, step_not_divided, capsys, says="not divided", fallback=nb06.STEP.fallback)
    ids = np.random.default_rng(0).integers(0, 40, 400)
    config = TrainConfig(
        n_layer=1, n_head=2, d_model=16, context_length=8, batch_size=4, grad_accum=2, max_steps=3, lr=3e-3,
        min_lr=3e-4, warmup_steps=1, grad_clip=0.5, eval_interval=0, progress=False, seed=1,
    )  # fmt: skip
    trainer = Trainer(_tiny_gpt(), config, ids)
    trainer.run()
    mine = _tiny_gpt()
    decay = [p for n, p in mine.named_parameters() if p.dim() == 2 and "emb" not in n]
    rest = [p for n, p in mine.named_parameters() if not (p.dim() == 2 and "emb" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], betas=(0.9, 0.95)
    )
    windows = RandomWindows(ids, 4, 8, seed=1)
    losses = [
        nb06.STEP.fallback(mine, opt, [windows.next_batch(), windows.next_batch()], trainer.schedule(s), 0.5)
        for s in range(3)
    ]
    assert isinstance(losses[0], float)
    assert max(abs(a - r["loss"]) for a, r in zip(losses, trainer.history, strict=True)) < 1e-10
    gap = max(
        (p - q).abs().max().item() for p, q in zip(mine.parameters(), trainer.raw_model.parameters(), strict=True)
    )
    assert gap < 1e-10


# ------------------------------------------------------------------------------------- evaluate_windows
def evaluate_correct(model, ids, context_length, batch_size, max_batches=None):
    n = (len(ids) - 1) // context_length
    if max_batches is not None:
        n = min(n, batch_size * max_batches)
    mode = model.training
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for first in range(0, n, batch_size):
            rows = [
                ids[k * context_length : (k + 1) * context_length + 1] for k in range(first, min(n, first + batch_size))
            ]
            w = torch.as_tensor(np.stack(rows))
            total += F.cross_entropy(model(w[:, :-1]).flatten(0, 1), w[:, 1:].flatten(), reduction="sum").item()
            tokens += w[:, 1:].numel()
    model.train(mode)
    return total / tokens


def _batches(ids, context_length, batch_size, max_batches, stride=None):
    stride = stride or context_length
    n = (len(ids) - context_length - 1) // stride + 1
    if max_batches is not None:
        n = min(n, batch_size * max_batches)
    starts = [k * stride for k in range(n)]
    for first in range(0, n, batch_size):
        w = torch.as_tensor(np.stack([ids[s : s + context_length + 1] for s in starts[first : first + batch_size]]))
        yield w[:, :-1], w[:, 1:]


def evaluate_batch_means(model, ids, context_length, batch_size, max_batches=None):
    mode = model.training
    model.eval()
    with torch.no_grad():
        means = [
            F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
            for x, y in _batches(ids, context_length, batch_size, max_batches)
        ]
    model.train(mode)
    return sum(means) / len(means)


def evaluate_full_batches_only(model, ids, context_length, batch_size, max_batches=None):
    mode = model.training
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for x, y in _batches(ids, context_length, batch_size, max_batches):
            if len(x) < batch_size:
                continue
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            tokens += y.numel()
    model.train(mode)
    return total / tokens


def evaluate_stride_t_plus_one(model, ids, context_length, batch_size, max_batches=None):
    mode = model.training
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for x, y in _batches(ids, context_length, batch_size, max_batches, stride=context_length + 1):
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            tokens += y.numel()
    model.train(mode)
    return total / tokens


def evaluate_in_train_mode(model, ids, context_length, batch_size, max_batches=None):
    total, tokens = 0.0, 0
    with torch.no_grad():
        for x, y in _batches(ids, context_length, batch_size, max_batches):
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            tokens += y.numel()
    return total / tokens


def evaluate_with_grad(model, ids, context_length, batch_size, max_batches=None):
    mode = model.training
    model.eval()
    total, tokens = 0.0, 0
    for x, y in _batches(ids, context_length, batch_size, max_batches):
        total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
        tokens += y.numel()
    model.train(mode)
    return total / tokens


def evaluate_leaves_eval_mode(model, ids, context_length, batch_size, max_batches=None):
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for x, y in _batches(ids, context_length, batch_size, max_batches):
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            tokens += y.numel()
    return total / tokens


def test_evaluate_reference_library_and_a_learners_version_pass(capsys):
    assert_passes(nb06.evaluate_windows, nb06.EVALUATE.truth, capsys)
    assert_passes(nb06.evaluate_windows, validation_loss, capsys)
    assert_passes(nb06.evaluate_windows, evaluate_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (evaluate_batch_means, "the mean of the batch means"),
        (evaluate_full_batches_only, "the last, partial batch dropped"),
        (evaluate_stride_t_plus_one, "windows every T + 1 tokens"),
        (evaluate_in_train_mode, "evaluation in train mode"),
        (evaluate_with_grad, "evaluation with gradients on"),
        (evaluate_leaves_eval_mode, "the model left in eval mode"),
    ],
)
def test_evaluate_names_the_mistake(wrong, name, capsys):
    assert_fails(nb06.evaluate_windows, wrong, capsys, says=f"Looks like {name}")


def test_evaluate_stub_raising_nan_and_wrong_type(capsys):
    assert_fails(
        nb06.evaluate_windows,
        stub("evaluate_windows"),
        capsys,
        says="evaluate_windows is not written yet",
        fallback=validation_loss,
    )
    assert_fails(nb06.evaluate_windows, lambda model, ids, t, b, m=None: 1 / 0, capsys, says="raised ZeroDivisionError")

    def empty_mean(model, ids, context_length, batch_size, max_batches=None):
        return torch.tensor([]).mean().item()  # a mean over no tokens: NaN

    assert_fails(nb06.evaluate_windows, empty_mean, capsys, says="returned NaN")

    def per_token_losses(model, ids, context_length, batch_size, max_batches=None):
        return [evaluate_correct(model, ids, context_length, batch_size, max_batches)]

    assert_fails(nb06.evaluate_windows, per_token_losses, capsys, says="expected a number")


def test_evaluate_fallback_measures_what_the_notebook_compares(capsys):
    assert_fails(nb06.evaluate_windows, evaluate_with_grad, capsys, says="gradients on", fallback=validation_loss)
    model = _tiny_gpt()
    ids = np.random.default_rng(1).integers(0, 40, 300)
    got = nb06.EVALUATE.fallback(model, ids, 8, 5, max_batches=2)  # the notebook's call: positional, max_batches=
    assert abs(got - evaluate_correct(model, ids, 8, 5, 2)) < 1e-12
    assert model.training  # the mode it found
