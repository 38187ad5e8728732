"""Graders for notebook 06: random (x, y) windows, the training step with gradient accumulation, the window loss,
and the answers to Exercise 1 (a compute-optimal run's tokens and its epochs over the corpus) and Exercise 2
(greedy decoding that sees only the last few tokens).

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.

The probes run on tiny float64 models defined here (a few dozen weights), so each grader takes milliseconds.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from minillm import optim
from minillm.batches import RandomWindows
from minillm.grading.core import Build, Mistake, Probe, grade
from minillm.model import GPT, GPTConfig
from minillm.train.loop import lm_loss, validation_loss

BUILDS = ("get_batch", "train_step", "evaluate_windows", "compute_optimal_epochs", "decode_seeing_last")  # + Ex. 1, 2

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


# ------------------------------------------------------------------- Exercise 1: compute-optimal tokens, epochs
# The exercise's own numbers: the base model's parameters and the training corpus's tokens (data/base/config.json).
BASE_PARAMETERS, CORPUS_TOKENS = 1_088_256, 1_120_363


def _optimal_exact(n_params, corpus_tokens, tokens_per_param=20):
    """(tokens_per_param · N, that / corpus_tokens) in exact rational arithmetic, the epochs rounded once at the end."""
    tokens = Fraction(tokens_per_param) * n_params
    return int(tokens) if tokens.denominator == 1 else float(tokens), float(tokens / corpus_tokens)


def _optimal_plain(n_params, corpus_tokens, tokens_per_param=20):
    tokens = tokens_per_param * n_params
    return tokens, tokens / corpus_tokens


def _optimal_upside_down(n_params, corpus_tokens, tokens_per_param=20):
    tokens = tokens_per_param * n_params
    return tokens, corpus_tokens / tokens


def _optimal_parameters_per_token(n_params, corpus_tokens, tokens_per_param=20):
    tokens = n_params / tokens_per_param
    return tokens, tokens / corpus_tokens


def _optimal_whole_epochs(n_params, corpus_tokens, tokens_per_param=20):
    tokens = tokens_per_param * n_params
    return tokens, float(tokens // corpus_tokens)


def _optimal_twenty_written_in(n_params, corpus_tokens, tokens_per_param=20):
    tokens = 20 * n_params
    return tokens, tokens / corpus_tokens


def _optimal_case(n_params: int, corpus_tokens: int, what: str, **kwargs: Any) -> Probe:
    def run(implementation: Any):
        return implementation(n_params, corpus_tokens, **kwargs)

    return Probe(f"{what}: N = {n_params:,}, a corpus of {corpus_tokens:,} tokens", run)


OPTIMAL_EPOCHS = Build(
    name="compute_optimal_epochs",
    what="the compute-optimal tokens and epochs",
    truth=_optimal_exact,
    truth_name="20·N and its ratio to the corpus in exact fractions",
    fallback=_optimal_plain,
    fallback_name="the course's answer (20·N tokens, 20·N / corpus epochs)",
    probes=(
        _optimal_case(BASE_PARAMETERS, CORPUS_TOKENS, "the base model and the course's corpus"),
        _optimal_case(124_439_808, 9_035_582_489, "GPT-2 small on OpenWebText"),
        _optimal_case(50_000, 3_000_000, "100 tokens per parameter", tokens_per_param=100),
    ),
    mistakes=(
        Mistake(
            "the epochs upside down (corpus ÷ tokens)",
            "epochs = the tokens the run needs ÷ the tokens one pass over the corpus gives.",
            _optimal_upside_down,
        ),
        Mistake(
            "20 parameters per token, not 20 tokens per parameter",
            "a compute-optimal run trains on about 20 tokens for every parameter: tokens = 20·N.",
            _optimal_parameters_per_token,
        ),
        Mistake(
            "the epochs rounded down to whole passes",
            "the answer is a ratio, not a count of finished passes: divide with /, not //.",
            _optimal_whole_epochs,
        ),
        Mistake(
            "tokens_per_param ignored (20 written in)",
            "use the tokens_per_param argument: 20 is only its default.",
            _optimal_twenty_written_in,
        ),
    ),
    rtol=1e-12,
    atol=1e-12,
    what_is_compared="(tokens, epochs)",
)


def compute_optimal_epochs(learner: Any) -> Any:
    """Grade ``compute_optimal_epochs(n_params, corpus_tokens, tokens_per_param=20)`` → ``(tokens, epochs)``."""
    return grade(OPTIMAL_EPOCHS, learner)


# ------------------------------------------------------ Exercise 2: greedy decoding that sees only the last tokens
DECODER_VOCAB = 23


def _decoder(context_length: int, seed: int) -> GPT:
    """A tiny float32 GPT with RoPE and random weights from its own generator (``generate`` samples in float32)."""
    config = GPTConfig(
        vocab_size=DECODER_VOCAB, context_length=context_length, n_layer=1, n_head=2, d_model=16, pos="rope", bias=False
    )
    with torch.random.fork_rng(devices=[]):  # the constructor's initialisation draws from the global stream
        model = GPT(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(2.0 * noise if p.dim() > 1 else 1 + 0.1 * noise)
    return model.eval()


def _seeing_last_library(model, ids, window, n, temperature=0.0, generator=None):
    """GPT.generate(crop=True) with the same weights in a model whose context is exactly ``window`` tokens."""
    with torch.random.fork_rng(devices=[]):
        narrow = GPT(dataclasses.replace(model.config, context_length=window))
    own = narrow.state_dict()  # a learned position table keeps its first `window` rows
    weights = {
        key: value.detach().cpu()[tuple(slice(0, size) for size in own[key].shape)]
        for key, value in model.state_dict().items()
    }
    narrow.load_state_dict(weights)
    narrow.eval()
    prompt = torch.tensor([list(ids)])
    return narrow.generate(prompt, n, temperature=temperature, crop=True, generator=generator)[0].tolist()


def _seeing_last_variant(*, context="last", position=-1, divide=True, keep_prompt=True):
    """The solution's decoding loop with one thing written wrong."""

    def decode(model, ids, window, n, temperature=0.0, generator=None):
        ids, prompt_length = list(ids), len(ids)
        device = next(model.parameters()).device
        with torch.no_grad():
            for _ in range(n):
                seen = {"last": ids[-window:], "first": ids[:window], "one more": ids[-window - 1 :]}[context]
                logits = model(torch.tensor([seen], device=device))[0, position]
                if temperature == 0:
                    ids.append(int(logits.argmax()))
                else:
                    scaled = logits / temperature if divide else logits * temperature
                    probs = torch.softmax(scaled, dim=-1)
                    ids.append(int(torch.multinomial(probs, 1, generator=generator)))
        return ids if keep_prompt else ids[prompt_length:]

    return decode


def _decode_case(seed: int, window: int, prompt: list[int], n: int, temperature: float, what: str) -> Probe:
    def run(implementation: Any):
        model = _decoder(window + 4, seed)
        generator = torch.Generator().manual_seed(seed) if temperature else None
        return implementation(model, prompt, window, n, temperature, generator)

    how = "greedy" if temperature == 0 else f"sampled at T = {temperature}"
    return Probe(f"{what}: a tiny GPT seeing {window} tokens, {n} tokens {how}", run)


SEEING_LAST = Build(
    name="decode_seeing_last",
    what="decoding that sees only the last window tokens",
    truth=_seeing_last_library,
    truth_name="GPT.generate(crop=True) with a context of window tokens",
    fallback=_seeing_last_library,
    fallback_name="GPT.generate(crop=True) with a context of window tokens",
    probes=(
        _decode_case(71, 4, [1, 2, 3, 4], 12, 0.0, "a 4-token prompt"),
        _decode_case(72, 3, [5, 6, 7, 8, 9, 10, 11], 10, 0.0, "a prompt longer than the window"),
        _decode_case(73, 4, [3, 1, 4, 1, 5], 10, 1.5, "sampling"),
    ),
    mistakes=(
        Mistake(
            "the first window tokens, not the last",
            "the model sees the end of the text: ids[-window:], not ids[:window].",
            _seeing_last_variant(context="first"),
        ),
        Mistake(
            "window + 1 tokens seen (off by one)",
            "ids[-window:] holds exactly window tokens.",
            _seeing_last_variant(context="one more"),
        ),
        Mistake(
            "the next token read from the first position's logits",
            "the prediction for the next token is at the last position: logits[0, -1].",
            _seeing_last_variant(position=0),
        ),
        Mistake(
            "the logits multiplied by the temperature, not divided",
            "softmax(logits / T): T > 1 flattens the distribution, T < 1 sharpens it.",
            _seeing_last_variant(divide=False),
        ),
        Mistake(
            "the prompt left out of the returned ids",
            "return the whole sequence, prompt first, then the n new tokens.",
            _seeing_last_variant(keep_prompt=False),
        ),
    ),
    what_is_compared="token ids",
)


def decode_seeing_last(learner: Any) -> Any:
    """Grade ``decode_seeing_last(model, ids, window, n, temperature=0.0, generator=None)`` → prompt + n token ids."""
    return grade(SEEING_LAST, learner)
