"""How big a run of ``python -m minillm`` is, phase by phase: a *run size*.

A run size is not an architecture (``TrainConfig.preset`` names that: "gpt2-style", "llama-style"); it says how
long each phase trains and with what learning rate. Pretraining is described by :class:`TrainConfig` fields,
so the pipeline builds its pretraining config the way ``python -m minillm.train`` does. The ``course`` size
*is* ``configs/course.json`` (the base checkpoint's recipe), read from the course repository when it is asked
for; ``demo`` skips pretraining and post-trains the shipped base model (two minutes on 2 CPU cores); ``tiny`` is
for tests (minutes on 2 CPU cores) and the ``gpu-*`` sizes are larger runs for a CUDA machine.
"""

from __future__ import annotations

import dataclasses
import functools
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


def _course() -> RunSize:
    """The notebooks' run: pretraining exactly as ``configs/course.json``, then SFT and DPO as in notebooks 09-10."""
    recipe = TrainConfig.json_settings(repo_root() / "configs" / "course.json")
    return RunSize(
        pretrain={k: v for k, v in recipe.items() if k not in RUN_FIELDS},
        sft=SFTSize(steps=400, lr=3e-4),
        align=AlignSize(dpo_steps=150, dpo_lr=2e-5, ppo_steps=40, ppo_lr=1e-5, reward_model_steps=300),
    )


def _demo() -> RunSize:
    """Post-training only, from the shipped ``data/base_long`` checkpoint: about two minutes on 2 CPU cores.

    150 SFT steps at 1e-3 raise the gold score clearly (notebook 09's sweep: 300 steps reach about 0.7), then 40 DPO
    steps on the preference set move it again, and the report shows both.
    """
    return RunSize(
        pretrain={},
        base="base_long",
        sft=SFTSize(steps=150, lr=1e-3),
        align=AlignSize(dpo_steps=40, dpo_lr=1e-4, ppo_steps=10, ppo_lr=1e-5, reward_model_steps=60),
        eval=EvalSize(prompts=48, max_new_tokens=96),
    )


def _tiny() -> RunSize:
    """A smoke run of every phase: a 2-layer model, a few hundred steps in all."""
    return RunSize(
        pretrain=dict(
            vocab_size=1024,
            tokenizer_train_chars=400_000,
            preset="gpt2-style",
            n_layer=2,
            n_head=4,
            d_model=64,
            context_length=256,
            batch_size=16,
            max_steps=150,
            lr=3e-3,
            min_lr=3e-4,
            warmup_steps=10,
            eval_interval=50,
            checkpoint_interval=50,
        ),  # fmt: skip
        sft=SFTSize(steps=60, lr=1e-3),
        align=AlignSize(dpo_steps=20, dpo_lr=1e-4, ppo_steps=4, ppo_lr=1e-5, reward_model_steps=40),
        eval=EvalSize(prompts=16, max_new_tokens=48),
    )


def _gpu_small() -> RunSize:
    """For a single GPU: ~11 M parameters (notebook 06's scaling notes), a few minutes on a modern GPU."""
    return RunSize(
        pretrain=dict(
            vocab_size=4096,
            tokenizer_train_chars=None,
            preset="llama-style",
            n_layer=6,
            n_head=6,
            d_model=384,
            context_length=256,
            batch_size=64,
            max_steps=5000,
            lr=1e-3,
            min_lr=1e-4,
            warmup_steps=200,
            eval_interval=500,
            checkpoint_interval=500,
        ),  # fmt: skip
        sft=SFTSize(steps=1000, lr=1e-4, batch_size=32),
        align=AlignSize(dpo_steps=400, dpo_lr=1e-5, ppo_steps=100, ppo_lr=5e-6, reward_model_steps=800),
        eval=EvalSize(prompts=256, max_new_tokens=128),
    )


def _gpu_medium() -> RunSize:
    """GPT-2 small's width and depth (~90 M parameters with this vocabulary): for a large GPU, about an hour."""
    return RunSize(
        pretrain=dict(
            vocab_size=8192,
            tokenizer_train_chars=None,
            preset="gpt2-style",
            n_layer=12,
            n_head=12,
            d_model=768,
            context_length=512,
            batch_size=64,
            max_steps=20000,
            lr=6e-4,
            min_lr=6e-5,
            warmup_steps=1000,
            eval_interval=1000,
            checkpoint_interval=1000,
        ),  # fmt: skip
        sft=SFTSize(steps=2000, lr=5e-5, batch_size=32),
        align=AlignSize(dpo_steps=800, dpo_lr=5e-6, ppo_steps=200, ppo_lr=2e-6, reward_model_steps=2000),
        eval=EvalSize(prompts=512, max_new_tokens=128),
    )


#: The run sizes by name; :func:`get_run_size` builds one (``course`` reads configs/course.json then).
RUN_SIZES: dict[str, Callable[[], RunSize]] = {
    "demo": _demo,
    "tiny": _tiny,
    "course": _course,
    "gpu-small": _gpu_small,
    "gpu-medium": _gpu_medium,
}


@functools.cache
def get_run_size(name: str) -> RunSize:
    """The run size called ``name``; an unknown name raises ValueError listing the known ones."""
    if not isinstance(name, str) or name not in RUN_SIZES:
        raise ValueError(f"unknown pipeline preset {name!r}; choose one of {sorted(RUN_SIZES)}")
    return RUN_SIZES[name]()
