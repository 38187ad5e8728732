"""Pretraining: config, training loop and a whole run (notebook 06).

* :class:`TrainConfig` — every setting of a run (``configs/course.json`` is the course's).
* :class:`Trainer` — the loop: gradient accumulation, clipping, schedule, evaluation, history,
  checkpoints with exact resume, NaN guard, and data parallelism under ``torchrun``.
* :mod:`minillm.train.run` — the run's steps: :func:`train_tokenizer`, :func:`prepare_tokens`,
  :func:`build_model`, :func:`sample_stories`, and ``run`` that chains them (after
  ``prepare_run_folder``: the out-dir's lock, ``run.json`` record, ``--resume``/``--overwrite`` rules).
* :func:`write_history` — the metrics history as ``history.json`` and ``history.csv``.

The command line, ``python -m minillm.train``, is :mod:`minillm.train.cli`: it only parses flags.
"""

from minillm.train.config import TrainConfig
from minillm.train.history import write_history
from minillm.train.loop import DistContext, Trainer
from minillm.train.run import build_model, prepare_tokens, sample_stories, train_tokenizer

__all__ = [
    "DistContext",
    "TrainConfig",
    "Trainer",
    "build_model",
    "prepare_tokens",
    "sample_stories",
    "train_tokenizer",
    "write_history",
]
