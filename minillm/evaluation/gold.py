"""Task accuracy of a chat model by the gold scorer: greedy replies and sampled replies, prompt by prompt.

The course's tasks come with a scorer that knows the true answer (``minillm.tasks.gold_score``), so a chat
model's quality is a number, not an opinion. Greedy replies say what the model answers when asked once;
RLHF optimises the expected reward of *samples* (temperature 1), so sampled replies are scored too. Every
result keeps the per-prompt scores: an accuracy without its spread cannot say whether two models differ
(``minillm.evaluation.stats``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from minillm.generation import generate_responses
from minillm.tasks import gold_score

Scorer = Callable[[str, str], float]

#: A reply counts as correct (pass@k, accuracy) when its gold score is at least this. On a question the scorer
#: gives 0 to a wrong answer and 0.8–1 to the right one (less only for a rambling reply), so this means "right".
CORRECT_AT = 0.5


@dataclass
class GoldReplies:
    """What a model answered and what the scorer gave each answer (``prompts[i]`` ↔ ``replies[i]``)."""

    prompts: list[str]
    replies: list[str]
    scores: list[float]

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores)


def greedy_gold(
    model: nn.Module,
    tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = 64,
    scorer: Scorer = gold_score,
) -> GoldReplies:
    """The model's greedy reply to each prompt and its gold score."""
    if not prompts:
        raise ValueError("greedy_gold needs at least one prompt")
    replies = generate_responses(model, tokenizer, list(prompts), max_new_tokens=max_new_tokens)
    return GoldReplies(list(prompts), replies, [scorer(p, r) for p, r in zip(prompts, replies, strict=True)])


def sampled_gold(
    model: nn.Module,
    tokenizer,
    prompts: Sequence[str],
    n_samples: int,
    max_new_tokens: int = 64,
    seed: int = 1234,
    temperature: float = 1.0,
    scorer: Scorer = gold_score,
) -> GoldReplies:
    """``n_samples`` replies per prompt (prompt by prompt, in order) and their gold scores.

    One seeded generator on the model's device draws every sample, so the same model answers the same way.
    """
    if not prompts or n_samples < 1:
        raise ValueError(f"sampled_gold needs prompts and n_samples ≥ 1 (got {len(prompts)}, {n_samples})")
    repeated = [p for p in prompts for _ in range(n_samples)]
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    replies = generate_responses(
        model, tokenizer, repeated, max_new_tokens=max_new_tokens, temperature=temperature, generator=generator
    )
    return GoldReplies(repeated, replies, [scorer(p, r) for p, r in zip(repeated, replies, strict=True)])


def per_prompt_means(scores: Sequence[float], n_samples: int) -> list[float]:
    """The mean of each prompt's ``n_samples`` consecutive scores (``sampled_gold``'s order)."""
    if n_samples < 1 or len(scores) % n_samples:
        raise ValueError(f"{len(scores)} scores do not split into groups of {n_samples}")
    return [sum(scores[i : i + n_samples]) / n_samples for i in range(0, len(scores), n_samples)]
