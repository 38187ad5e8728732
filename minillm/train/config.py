"""The settings of a pretraining run, as one dataclass (the CLI flags and JSON configs use its names).

A config is checked completely when it is built: every field's type, every range, the model shape (the
preset exists, ``n_head`` divides ``d_model``), the schedule and the device name. The command line builds
its config before any work, so a bad flag or config file stops it at once with a message naming the
setting, rather than after the tokenizer has trained or as a traceback from deep inside torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from minillm.device import check_device_name
from minillm.model import GPTConfig
from minillm.optim import SCHEDULES, make_schedule
from minillm.tokenizer import COURSE_SPECIAL_TOKENS

#: ``dtype`` → the autocast dtype of the forward pass (None: plain fp32). Notebook 08 builds both by hand.
DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


#: ``optimizer`` → what updates the weights (notebooks 05 and 16).
OPTIMIZERS = {
    "adamw": "AdamW on every parameter",
    "muon": "Muon on the hidden layers' 2-D matrices, AdamW on embeddings, output head, norms and biases",
}
#: The TrainConfig fields passed to GPTConfig under the same name: the 2026 switches.
MODEL_SWITCHES = (
    "qk_norm", "logit_softcap", "attn_window", "window_pattern", "n_experts", "experts_top_k", "moe_every",
    "capacity_factor",
)  # fmt: skip


class ConfigError(ValueError):
    """A run setting, or a config file, that cannot be used; the message names it and says what would work."""


# What each annotation accepts, and how to say so. A float setting also takes an int (JSON's ``1``).
_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "str": ((str,), "a string"),
    "int": ((int,), "an integer"),
    "float": ((int, float), "a number"),
    "bool": ((bool,), "true or false"),
}


def _setting(default: Any, *, run_level: bool = False, location: bool = False, resumable: str | None = None) -> Any:
    """A field with its category declared where it is defined (see :func:`fields_where`).

    ``run_level``: chosen by each run (its files, seed, device, threads, progress bars), never by a run size
    or recipe; ``location``: where the run is — a moved run folder is the same run, so never compared on
    resume; ``resumable``: why ``--resume`` may change it (every other setting must match the run's record).
    """
    return dataclasses.field(
        default=default, metadata={"run_level": run_level, "location": location, "resumable": resumable}
    )


@dataclass
class TrainConfig:
    """Every setting of a pretraining run (the CLI's flags and the JSON config files use these names)."""

    # data and outputs
    train_file: str = _setting("data/stories_train.txt", run_level=True)
    val_file: str | None = _setting("data/stories_val.txt", run_level=True)
    out_dir: str = _setting("runs/pretrain", run_level=True, location=True)
    work_dir: str | None = _setting(
        None, run_level=True, location=True
    )  # caches and the resume checkpoint; default <out_dir>/work
    # tokenizer
    vocab_size: int = 2048
    tokenizer_train_chars: int | None = 2_000_000  # train BPE on the first N characters (None: all)
    # model (an architecture preset of GPTConfig, plus the sizes)
    preset: str = "gpt2-style"
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int | None = None  # fewer key/value heads than n_head: grouped-query attention (None: n_head)
    d_model: int = 128
    context_length: int = 256
    dropout: float = 0.0
    # the 2026 switches (notebook 16), passed to GPTConfig (see its fields); off by default
    qk_norm: bool = False
    logit_softcap: float | None = None
    attn_window: int | None = None  # sliding window: a query sees itself and the attn_window - 1 keys before it
    window_pattern: str | None = None  # per layer, repeating: "L" local, "G" global (None: every layer local)
    n_experts: int | None = None  # mixture-of-experts MLPs (None: dense)
    experts_top_k: int = 2
    moe_every: int = 1
    capacity_factor: float | None = None
    # batches
    batch_size: int = 16  # global sequences per micro-batch (summed over data-parallel ranks)
    grad_accum: int = 1
    max_steps: int = _setting(
        1000,
        resumable="train longer or stop sooner; the learning-rate schedule is laid out for the new length, "
        "so the rate continues from where the new schedule is at the current step",
    )
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
    optimizer: str = "adamw"  # adamw | muon: Muon on the hidden 2-D matrices, AdamW on the rest (MuonAdamW)
    muon_lr: float = 0.02  # Muon's peak rate; it follows lr's schedule, scaled by muon_lr / lr
    muon_momentum: float = 0.95
    muon_weight_decay: float = 0.0  # decoupled decay of the Muon matrices (the AdamW side keeps weight_decay)
    moe_aux_coef: float = 0.01  # × the experts' load-balancing loss, added to the loss (Switch: 0.01); with experts
    z_loss_coef: float = 0.0  # × z-loss, mean logsumexp(logits)², added to the loss (PaLM: 1e-4); 0 = off
    on_nonfinite: str = "stop"  # stop | skip: what a NaN/inf loss or gradient does
    dtype: str = "fp32"  # fp32 | bf16 | fp16: the forward pass's precision (autocast; weights stay fp32)
    peak_tflops: float | None = None  # the device's peak TFLOP/s at this dtype: history then reports MFU
    parallel: str = "ddp"  # ddp | fsdp: how ranks under torchrun share the work (FSDP also shards the model)
    compile: bool = False  # torch.compile the model (first steps slower while it compiles)
    activation_checkpointing: bool = False  # recompute each block in backward: memory for about a third more compute
    # evaluation, checkpoints, logging
    eval_interval: int = _setting(100, resumable="how often validation runs; it does not change the training steps")
    eval_batches: int = _setting(20, resumable="how many batches validation reads")
    checkpoint_interval: int = _setting(0, resumable="how often checkpoints are written")  # 0: only at the end
    sample_tokens: int = _setting(120, resumable="the length of the samples printed at the end")
    seed: int = _setting(0, run_level=True)
    device: str = _setting("auto", run_level=True, resumable="where the steps run (low-order float digits may differ)")
    threads: int | None = _setting(None, run_level=True, resumable="CPU threads")
    progress: bool = _setting(True, run_level=True, resumable="the progress bar")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every setting (see the module docstring); raises :class:`ConfigError` naming the first bad one."""
        self._check_types()
        positive = ("vocab_size", "n_layer", "n_head", "d_model", "context_length", "batch_size", "grad_accum")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)!r}")
        for name in ("max_steps", "warmup_steps", "decay_steps", "eval_interval", "checkpoint_interval"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        for name, hint in (
            ("eval_batches", ""),
            ("tokenizer_train_chars", " (or null: all of it)"),
            ("threads", " (or null: torch's default)"),
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be at least 1{hint}, got {value!r}")
        smallest = 256 + len(COURSE_SPECIAL_TOKENS)
        if self.vocab_size < smallest:
            raise ConfigError(
                f"vocab_size={self.vocab_size} leaves no room for merges: the 256 bytes and "
                f"{len(COURSE_SPECIAL_TOKENS)} special tokens already take {smallest} ids; use at least {smallest}"
            )
        nonnegative = ("muon_lr", "muon_weight_decay", "moe_aux_coef", "z_loss_coef")
        for name in ("sample_tokens", "lr", "min_lr", "weight_decay", *nonnegative):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("beta1", "beta2", "muon_momentum"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.parallel not in ("ddp", "fsdp"):
            raise ConfigError(f"parallel must be 'ddp' or 'fsdp', got {self.parallel!r}")
        if self.parallel == "fsdp" and self.dtype == "fp16":
            raise ConfigError("parallel='fsdp' runs in fp32 or bf16 (fp16 would need a sharded loss scaler); use bf16")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"optimizer must be one of {list(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.optimizer == "muon" and self.lr <= 0:
            raise ConfigError(
                f"optimizer='muon' needs lr > 0, got lr={self.lr!r}: Muon's rate is muon_lr × (lr's schedule / lr)"
            )
        if self.on_nonfinite not in ("stop", "skip"):
            raise ConfigError(f"on_nonfinite must be 'stop' or 'skip', got {self.on_nonfinite!r}")
        if self.peak_tflops is not None and self.peak_tflops <= 0:
            raise ConfigError(f"peak_tflops must be positive or null, got {self.peak_tflops!r}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ConfigError(f"grad_clip must be positive or None, got {self.grad_clip!r}")
        self._check_schedule()
        try:
            self.lr_schedule()
            self.model_config(self.vocab_size)
            check_device_name(self.device)
        except ValueError as err:
            raise ConfigError(str(err)) from err

    def _check_schedule(self) -> None:
        """The schedule's relations in this config's own names (the optimizer module words them generically)."""
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"unknown schedule {self.schedule!r}; choose from {sorted(SCHEDULES)}")
        if self.schedule == "constant":
            return
        steps = max(self.max_steps, 1)
        if self.warmup_steps > steps:
            raise ConfigError(
                f"warmup_steps={self.warmup_steps} is longer than the run (max_steps={self.max_steps}); "
                "lower warmup_steps or raise max_steps"
            )
        if self.min_lr > self.lr:
            raise ConfigError(f"min_lr={self.min_lr!r} is above lr={self.lr!r}; the schedule decays from lr to min_lr")
        if self.schedule == "wsd" and self.warmup_steps + self.decay_steps > steps:
            raise ConfigError(
                f"warmup_steps={self.warmup_steps} + decay_steps={self.decay_steps} exceed max_steps={self.max_steps}; "
                "the wsd cool-down must fit after the warmup"
            )

    def _check_types(self) -> None:
        """Each field holds what its annotation says: a JSON ``"0.01"`` is refused here, not in the optimizer."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            kinds = [kind.strip() for kind in str(field.type).split("|")]
            optional = "None" in kinds
            if value is None and optional:
                continue
            accepted = [_KINDS[kind] for kind in kinds if kind != "None"]
            is_bool = isinstance(value, bool)
            ok = any(isinstance(value, types) for types, _ in accepted) and (is_bool == (kinds[0] == "bool"))
            if ok and isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{field.name} must be a finite number, got {value!r}")
            if not ok:
                expected = " or ".join(words for _, words in accepted) + (" or null" if optional else "")
                hint = (
                    "; in a JSON config write numbers and true/false without quotes" if isinstance(value, str) else ""
                )
                raise ConfigError(f"{field.name} must be {expected}, got {value!r} ({type(value).__name__}){hint}")

    def model_config(self, vocab_size: int) -> GPTConfig:
        """The :class:`~minillm.model.GPTConfig` of this run's ``preset`` and sizes, for ``vocab_size`` ids."""
        return GPTConfig.preset(
            self.preset,
            vocab_size=vocab_size,
            context_length=self.context_length,
            n_layer=self.n_layer,
            n_head=self.n_head,
            n_kv_head=self.n_kv_head,
            d_model=self.d_model,
            dropout=self.dropout,
            **{name: getattr(self, name) for name in MODEL_SWITCHES},
        )

    def lr_schedule(self) -> Callable[[int], float]:
        """The learning rate at each step, as :func:`minillm.optim.make_schedule` builds it from these settings."""
        args: dict[str, float] = dict(
            max_lr=self.lr, warmup_steps=self.warmup_steps, total_steps=max(self.max_steps, 1)
        )
        if self.schedule in ("cosine", "linear", "wsd"):
            args["min_lr"] = self.min_lr
        if self.schedule == "wsd":
            args["decay_steps"] = self.decay_steps
        return make_schedule(self.schedule, **args)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.grad_accum * self.context_length

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """A config from a dict of fields; an unknown field is refused, with the closest known name."""
        if not isinstance(data, dict):
            raise ConfigError(f"TrainConfig.from_dict needs a dict of settings, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            guesses = {name: difflib.get_close_matches(name, known, n=1) for name in unknown}
            hints = "".join(f"; {name!r}: did you mean {close[0]!r}?" for name, close in guesses.items() if close)
            raise ConfigError(f"unknown TrainConfig fields {unknown}{hints}; known: {sorted(known)}")
        return cls(**data)

    @staticmethod
    def json_settings(path: str | os.PathLike) -> dict[str, Any]:
        """The settings a JSON config file holds (keys starting with ``_`` are comments), not yet checked.

        Separate from :meth:`from_json` so a command line can lay its flags over a file before the whole
        is checked: a file may be valid only together with the flags given with it.
        """
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as err:
            raise FileNotFoundError(f"{path}: config file not found") from err
        except UnicodeDecodeError as err:
            raise ConfigError(f"{path}: a config file must be UTF-8 JSON text ({err})") from err
        except json.JSONDecodeError as err:
            raise ConfigError(
                f"{path}: not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}; "
                "check for a trailing comma, a missing comma or quote, or single quotes"
            ) from err
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a config file must hold a JSON object, got {type(data).__name__}")
        return {k: v for k, v in data.items() if not k.startswith("_")}

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> TrainConfig:
        """Read and check a JSON config file; errors name the file."""
        settings = cls.json_settings(path)
        try:
            return cls.from_dict(settings)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from err


def resumable_fields() -> dict[str, str]:
    """The settings ``--resume`` may change, each with why that is safe (declared on the fields)."""
    return {f.name: f.metadata["resumable"] for f in dataclasses.fields(TrainConfig) if f.metadata.get("resumable")}


def run_level_fields() -> tuple[str, ...]:
    """The settings each run chooses for itself (files, seed, device…): a recipe or run size never sets them."""
    return tuple(f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get("run_level"))


def location_fields() -> tuple[str, ...]:
    """Where the run's files go: never compared when a run is resumed (a moved folder is the same run)."""
    return tuple(f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get("location"))
