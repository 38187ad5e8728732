"""What a model's probabilities say about it: held-out loss, perplexity, bits per byte, multiple choice.

A language model assigns every text a probability. Three ways to read it:

- **loss per token** (nats) and its exponential, **perplexity** — fine for comparing checkpoints that share
  a tokenizer, meaningless across tokenizers: a token of a byte-level model is one byte, a token of a large
  BPE vocabulary is several, so the same text has different numbers of tokens to be "surprised" by;
- **bits per byte** — the total surprise of the text, converted to bits, divided by its UTF-8 bytes:
  ``Σ NLL / (ln 2 · bytes)``. The text and its bytes are the same for every tokenizer, so this compares any
  two models (it is the compression rate an arithmetic coder driven by the model would reach);
- **multiple choice by likelihood** (HellaSwag, MMLU "cloze" style) — no generation: score each candidate
  continuation by its log-probability given the prompt and pick the highest. Summed log-probabilities favour
  short candidates (every token costs probability), so harnesses also report the score per token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from minillm.batches import right_pad, sequential_windows
from minillm.chat import ENDOFTEXT, encode_prompt, special_token_id

__all__ = [
    "ChoiceScores",
    "NORMALISATIONS",
    "bits_per_byte",
    "choice_accuracy",
    "choice_logprobs",
    "choose",
    "perplexity",
    "text_bits_per_byte",
    "text_nll",
    "utf8_bytes",
]

NORMALISATIONS = ("sum", "token")


def utf8_bytes(text: str) -> int:
    """The text's length in UTF-8 bytes — the tokenizer-free unit (``len(text)`` counts characters)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return len(text.encode("utf-8"))


def bits_per_byte(total_nll_nats: float, n_bytes: int) -> float:
    """``total_nll_nats / (ln 2 · n_bytes)``: the text's total surprise in bits, per UTF-8 byte.

    ``total_nll_nats`` is the *sum* of the per-token negative log-likelihoods (natural log) over the text;
    a mean per token would divide by the token count twice.
    """
    if isinstance(n_bytes, bool) or not isinstance(n_bytes, int) or n_bytes < 1:
        raise ValueError(f"n_bytes must be a positive int, got {n_bytes!r}")
    if not math.isfinite(total_nll_nats) or total_nll_nats < 0:
        raise ValueError(f"total_nll_nats must be a finite non-negative number, got {total_nll_nats!r}")
    return total_nll_nats / (math.log(2) * n_bytes)


def perplexity(mean_nll_nats: float) -> float:
    """``exp(mean NLL per token)``: the number of equally likely tokens the model is, on average, choosing among."""
    if not math.isfinite(mean_nll_nats) or mean_nll_nats < 0:
        raise ValueError(f"mean_nll_nats must be a finite non-negative number, got {mean_nll_nats!r}")
    return math.exp(mean_nll_nats)


@torch.no_grad()
def text_nll(
    model: nn.Module, tokens: Sequence[int] | np.ndarray, context_length: int, batch_size: int = 32
) -> tuple[float, list[int]]:
    """Total next-token NLL (nats, float64 sum) over the non-overlapping windows of ``tokens``, and the
    predicted target ids (so the caller can count the bytes they stand for).

    The windows are :func:`~minillm.batches.sequential_windows`' (the validation windows of notebook 06); a
    tail shorter than one window is dropped, so count bytes of the *targets*, not of the whole text.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, targets_seen = 0.0, []
    for inputs, targets in sequential_windows(np.asarray(tokens), batch_size, context_length):
        logits = model(inputs.to(device)).double()
        total += F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten(), reduction="sum").item()
        targets_seen += targets.flatten().tolist()
    model.train(was_training)
    return total, targets_seen


def text_bits_per_byte(model: nn.Module, tokenizer, text: str) -> float:
    """Bits per byte of ``text`` under ``model``: :func:`text_nll` over its windows, divided by the UTF-8 bytes of
    the tokens it predicted (the tokenizer's own bytes, so a token split mid-character still counts right)."""
    total, predicted = text_nll(model, tokenizer.encode(text), model.config.context_length)
    return bits_per_byte(total, len(tokenizer.decode_bytes(predicted)))


@dataclass
class ChoiceScores:
    """Log-probability of each candidate continuation given one prompt: the sum and the token count."""

    logprob: list[float]
    n_tokens: list[int]

    def normalised(self, how: str) -> list[float]:
        """``"sum"``: the total log-probability; ``"token"``: per token (length-normalised)."""
        if how == "sum":
            return list(self.logprob)
        if how == "token":
            return [lp / n for lp, n in zip(self.logprob, self.n_tokens, strict=True)]
        raise ValueError(f"normalisation must be one of {NORMALISATIONS}, got {how!r}")


@torch.no_grad()
def choice_logprobs(
    model: nn.Module, tokenizer, prompt: str, choices: Sequence[str], prefix: str = "", chat: bool = True
) -> ChoiceScores:
    """``log p(choice | prompt, prefix)`` for each candidate continuation, summed over its tokens (float64).

    ``chat=True``: the prompt is a user turn in the chat format and the reply starts with ``prefix`` (a
    chat model's answer); ``chat=False``: plain text after ``<|endoftext|>``, as a base model saw in
    pretraining. Choices are encoded on their own (start them with a space, as text continues a word
    boundary), so the context's tokens are the same for every choice. All choices go through the model
    as one right-padded batch; padding sits after every scored token, so a causal model never sees it.
    """
    if not choices:
        raise ValueError("choice_logprobs needs at least one choice")
    if chat:
        context = encode_prompt(prompt, tokenizer) + tokenizer.encode(prefix, allowed_special="none")
    else:
        context = [special_token_id(tokenizer, ENDOFTEXT), *tokenizer.encode(prompt + prefix, allowed_special="none")]
    encoded = [tokenizer.encode(c, allowed_special="none") for c in choices]
    if any(not ids for ids in encoded):
        raise ValueError("every choice needs at least one token")
    limit = model.config.context_length
    if len(context) + max(map(len, encoded)) > limit:
        raise ValueError(f"prompt + longest choice exceed the model's context of {limit} tokens")
    device = next(model.parameters()).device
    ids = right_pad([context + e for e in encoded], 0).to(device)
    logp = F.log_softmax(model(ids).double(), dim=-1)
    start = len(context)
    sums = []
    for row, e in enumerate(encoded):
        positions = torch.arange(start - 1, start - 1 + len(e), device=device)  # logits at t predict token t + 1
        targets = torch.tensor(e, device=device)
        sums.append(logp[row, positions, targets].sum().item())
    return ChoiceScores(sums, [len(e) for e in encoded])


def choose(scores: ChoiceScores, how: str = "token") -> int:
    """Index of the best-scoring choice (the first on a tie)."""
    values = scores.normalised(how)
    return max(range(len(values)), key=values.__getitem__)


def choice_accuracy(all_scores: Sequence[ChoiceScores], answers: Sequence[int], how: str = "token") -> float:
    """Share of questions whose best-scoring choice is the right one (``answers[i]``)."""
    if not all_scores or len(all_scores) != len(answers):
        raise ValueError(f"need one answer per question, got {len(all_scores)} questions and {len(answers)} answers")
    return sum(choose(s, how) == a for s, a in zip(all_scores, answers, strict=True)) / len(answers)
