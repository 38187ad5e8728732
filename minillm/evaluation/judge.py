"""A model as the judge: how often it agrees with the truth, and what else sways it.

Open-ended replies have no answer key, so evaluations ask a model which of two replies is better (MT-Bench,
AlpacaEval, Chatbot Arena's automatic judges). A judge is only as useful as its agreement with a trusted
reference — here the course's gold scorer, which knows the right answer — and it has biases of its own
that the reference does not (Zheng et al. 2023, "Judging LLM-as-a-Judge with MT-Bench and Chatbot Arena"):

- **position bias**: a judge that reads both replies in one prompt may prefer the first (or the last) one
  whatever they say. Measured by asking twice, with A and B swapped: a consistent judge picks the same reply;
- **length bias**: a preference for the longer reply when the reference sees no difference.

A *pointwise* judge (a reward model scoring each reply on its own) has no position bias by construction;
a *pairwise* judge (a language model reading both replies) can. Verdicts here are 0 (the first reply
shown) or 1 (the second).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from minillm.batches import pad_chat
from minillm.chat import encode_response
from minillm.evaluation.likelihood import choice_logprobs

__all__ = [
    "agreement_with_gold",
    "first_position_rate",
    "judge_prompt",
    "likelihood_verdict",
    "longer_preference",
    "pointwise_verdicts",
    "position_consistency",
    "reward_scores",
]


@torch.no_grad()
def reward_scores(
    reward_model: nn.Module, tokenizer, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 32
) -> list[float]:
    """A reward model's score of each (prompt, response) in the chat format (``reward_model(ids, mask)``)."""
    if len(prompts) != len(responses) or not prompts:
        raise ValueError(f"need one response per prompt, got {len(prompts)} prompts and {len(responses)} responses")
    pad_id = tokenizer.encode("<|end|>")[0]
    limit = reward_model.trunk.config.context_length
    device = next(reward_model.parameters()).device
    scores: list[float] = []
    for start in range(0, len(prompts), batch_size):
        pairs = zip(prompts[start : start + batch_size], responses[start : start + batch_size], strict=True)
        ids, mask = pad_chat([encode_response(p, r, tokenizer) for p, r in pairs], pad_id, max_len=limit)
        scores += reward_model(ids.to(device), mask.to(device)).double().tolist()
    return scores


def pointwise_verdicts(scores_first: Sequence[float], scores_second: Sequence[float]) -> list[int]:
    """0 where the first reply scores strictly higher, else 1 (a tie goes to the second)."""
    if len(scores_first) != len(scores_second):
        raise ValueError(f"{len(scores_first)} first scores but {len(scores_second)} second scores")
    return [0 if a > b else 1 for a, b in zip(scores_first, scores_second, strict=True)]


def judge_prompt(prompt: str, first: str, second: str) -> str:
    """The task prompt with both candidate replies written under it, for a judge that reads both."""
    return f"{prompt}\nAnswer 1: {first}\nAnswer 2: {second}"


def likelihood_verdict(model: nn.Module, tokenizer, prompt: str, first: str, second: str) -> int:
    """A language model as a pairwise judge: shown both replies, which one would it give itself?

    The verdict is the reply with the higher per-token log-probability as the model's answer to
    :func:`judge_prompt` (0: the first shown, 1: the second).
    """
    scores = choice_logprobs(model, tokenizer, judge_prompt(prompt, first, second), [first, second])
    per_token = scores.normalised("token")
    return 0 if per_token[0] > per_token[1] else 1


def agreement_with_gold(
    verdicts: Sequence[int], gold_first: Sequence[float], gold_second: Sequence[float], min_gap: float = 0.0
) -> tuple[float, int]:
    """Share of pairs where the judge picks the reply the gold scorer rates higher, over the pairs whose gold
    scores differ by more than ``min_gap`` (a tie on gold has no right verdict); and how many pairs that is."""
    if not len(verdicts) == len(gold_first) == len(gold_second):
        raise ValueError("verdicts and both gold lists must have one entry per pair")
    kept = [(v, a, b) for v, a, b in zip(verdicts, gold_first, gold_second, strict=True) if abs(a - b) > min_gap]
    if not kept:
        raise ValueError(f"no pair has gold scores more than {min_gap} apart")
    right = sum(v == (0 if a > b else 1) for v, a, b in kept)
    return right / len(kept), len(kept)


def position_consistency(verdicts_ab: Sequence[int], verdicts_ba: Sequence[int]) -> float:
    """Share of pairs judged the same way in both orders: asked (A, B) then (B, A), it picks the same reply."""
    if len(verdicts_ab) != len(verdicts_ba) or not verdicts_ab:
        raise ValueError("need the same non-empty pairs judged in both orders")
    return sum(v == 1 - w for v, w in zip(verdicts_ab, verdicts_ba, strict=True)) / len(verdicts_ab)


def first_position_rate(verdicts_ab: Sequence[int], verdicts_ba: Sequence[int]) -> float:
    """How often the reply shown first wins, over both orders (0.5 for a judge without position bias)."""
    both = list(verdicts_ab) + list(verdicts_ba)
    if not both:
        raise ValueError("no verdicts")
    return sum(v == 0 for v in both) / len(both)


def longer_preference(verdicts: Sequence[int], len_first: Sequence[int], len_second: Sequence[int]) -> float:
    """Share of pairs (of different lengths) where the judge picks the longer reply."""
    if not len(verdicts) == len(len_first) == len(len_second):
        raise ValueError("verdicts and both length lists must have one entry per pair")
    kept = [(v, a, b) for v, a, b in zip(verdicts, len_first, len_second, strict=True) if a != b]
    if not kept:
        raise ValueError("every pair has replies of equal length")
    return sum(v == (0 if a > b else 1) for v, a, b in kept) / len(kept)
