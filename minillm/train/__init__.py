"""Pretraining: config, training loop and the ``python -m minillm.train`` command line (notebook 06).

* :class:`TrainConfig` — every setting of a run (``configs/course.json`` is the course's).
* :class:`Trainer` — the loop: gradient accumulation, clipping, schedule, evaluation, history,
  checkpoints with exact resume, NaN guard, and data parallelism under ``torchrun``.
* :func:`main` — the command line: tokenizer training, encoding, pretraining, saving the model.
"""

from minillm.train.cli import main, prepare_tokens, train_tokenizer
from minillm.train.config import TrainConfig
from minillm.train.loop import DistContext, Trainer

__all__ = ["DistContext", "TrainConfig", "Trainer", "main", "prepare_tokens", "train_tokenizer"]
