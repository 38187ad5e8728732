"""Post-training tasks with checkable answers: the SFT set, the preference set and the gold scorer.

- :mod:`~minillm.tasks.prompts` — the prompt templates and :func:`parse_prompt`;
- :mod:`~minillm.tasks.gold` — :func:`gold_score` / :func:`gold_score_details`, the known true reward;
- :mod:`~minillm.tasks.sets` — builders of the SFT pairs and preference triples, and :func:`eval_prompts`.
"""

from __future__ import annotations

from minillm.tasks.gold import ends_complete, gold_score, gold_score_details, repetition_score
from minillm.tasks.prompts import (
    KINDS,
    QA_FEELING,
    QA_FOUND,
    QA_KINDS,
    QA_PLACE,
    STORY,
    answer_from_story,
    parse_prompt,
    qa_prompt,
    split_sentences,
    story_prompt,
)
from minillm.tasks.sets import CUE, eval_prompts, preference_set, sft_set

__all__ = [
    "CUE",
    "KINDS",
    "QA_FEELING",
    "QA_FOUND",
    "QA_KINDS",
    "QA_PLACE",
    "STORY",
    "answer_from_story",
    "ends_complete",
    "eval_prompts",
    "gold_score",
    "gold_score_details",
    "parse_prompt",
    "preference_set",
    "qa_prompt",
    "repetition_score",
    "sft_set",
    "split_sentences",
    "story_prompt",
]
