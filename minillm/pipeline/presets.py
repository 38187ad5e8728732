"""Sizes of a pipeline run. ``tiny`` is for tests (minutes on 2 CPU cores), ``course`` matches the notebooks'
settings (the base checkpoint's recipe), and the ``gpu-*`` presets are larger runs for a CUDA machine."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class PipelinePreset:
    """Every size and learning rate of a pipeline run."""

    # tokenizer and pretraining (names as in minillm.train.TrainConfig)
    vocab_size: int
    tokenizer_train_chars: int | None
    preset: str
    n_layer: int
    n_head: int
    d_model: int
    context_length: int
    batch_size: int
    max_steps: int
    lr: float
    warmup_steps: int
    eval_interval: int
    checkpoint_interval: int
    # supervised fine-tuning
    sft_steps: int
    sft_lr: float
    sft_batch_size: int
    # preference optimisation
    dpo_steps: int
    dpo_lr: float
    dpo_beta: float
    ppo_steps: int
    ppo_lr: float
    ppo_beta: float
    reward_model_steps: int
    # evaluation
    eval_prompts: int
    max_new_tokens: int
    # learning-rate schedule: cosine to lr/10, or warmup-stable-decay with a cool-down of decay_steps
    schedule: str = "cosine"
    decay_steps: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class _Presets(dict[str, PipelinePreset]):
    """The preset table; looking up an unknown name lists the known ones instead of a bare ``KeyError``."""

    def __missing__(self, name: str) -> PipelinePreset:
        raise KeyError(f"unknown pipeline preset {name!r}; choose one of {sorted(self)}")


def get_preset(name: str) -> PipelinePreset:
    """The preset called ``name``; an unknown name raises ValueError listing the known ones."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"unknown pipeline preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name]


_COURSE_PRETRAIN = dict(
    vocab_size=2048,
    tokenizer_train_chars=None,
    preset="gpt2-style",
    n_layer=4,
    n_head=4,
    d_model=128,
    context_length=256,
    batch_size=16,
    max_steps=700,
    lr=3e-3,
    warmup_steps=50,
    eval_interval=175,
    checkpoint_interval=100,
    schedule="wsd",
    decay_steps=140,
)

PRESETS: dict[str, PipelinePreset] = {
    # A smoke run of every phase: a 2-layer model, a few hundred steps in all.
    "tiny": PipelinePreset(
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
        warmup_steps=10,
        eval_interval=50,
        checkpoint_interval=50,
        sft_steps=60,
        sft_lr=1e-3,
        sft_batch_size=16,
        dpo_steps=20,
        dpo_lr=1e-4,
        dpo_beta=0.1,
        ppo_steps=4,
        ppo_lr=1e-5,
        ppo_beta=0.05,
        reward_model_steps=40,
        eval_prompts=16,
        max_new_tokens=48,
    ),
    # The notebooks' settings: the base checkpoint's recipe, then SFT and DPO as in notebooks 09-10.
    "course": PipelinePreset(
        **_COURSE_PRETRAIN,
        sft_steps=400,
        sft_lr=3e-4,
        sft_batch_size=16,
        dpo_steps=150,
        dpo_lr=2e-5,
        dpo_beta=0.1,
        ppo_steps=40,
        ppo_lr=1e-5,
        ppo_beta=0.05,
        reward_model_steps=300,
        eval_prompts=64,
        max_new_tokens=96,
    ),
    # For a single GPU: ~11 M parameters (notebook 06's scaling notes), a few minutes on a modern GPU.
    "gpu-small": PipelinePreset(
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
        warmup_steps=200,
        eval_interval=500,
        checkpoint_interval=500,
        sft_steps=1000,
        sft_lr=1e-4,
        sft_batch_size=32,
        dpo_steps=400,
        dpo_lr=1e-5,
        dpo_beta=0.1,
        ppo_steps=100,
        ppo_lr=5e-6,
        ppo_beta=0.05,
        reward_model_steps=800,
        eval_prompts=256,
        max_new_tokens=128,
    ),
    # GPT-2 small's width and depth (~90 M parameters with this vocabulary): for a large GPU, about an hour.
    "gpu-medium": PipelinePreset(
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
        warmup_steps=1000,
        eval_interval=1000,
        checkpoint_interval=1000,
        sft_steps=2000,
        sft_lr=5e-5,
        sft_batch_size=32,
        dpo_steps=800,
        dpo_lr=5e-6,
        dpo_beta=0.1,
        ppo_steps=200,
        ppo_lr=2e-6,
        ppo_beta=0.05,
        reward_model_steps=2000,
        eval_prompts=512,
        max_new_tokens=128,
    ),
}
PRESETS = _Presets(PRESETS)  # the same table, with a helpful error for an unknown name
