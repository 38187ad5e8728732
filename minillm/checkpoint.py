"""Saving and loading training state safely.

Two formats, for two jobs:

- **Training checkpoints** (:func:`save_checkpoint` / :func:`load_checkpoint`): everything needed to
  continue a run exactly — model, optimizer, step, RNG states, data position — in one ``torch.save``
  file. Writing goes to a temporary file in the same folder, is flushed to disk, then renamed over the
  old file: a crash mid-write leaves the previous checkpoint untouched, and a full disk is reported as a
  :class:`~minillm.run_folder.DiskFullError` naming the file (the temporary file is removed; one left by a
  killed process is removed by :func:`remove_stale_temp_files`, which a run calls while it holds the
  folder's lock). Loading uses
  ``weights_only=True`` (no arbitrary code from pickles) and turns a truncated or corrupt file into a
  :class:`CheckpointError` that names it.
- **Pretrained models** (:func:`save_pretrained` / :func:`load_pretrained`): a folder with
  ``model.safetensors`` (weights only, no pickle), ``config.json`` (model config plus any metadata),
  ``tokenizer.json`` and ``checksums.sha256``. This is what the course ships as its base checkpoint.

Both carry a sha256 checksum, verified on every load. A file format's own checks do not catch flipped bytes
inside tensor data: a zip archive's CRCs are not read by ``torch.load``, and safetensors has no checksum at
all, so a damaged disk or copy would otherwise hand back a model with quietly altered weights. A checkpoint
stores the digest of its own contents (:func:`state_digest`) inside the file, so the pair is replaced in one
atomic rename; a model folder lists the sha256 of each file in ``checksums.sha256`` (``sha256sum`` format,
so ``sha256sum -c checksums.sha256`` checks it too). Files written before checksums existed still load,
with an :class:`UnverifiedCheckpointWarning`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from minillm.model import GPT, GPTConfig
from minillm.run_folder import DiskFullError, is_disk_full, sha256_file, write_atomically
from minillm.tokenizer import BPETokenizer

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
CHECKSUM_FILE = "checksums.sha256"

_FORMAT_KEY = "minillm_checkpoint"  # marks a checkpoint that wraps its state with a checksum
_FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be read (truncated, corrupt, or not a checkpoint)."""


class UnverifiedCheckpointWarning(UserWarning):
    """A checkpoint or model folder was loaded without a checksum to verify it against (an older save)."""


# ------------------------------------------------------------------------------------------- checksums
def state_digest(state: Any) -> str:
    """The sha256 of a training state: every tensor's dtype, shape and bytes, and every other value, in order.

    Hashing the loaded values (rather than the file) lets the digest travel inside the file it describes.
    Lists and tuples hash alike, as do a dict and an OrderedDict, because a pickle round trip may turn one
    into the other; tensors are hashed on the CPU, whatever device they live on.
    """
    digest = hashlib.sha256()
    _feed(digest, state)
    return digest.hexdigest()


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        tensor = value.detach().to("cpu").contiguous()
        digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}:".encode())
        digest.update(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
    elif isinstance(value, Mapping):
        digest.update(f"D{len(value)}:".encode())
        for key, item in value.items():
            _feed(digest, key)
            _feed(digest, item)
    elif isinstance(value, (list, tuple)):
        digest.update(f"L{len(value)}:".encode())
        for item in value:
            _feed(digest, item)
    elif isinstance(value, str):
        encoded = value.encode("utf-8", errors="surrogatepass")
        digest.update(f"S{len(encoded)}:".encode() + encoded)
    elif isinstance(value, bytes):
        digest.update(f"Y{len(value)}:".encode() + value)
    elif isinstance(value, bool) or value is None:
        digest.update(f"{value!r};".encode())
    elif isinstance(value, int):
        digest.update(f"I{value};".encode())
    elif isinstance(value, float):
        digest.update(f"F{value.hex()};".encode())  # exact, and defined for nan and inf
    else:  # torch.dtype, torch.device, torch.Size ...: what weights_only lets through has a stable repr
        digest.update(f"O{type(value).__qualname__}:{value!r};".encode())


def write_checksums(directory: str | os.PathLike, names: Iterable[str]) -> Path:
    """Write ``directory/checksums.sha256`` listing the sha256 of each named file (``sha256sum`` format)."""
    directory = Path(directory)
    lines = "".join(f"{sha256_file(directory / name)}  {name}\n" for name in sorted(set(names)))
    path = directory / CHECKSUM_FILE
    _write_text_atomically(lines, path)
    return path


def read_checksums(path: str | os.PathLike) -> dict[str, str]:
    """File name → sha256 from a ``checksums.sha256``; a malformed line raises :class:`CheckpointError`."""
    path = Path(path)
    listed: dict[str, str] = {}
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise CheckpointError(
            f"{path}, line {line}: not UTF-8 text (byte {raw[err.start]:#04x} at offset {err.start}); a checksum "
            "file holds '<64 hex digits>  <file name>' lines: restore it from the run that wrote the folder"
        ) from None
    for number, line in enumerate(text.splitlines(), start=1):
        digest, sep, name = line.partition("  ")
        well_formed = sep and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
        if not (well_formed and name and Path(name).name == name and name not in (".", "..")):
            raise CheckpointError(
                f"{path}, line {number}: expected '<64 hex digits>  <file name in this folder>', got {line!r}"
            )
        listed[name] = digest
    return listed


def verify_checksums(directory: str | os.PathLike, reads: Iterable[str]) -> bool:
    """Check every file listed in ``directory/checksums.sha256``, and that each file in ``reads`` is listed.

    Returns False (and checks nothing) when the folder has no checksum file; raises :class:`CheckpointError`
    naming the file when one is missing, unlisted or altered.
    """
    directory = Path(directory)
    path = directory / CHECKSUM_FILE
    if not path.is_file():
        return False
    listed = read_checksums(path)
    for name in reads:
        if name not in listed:
            raise CheckpointError(
                f"{directory / name}: not listed in {path}, so it was added or replaced after the folder was "
                "saved; save the folder again with save_pretrained (or remove the file)"
            )
    for name, expected in listed.items():
        file = directory / name
        if not file.is_file():
            raise CheckpointError(f"{file}: listed in {path} but missing; copy the whole folder again")
        found = sha256_file(file)
        if found != expected:
            raise CheckpointError(
                f"{file}: sha256 {found[:12]}... does not match {expected[:12]}... recorded in {path}; the file "
                "is corrupt or was edited after saving: restore a good copy, or save the folder again"
            )
    return True


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


def _temp_path(path: Path) -> Path:
    """Where :func:`save_checkpoint` writes ``path`` before the rename: ``.NAME.tmp-PID``."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write ``state`` (tensors, numbers, strings, lists, dicts) to ``path`` atomically, with its checksum.

    Written through a Python file object rather than a path: torch's own writer reports a full disk as a
    bare "file write failed", while the file object's ``OSError`` says why (see :func:`is_disk_full`).
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict, got {type(state).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_path(path)
    payload = {_FORMAT_KEY: _FORMAT_VERSION, "sha256": state_digest(state), "state": state}
    try:
        with open(tmp, "wb") as handle:
            torch.save(payload, handle)
        _replace_atomically(tmp, path)
    except (OSError, RuntimeError) as error:
        if is_disk_full(error):
            kept = f"the previous checkpoint {path} is unchanged" if path.is_file() else "no checkpoint was kept"
            raise DiskFullError(
                f"disk full while writing {path} (to {tmp.name}, now removed): {kept}; free some space, then "
                "continue the run (python -m minillm.train --resume)"
            ) from error
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return path


def remove_stale_temp_files(path: str | os.PathLike, names: str | None = None) -> list[Path]:
    """Delete the temporary files that saves of ``path`` left when their process was killed; returns them.

    Only files of :func:`save_checkpoint`'s own naming, ``.NAME.tmp-PID``, where NAME is ``path``'s name or
    matches the regular expression ``names`` (an FSDP run's shard files). Call it only while holding the
    folder's lock (:func:`minillm.run_folder.locked`): then no live process is writing one of them.
    """
    path = Path(path)
    pattern = re.compile(rf"\.(?:{names or re.escape(path.name)})\.tmp-\d+")
    if not path.parent.is_dir():
        return []
    stale = sorted(p for p in path.parent.iterdir() if pattern.fullmatch(p.name) and p.is_file())
    for file in stale:
        file.unlink(missing_ok=True)
    return stale


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`, with ``weights_only=True``, and verify its checksum."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: checkpoint not found")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises several types for damaged zip archives and pickles
        raise CheckpointError(
            f"{path}: cannot read checkpoint ({type(exc).__name__}: {exc}); it is truncated or corrupt"
        ) from exc
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: expected a dict of training state, found {type(payload).__name__}")
    if _FORMAT_KEY not in payload:
        warnings.warn(
            f"{path}: has no checksum (saved by an older minillm), so corruption cannot be detected; "
            "it was loaded unverified, and the next save will add one",
            UnverifiedCheckpointWarning,
            stacklevel=2,
        )
        return payload
    state, recorded = payload.get("state"), payload.get("sha256")
    if not isinstance(state, dict) or not isinstance(recorded, str):
        raise CheckpointError(f"{path}: checkpoint lacks its 'state' or 'sha256' entry; it is corrupt")
    if state_digest(state) != recorded:
        raise CheckpointError(
            f"{path}: checksum mismatch: the tensors and values read back do not hash to the sha256 recorded "
            "when it was saved, so the file is corrupt (a disk or copy error); restore a good copy, or start "
            "the run again without resuming from it"
        )
    return state


def _write_text_atomically(text: str, path: Path) -> None:
    write_atomically(path, text.encode("utf-8"))


def save_pretrained(
    directory: str | os.PathLike,
    model: GPT,
    tokenizer: BPETokenizer | None = None,
    metadata: dict[str, Any] | None = None,
    extra_files: Mapping[str, str] | None = None,
) -> Path:
    """Save ``model`` (safetensors), its config and ``metadata`` (JSON), and ``tokenizer`` to ``directory``.

    ``extra_files`` (file name → text) are written beside them, e.g. a reward model's ``head.json``. Every
    file is listed with its sha256 in ``checksums.sha256``, written last, which :func:`load_pretrained` checks.
    """
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a minillm GPT, got {type(model).__name__}")
    if tokenizer is not None:
        _check_vocab_sizes(tokenizer, model, "the tokenizer passed to save_pretrained", "the model", ValueError)
    extra_files = dict(extra_files or {})
    for name in extra_files:
        if Path(name).name != name or name in (MODEL_FILE, CONFIG_FILE, TOKENIZER_FILE, CHECKSUM_FILE):
            raise ValueError(f"extra file name {name!r} must be a plain file name other than the folder's own files")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{MODEL_FILE}.tmp-{os.getpid()}"
    save_model(model, str(tmp))  # handles the tied embedding / head weight
    _replace_atomically(tmp, directory / MODEL_FILE)
    config = {"model": model.config.to_dict(), **(metadata or {})}
    _write_text_atomically(json.dumps(config, indent=2) + "\n", directory / CONFIG_FILE)
    written = [MODEL_FILE, CONFIG_FILE]
    if tokenizer is not None:
        tokenizer.save(directory / TOKENIZER_FILE)
        written.append(TOKENIZER_FILE)
    for name, text in extra_files.items():
        _write_text_atomically(text, directory / name)
        written.append(name)
    write_checksums(directory, written)
    return directory


def load_pretrained(
    directory: str | os.PathLike, device: str | torch.device = "cpu", extra_files: Iterable[str] = ()
) -> tuple[GPT, BPETokenizer | None, dict[str, Any]]:
    """Load a folder written by :func:`save_pretrained`: ``(model in eval mode, tokenizer or None, config)``.

    Every file is checked against ``checksums.sha256`` first, including the ``extra_files`` the caller will
    read itself; a folder without one (saved by an older minillm) loads with an
    :class:`UnverifiedCheckpointWarning`. The tokenizer must have exactly the model's vocabulary size: a
    smaller one cannot decode ids the model samples, a larger one makes ids the model cannot embed.
    """
    directory = Path(directory)
    config_path = directory / CONFIG_FILE
    model_path = directory / MODEL_FILE
    tokenizer_path = directory / TOKENIZER_FILE
    for needed in (config_path, model_path):
        if not needed.is_file():
            raise FileNotFoundError(f"{needed}: not found; is {directory} a saved model folder?")
    reads = [MODEL_FILE, CONFIG_FILE, *([TOKENIZER_FILE] if tokenizer_path.is_file() else []), *extra_files]
    if not verify_checksums(directory, reads):
        warnings.warn(
            f"{directory}: no {CHECKSUM_FILE} (saved by an older minillm), so corruption cannot be detected; "
            "loaded unverified. Save it again with save_pretrained, or minillm.checkpoint.write_checksums, "
            "to record one",
            UnverifiedCheckpointWarning,
            stacklevel=2,
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        model = GPT(GPTConfig.from_dict(config["model"]))
    except (ValueError, TypeError, KeyError) as exc:
        raise CheckpointError(f"{config_path}: not a valid model config ({type(exc).__name__}: {exc})") from exc
    try:
        load_model(model, str(model_path), strict=True)
    except Exception as exc:
        raise CheckpointError(f"{model_path}: cannot load weights ({type(exc).__name__}: {exc})") from exc
    tokenizer = BPETokenizer.load(tokenizer_path) if tokenizer_path.is_file() else None
    if tokenizer is not None:
        _check_vocab_sizes(tokenizer, model, str(tokenizer_path), str(model_path))
    return model.to(device).eval(), tokenizer, config


def _check_vocab_sizes(
    tokenizer: BPETokenizer, model: GPT, tokenizer_name: str, model_name: str, error: type[Exception] = CheckpointError
) -> None:
    if tokenizer.vocab_size != model.config.vocab_size:
        raise error(
            f"{tokenizer_name} has {tokenizer.vocab_size} ids but {model_name} has vocab_size="
            f"{model.config.vocab_size}; they do not belong together: pair the model with the tokenizer it "
            f"was trained with (or build the model with vocab_size=tokenizer.vocab_size)"
        )
