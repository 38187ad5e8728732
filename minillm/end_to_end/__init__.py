"""The whole pipeline in one command: ``python -m minillm`` (also the ``minillm`` console script).

tokenizer → pretraining → supervised fine-tuning → preference optimisation (DPO, or PPO) → evaluation →
report. Each phase writes its outputs and a ``done.json`` under one run folder and is skipped when rerun
with the same settings (``settings.json``: the run size ``--preset``, algorithm, seed, device, and the SHA-256 of
every input file); a rerun with other settings is refused unless ``--overwrite`` is given, and the folder is locked
while a run writes to it. Pretraining resumes from its last checkpoint after an interruption.
:mod:`minillm.end_to_end.runner` runs it; :mod:`minillm.end_to_end.cli` only parses the flags.
"""

from minillm.end_to_end.run_size import RUN_SIZES, RunSize, get_run_size

__all__ = ["RUN_SIZES", "RunSize", "get_run_size"]
