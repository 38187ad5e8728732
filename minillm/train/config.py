"""The settings of a pretraining run, as one dataclass (the CLI flags and JSON configs use its names)."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class TrainConfig:
    """Every setting of a pretraining run (the CLI's flags and the JSON config files use these names)."""

    # data and outputs
    train_file: str = "data/stories_train.txt"
    val_file: str | None = "data/stories_val.txt"
    out_dir: str = "runs/pretrain"
    work_dir: str | None = None  # token caches and the resume checkpoint; default <out_dir>/work
    # tokenizer
    vocab_size: int = 2048
    tokenizer_train_chars: int | None = 2_000_000  # train BPE on the first N characters (None: all)
    # model (a GPTConfig preset plus the sizes)
    preset: str = "gpt2-style"
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    context_length: int = 256
    dropout: float = 0.0
    # batches
    batch_size: int = 16  # global sequences per micro-batch (summed over data-parallel ranks)
    grad_accum: int = 1
    max_steps: int = 1000
    # optimisation
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 50
    schedule: str = "cosine"  # cosine | linear | wsd | constant
    decay_steps: int = 0  # only for wsd: length of the final cool-down
    weight_decay: float = 0.1
    decay_embeddings: bool = False
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float | None = 1.0
    on_nonfinite: str = "stop"  # stop | skip: what a NaN/inf loss or gradient does
    # evaluation, checkpoints, logging
    eval_interval: int = 100
    eval_batches: int = 20
    checkpoint_interval: int = 0  # 0: only at the end
    sample_tokens: int = 120
    seed: int = 0
    device: str = "auto"
    threads: int | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        positive = ("vocab_size", "n_layer", "n_head", "d_model", "context_length", "batch_size", "grad_accum")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        for name in ("max_steps", "warmup_steps", "decay_steps", "eval_interval", "checkpoint_interval"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.on_nonfinite not in ("stop", "skip"):
            raise ValueError(f"on_nonfinite must be 'stop' or 'skip', got {self.on_nonfinite!r}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"grad_clip must be positive or None, got {self.grad_clip!r}")

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.grad_accum * self.context_length

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown TrainConfig fields {unknown}; known: {sorted(known)}")
        return cls(**data)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> TrainConfig:
        """Read a JSON config file; keys starting with ``_`` are comments and ignored."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a config file must hold a JSON object, got {type(data).__name__}")
        return cls.from_dict({k: v for k, v in data.items() if not k.startswith("_")})
