"""Experiments whose results the notebooks load: the same loops the notebooks run live, longer.

``python -m minillm.experiments.posttrain`` writes ``data/posttrain/`` (notebooks 09–10), ``sft_sweep`` the
forgetting sweep of notebook 09, ``scaling_sweep`` ``data/scaling/`` (notebook 12) and ``clean_vs_raw``
``data/textdata/`` (notebook 13); every result records the code that produced it
(:mod:`minillm.experiments.provenance`).
"""
