"""Experiments whose results the notebooks load: the same loops the notebooks run live, longer.

``python -m minillm.experiments.posttrain`` writes ``data/posttrain/`` (notebooks 09–10); every result it writes
records the code that produced it (:mod:`minillm.experiments.provenance`).
"""
