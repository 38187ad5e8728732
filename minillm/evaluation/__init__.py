"""Evaluation: how we know a model is good (notebook 14).

One home for every measure the course reports — the notebooks, the pipeline's evaluation phase and the
experiments all call it:

- ``gold``: task accuracy by the gold scorer, greedy and sampled, per prompt.
- ``likelihood``: held-out loss, perplexity, bits per byte; multiple choice by likelihood.
- ``stats``: standard errors, paired comparisons, the bootstrap, pass@k.
- ``judge``: a model as the judge — agreement with the gold scorer, position and length bias.
"""

from minillm.evaluation.gold import CORRECT_AT, GoldReplies, greedy_gold, per_prompt_means, sampled_gold
from minillm.evaluation.judge import (
    agreement_with_gold,
    first_position_rate,
    likelihood_verdict,
    longer_preference,
    pointwise_verdicts,
    position_consistency,
    reward_scores,
)
from minillm.evaluation.likelihood import (
    ChoiceScores,
    bits_per_byte,
    choice_accuracy,
    choice_logprobs,
    choose,
    perplexity,
    text_bits_per_byte,
    text_nll,
    utf8_bytes,
)
from minillm.evaluation.stats import (
    bootstrap_interval,
    bootstrap_means,
    mean_and_se,
    paired_difference,
    pass_at_k,
    pass_at_k_mean,
)

__all__ = [
    "CORRECT_AT",
    "ChoiceScores",
    "GoldReplies",
    "agreement_with_gold",
    "bits_per_byte",
    "bootstrap_interval",
    "bootstrap_means",
    "choice_accuracy",
    "choice_logprobs",
    "choose",
    "first_position_rate",
    "greedy_gold",
    "likelihood_verdict",
    "longer_preference",
    "mean_and_se",
    "paired_difference",
    "pass_at_k",
    "pass_at_k_mean",
    "per_prompt_means",
    "perplexity",
    "pointwise_verdicts",
    "position_consistency",
    "reward_scores",
    "sampled_gold",
    "text_bits_per_byte",
    "text_nll",
    "utf8_bytes",
]
