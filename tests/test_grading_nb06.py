"""Notebook 06's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong shape or NaN get a clear line."""

from __future__ import annotations

import math

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


# ------------------------------------------------------------------- Exercise 1: compute-optimal tokens, epochs
def chinchilla_run(n_params, corpus_tokens, tokens_per_param=20):
    """A learner's answer: the tokens of a compute-optimal run and how many times that reads the corpus."""
    needed = n_params * tokens_per_param
    return needed, needed / corpus_tokens


def epochs_upside_down(n_params, corpus_tokens, tokens_per_param=20):
    needed = n_params * tokens_per_param
    return needed, corpus_tokens / needed


def parameters_per_token(n_params, corpus_tokens, tokens_per_param=20):
    needed = n_params / tokens_per_param
    return needed, needed / corpus_tokens


def whole_passes(n_params, corpus_tokens, tokens_per_param=20):
    needed = n_params * tokens_per_param
    return needed, needed // corpus_tokens


def twenty_written_in(n_params, corpus_tokens, tokens_per_param=20):
    return chinchilla_run(n_params, corpus_tokens)


def test_compute_optimal_epochs_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb06.compute_optimal_epochs, nb06.OPTIMAL_EPOCHS.truth, capsys)
    assert_passes(nb06.compute_optimal_epochs, chinchilla_run, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (epochs_upside_down, "the epochs upside down (corpus ÷ tokens)"),
        (parameters_per_token, "20 parameters per token, not 20 tokens per parameter"),
        (whole_passes, "the epochs rounded down to whole passes"),
        (twenty_written_in, "tokens_per_param ignored (20 written in)"),
    ],
)
def test_compute_optimal_epochs_names_the_mistake(wrong, name, capsys):
    fallback = nb06.OPTIMAL_EPOCHS.fallback
    assert_fails(nb06.compute_optimal_epochs, wrong, capsys, says=f"Looks like {name}", fallback=fallback)


def test_compute_optimal_epochs_stub_raising_wrong_type_and_nan(capsys):
    grader = nb06.compute_optimal_epochs
    assert_fails(grader, stub("compute_optimal_epochs"), capsys, says="compute_optimal_epochs is not written yet")
    assert_fails(grader, lambda n, corpus, per=20: n / (corpus - corpus), capsys, says="raised ZeroDivisionError")
    assert_fails(grader, lambda n, corpus, per=20: per * n / corpus, capsys, says="returned a float, expected a tuple")
    assert_fails(grader, lambda n, corpus, per=20: (per * n, math.nan), capsys, says="returned NaN")


def test_compute_optimal_epochs_fallback_answers_the_exercise():
    tokens, epochs = nb06.OPTIMAL_EPOCHS.fallback(nb06.BASE_PARAMETERS, nb06.CORPUS_TOKENS)
    assert tokens == 21_765_120 and 16 < epochs < 20  # far past the ~16 epochs where repeats stop paying


# ------------------------------------------------------ Exercise 2: greedy decoding that sees only the last tokens
class SeeingLast:
    """A learner's decoding loop that feeds the model only its last `window` tokens, with switches for mistakes."""

    view, read_at, divide, with_prompt = "tail", -1, True, True

    def __call__(self, model, ids, window, n, temperature=0.0, generator=None):
        out = [int(t) for t in ids]
        device = next(model.parameters()).device
        for _ in range(n):
            if self.view == "tail":
                context = out[len(out) - window :] if len(out) > window else out
            elif self.view == "head":
                context = out[:window]
            else:  # one token too many
                context = out[max(0, len(out) - window - 1) :]
            with torch.no_grad():
                scores = model(torch.tensor(context, device=device).unsqueeze(0))[0, self.read_at]
            if temperature == 0:
                out.append(scores.argmax().item())
            else:
                scaled = scores / temperature if self.divide else scores * temperature
                out.append(torch.multinomial(F.softmax(scaled, -1), 1, generator=generator).item())
        return out if self.with_prompt else out[len(ids) :]


def test_decode_seeing_last_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb06.decode_seeing_last, nb06.SEEING_LAST.truth, capsys)
    assert_passes(nb06.decode_seeing_last, SeeingLast(), capsys)


@pytest.mark.parametrize(
    ("switches", "name"),
    [
        ({"view": "head"}, "the first window tokens, not the last"),
        ({"view": "one more"}, "window + 1 tokens seen (off by one)"),
        ({"read_at": 0}, "the next token read from the first position's logits"),
        ({"divide": False}, "the logits multiplied by the temperature, not divided"),
        ({"with_prompt": False}, "the prompt left out of the returned ids"),
    ],
)
def test_decode_seeing_last_names_the_mistake(switches, name, capsys):
    wrong = type("Variant", (SeeingLast,), switches)()
    fallback = nb06.SEEING_LAST.fallback
    assert_fails(nb06.decode_seeing_last, wrong, capsys, says=f"Looks like {name}", fallback=fallback)


def test_decode_seeing_last_stub_raising_and_wrong_type(capsys):
    grader = nb06.decode_seeing_last
    assert_fails(grader, stub("decode_seeing_last"), capsys, says="decode_seeing_last is not written yet")

    def whole_text_at_once(model, ids, window, n, temperature=0.0, generator=None):
        return model(torch.tensor(ids))  # a 1-D tensor: no batch dimension

    assert_fails(grader, whole_text_at_once, capsys, says="raised")

    def as_a_tensor(model, ids, window, n, temperature=0.0, generator=None):
        return torch.tensor(SeeingLast()(model, ids, window, n, temperature, generator))

    assert_fails(grader, as_a_tensor, capsys, says="returned a Tensor, expected a list")


def test_decode_seeing_last_fallback_decodes_a_model_with_learned_positions():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=30, context_length=16, n_layer=1, n_head=2, d_model=16)).eval()
    assert model.config.pos == "learned"  # like the base model: its position table is cut to the window
    prompt = [1, 2, 3, 4, 5, 6]
    assert nb06.SEEING_LAST.fallback(model, prompt, 4, 20) == SeeingLast()(model, prompt, 4, 20)
    sampled = nb06.SEEING_LAST.fallback(model, prompt, 4, 20, 1.0, torch.Generator().manual_seed(0))
    assert sampled == SeeingLast()(model, prompt, 4, 20, 1.0, torch.Generator().manual_seed(0))
