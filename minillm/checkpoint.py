"""Saving and loading training state safely.

Two formats, for two jobs:

- **Training checkpoints** (:func:`save_checkpoint` / :func:`load_checkpoint`): everything needed to
  continue a run exactly — model, optimizer, step, RNG states, data position — in one ``torch.save``
  file. Writing goes to a temporary file in the same folder, is flushed to disk, then renamed over the
  old file: a crash mid-write leaves the previous checkpoint untouched. Loading uses
  ``weights_only=True`` (no arbitrary code from pickles) and turns a truncated or corrupt file into a
  :class:`CheckpointError` that names it.
- **Pretrained models** (:func:`save_pretrained` / :func:`load_pretrained`): a folder with
  ``model.safetensors`` (weights only, no pickle), ``config.json`` (model config plus any metadata) and
  ``tokenizer.json``. This is what the course ships as its base checkpoint.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from minillm.model import GPT, GPTConfig
from minillm.tokenizer import BPETokenizer

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be read (truncated, corrupt, or not a checkpoint)."""


def _replace_atomically(tmp: Path, path: Path) -> None:
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:  # make the rename itself durable (not supported on every platform)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write ``state`` (tensors, numbers, strings, lists, dicts) to ``path`` atomically."""
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict, got {type(state).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        torch.save(state, tmp)
        _replace_atomically(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`, with ``weights_only=True``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: checkpoint not found")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises several types for damaged zip archives and pickles
        raise CheckpointError(
            f"{path}: cannot read checkpoint ({type(exc).__name__}: {exc}); it is truncated or corrupt"
        ) from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: expected a dict of training state, found {type(state).__name__}")
    return state


def _write_text_atomically(text: str, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    _replace_atomically(tmp, path)


def save_pretrained(
    directory: str | os.PathLike,
    model: GPT,
    tokenizer: BPETokenizer | None = None,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Save ``model`` (safetensors), its config and ``metadata`` (JSON), and ``tokenizer`` to ``directory``."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a minillm GPT, got {type(model).__name__}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{MODEL_FILE}.tmp-{os.getpid()}"
    save_model(model, str(tmp))  # handles the tied embedding / head weight
    _replace_atomically(tmp, directory / MODEL_FILE)
    config = {"model": model.config.to_dict(), **(metadata or {})}
    _write_text_atomically(json.dumps(config, indent=2) + "\n", directory / CONFIG_FILE)
    if tokenizer is not None:
        tokenizer.save(directory / TOKENIZER_FILE)
    return directory


def load_pretrained(
    directory: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[GPT, BPETokenizer | None, dict[str, Any]]:
    """Load a folder written by :func:`save_pretrained`: ``(model in eval mode, tokenizer or None, config)``."""
    directory = Path(directory)
    config_path, model_path = directory / CONFIG_FILE, directory / MODEL_FILE
    for needed in (config_path, model_path):
        if not needed.is_file():
            raise FileNotFoundError(f"{needed}: not found; is {directory} a saved model folder?")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    model = GPT(GPTConfig.from_dict(config["model"]))
    try:
        load_model(model, str(model_path), strict=True)
    except Exception as exc:
        raise CheckpointError(f"{model_path}: cannot load weights ({type(exc).__name__}: {exc})") from exc
    tokenizer_path = directory / TOKENIZER_FILE
    tokenizer = BPETokenizer.load(tokenizer_path) if tokenizer_path.is_file() else None
    return model.to(device).eval(), tokenizer, config
