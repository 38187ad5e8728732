"""How big a run of ``python -m minillm`` is, phase by phase: a *run size*.

The sizes are data: one JSON file each in ``run_sizes/`` (pretrain, sft, align and eval sections). A run size is
not an architecture (``TrainConfig.preset`` names that: "gpt2-style", "llama-style"); it says how
long each phase trains and with what learning rate. Pretraining is described by :class:`TrainConfig` fields,
so the pipeline builds its pretraining config the way ``python -m minillm.train`` does. The ``course`` size
*is* ``configs/course.json`` (the base checkpoint's recipe), read from the course repository when it is asked
for; ``demo`` skips pretraining and post-trains the shipped base model (two minutes on 2 CPU cores); ``tiny`` is
for tests (minutes on 2 CPU cores) and the ``gpu-*`` sizes are larger runs for a CUDA machine.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minillm.paths import data_dir, repo_root
from minillm.train.config import TrainConfig

#: TrainConfig fields a run size never sets: where the files are, and how this particular run executes.
RUN_FIELDS = ("train_file", "val_file", "out_dir", "work_dir", "seed", "device", "threads", "progress")


@dataclass(frozen=True)
class SFTSize:
    """Supervised fine-tuning: optimiser steps, learning rate and conversations per step."""

    steps: int
    lr: float
    batch_size: int = 16


@dataclass(frozen=True)
class AlignSize:
    """Preference optimisation: DPO, or a reward model followed by PPO."""

    dpo_steps: int
    dpo_lr: float
    ppo_steps: int
    ppo_lr: float
    reward_model_steps: int
    dpo_beta: float = 0.1
    ppo_beta: float = 0.05
    reward_model_lr: float = 1e-4
    batch_size: int = 8  # preference pairs per step (DPO and the reward model)
    held_out_pairs: int = 128  # preference pairs kept out of training to measure accuracy


@dataclass(frozen=True)
class EvalSize:
    """The final evaluation: how many prompts, and how long a reply may be (also the PPO rollouts' length);
    ``samples`` replies to each of the first ``questions`` questions among them for pass@k, and bits per byte on
    the first ``stories`` held-out stories."""

    prompts: int
    max_new_tokens: int
    samples: int = 4
    questions: int = 8
    stories: int = 20


@dataclass(frozen=True)
class RunSize:
    """Every size and learning rate of a pipeline run; ``pretrain`` holds :class:`TrainConfig` fields."""

    pretrain: dict[str, Any]
    sft: SFTSize
    align: AlignSize
    eval: EvalSize = field(default_factory=lambda: EvalSize(prompts=64, max_new_tokens=96))
    base: str | None = None  # a shipped checkpoint in the course's data/ to start from, instead of pretraining

    def __post_init__(self) -> None:
        misplaced = sorted(set(self.pretrain) & set(RUN_FIELDS))
        if misplaced:
            raise ValueError(f"a run size does not set {misplaced}: the run itself chooses them")
        if self.base is not None and self.pretrain:
            raise ValueError(f"a run size that starts from the checkpoint {self.base!r} has nothing to pretrain")
        TrainConfig.from_dict(dict(self.pretrain))  # unknown or inconsistent pretraining settings fail here

    def base_dir(self) -> Path | None:
        """The shipped checkpoint folder the run starts from (``base``), or None when it pretrains its own."""
        return None if self.base is None else data_dir() / self.base

    def train_config(self, **run: Any) -> TrainConfig:
        """The pretraining config: this size's settings plus the run's files, seed and device (``run``)."""
        return TrainConfig.from_dict({**self.pretrain, **run})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


#: The run sizes, one JSON file each: ``pretrain`` (TrainConfig fields) or ``pretrain_recipe`` (a config file of the
#: course repository, e.g. configs/course.json) or ``base`` (a shipped checkpoint), then ``sft``, ``align`` and
#: ``eval`` sections (the fields of :class:`SFTSize`, :class:`AlignSize`, :class:`EvalSize`), and ``about``.
RUN_SIZE_DIR = Path(__file__).resolve().parent / "run_sizes"


def _section(kind: type, values: Any, where: str) -> Any:
    """``kind(**values)``, with an unknown or missing field named in a ValueError instead of a TypeError."""
    if not isinstance(values, dict):
        raise ValueError(f"{where}: expected an object of {kind.__name__} fields, got {values!r}")
    names = {f.name for f in dataclasses.fields(kind)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown}; {kind.__name__} has {sorted(names)}")
    try:
        return kind(**values)
    except TypeError as err:
        raise ValueError(f"{where}: {err}") from None


def load_run_size(path: str | Path) -> RunSize:
    """The run size a JSON file describes (see :data:`RUN_SIZE_DIR`); a malformed file raises ValueError."""
    path = Path(path)
    spec = json.loads(path.read_text(encoding="utf-8"))
    allowed = {"about", "pretrain", "pretrain_recipe", "base", "sft", "align", "eval"}
    if not isinstance(spec, dict) or set(spec) - allowed:
        raise ValueError(
            f"{path}: a run size holds {sorted(allowed)}, got {sorted(spec) if isinstance(spec, dict) else spec!r}"
        )
    pretrain = dict(spec.get("pretrain", {}))
    if "pretrain_recipe" in spec:
        recipe = TrainConfig.json_settings(repo_root() / spec["pretrain_recipe"])
        pretrain = {k: v for k, v in recipe.items() if k not in RUN_FIELDS}
    sections = {
        name: _section(kind, spec[name], f"{path}: {name}")
        for name, kind in (("sft", SFTSize), ("align", AlignSize), ("eval", EvalSize))
        if name in spec
    }
    return RunSize(pretrain=pretrain, base=spec.get("base"), **sections)


#: The run sizes by name (the files in :data:`RUN_SIZE_DIR`); :func:`get_run_size` loads one.
RUN_SIZES: dict[str, Callable[[], RunSize]] = {
    path.stem: functools.partial(load_run_size, path) for path in sorted(RUN_SIZE_DIR.glob("*.json"))
}


@functools.cache
def get_run_size(name: str) -> RunSize:
    """The run size called ``name``; an unknown name raises ValueError listing the known ones."""
    if not isinstance(name, str) or name not in RUN_SIZES:
        raise ValueError(f"unknown run size {name!r}; choose one of {sorted(RUN_SIZES)}")
    return RUN_SIZES[name]()
