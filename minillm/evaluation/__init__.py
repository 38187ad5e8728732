"""Evaluation: how we know a model is good (notebook 14).

One home for every measure the course reports — the notebooks, the pipeline's evaluation phase and the
experiments all call it:

- ``gold``: task accuracy by the gold scorer, greedy and sampled, per prompt.
"""

from minillm.evaluation.gold import GoldReplies, greedy_gold, per_prompt_means, sampled_gold

__all__ = ["GoldReplies", "greedy_gold", "per_prompt_means", "sampled_gold"]
