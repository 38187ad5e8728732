"""The whole pipeline as one call, :func:`run_end_to_end`: check, lock, record, then run the phases in order.

``python -m minillm`` (:mod:`minillm.end_to_end.cli`) only parses flags and calls it. Before any phase runs,
the run folder is locked (``run.lock``, see :mod:`minillm.run_folder`) and its ``settings.json`` — the
run size with all its values, the algorithm, the seed, the device, and the path and SHA-256 of the
pretraining text, the validation text and the SFT and preference files — is compared with what this call
would run. The same settings: finished phases are skipped and an interrupted pretraining resumes. Any
difference: the run stops and names the differing fields, unless ``overwrite=True`` replaces the folder's
previous outputs: only the files of :func:`run_files`, and only where ``settings.json`` shows a pipeline
wrote them; a folder whose data or phase folders hold anything else is refused either way.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from minillm.checkpoint import CHECKSUM_FILE, CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE
from minillm.data import load_stories
from minillm.device import DeviceError, check_device_name, pick_device
from minillm.end_to_end.phases import (
    PHASES,
    Run,
    align_phase,
    eval_phase,
    pretrain_phase,
    run_phase,
    sft_phase,
    tokenizer_phase,
)
from minillm.end_to_end.report import write_report
from minillm.end_to_end.run_size import RUN_SIZES, get_run_size
from minillm.paths import data_dir
from minillm.run_folder import (
    RunFiles,
    RunFolderError,
    check_record,
    input_file,
    locked,
    read_record,
    refuse_foreign_files,
    remove_run_files,
    write_record,
)
from minillm.train.config import TrainConfig
from minillm.train.run import CHECKPOINT_FILE, work_file_names

__all__ = ["SETTINGS_FILE", "EndToEndError", "run_files", "run_end_to_end", "split_own_text"]

SETTINGS_FILE = "settings.json"
_MODEL = tuple(map(re.escape, (MODEL_FILE, CONFIG_FILE, TOKENIZER_FILE, CHECKSUM_FILE)))
_DONE = re.escape("done.json")
_HISTORY = re.escape("history.json")
#: Keys every pipeline settings.json holds (how --overwrite recognises a pipeline's folder).
_SETTINGS_KEYS = frozenset({"run_size", "run_size_settings", "algorithm", "seed", "text"})
#: The names a settings.json written before the run-size rename uses for them: such a folder is still a pipeline
#: run, compared and continued as it was (its record is rewritten with the new names once it matches).
_LEGACY_SETTINGS_NAMES = {"run_size": "preset", "run_size_settings": "preset_settings"}


def _recorded_names(settings_file: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` under the key names the folder's ``settings.json`` uses (the legacy ones for an older run)."""
    recorded = read_record(settings_file)
    if recorded is None or "run_size" in recorded or "preset" not in recorded:
        return settings
    return {_LEGACY_SETTINGS_NAMES.get(key, key): value for key, value in settings.items()}


def _is_legacy_pipeline_folder(settings_file: Path) -> bool:
    """Whether ``settings_file`` is a pipeline's record from before the rename (its keys under the old names)."""
    try:
        recorded = read_record(settings_file)
    except RunFolderError:
        return False
    legacy = {_LEGACY_SETTINGS_NAMES.get(key, key) for key in _SETTINGS_KEYS}
    return isinstance(recorded, dict) and legacy <= set(recorded)


def run_files(folder: Path) -> RunFiles:
    """Every file a pipeline writes into ``folder``, phase by phase: what ``--overwrite`` may remove.

    The run folder itself is shared (a user's notes there are left alone); the data and phase folders are
    the run's own, so anything else in them stops the run (see :class:`~minillm.run_folder.RunFiles`).
    """
    owned = {
        folder / "data": (re.escape("train.txt"), re.escape("val.txt")),
        folder / "tokenizer": (re.escape(TOKENIZER_FILE), _DONE),
        folder / "pretrain": (_DONE, _HISTORY, re.escape("history.csv")),
        folder / "pretrain" / "work": work_file_names(folder / "pretrain" / "work" / CHECKPOINT_FILE),
        folder / "sft": (_DONE, _HISTORY),
        folder / "align": (_DONE, _HISTORY),
        folder / "eval": (_DONE,),
    }
    owned.update({folder / phase / "model": _MODEL for phase in ("pretrain", "sft", "align")})
    shared = {folder: tuple(map(re.escape, (SETTINGS_FILE, "report.md", "loss_curves.png", "gold_and_kl.png")))}
    return RunFiles(
        folder / SETTINGS_FILE,
        _SETTINGS_KEYS,
        shared,
        owned,
        "a minillm pipeline run",
        recognise=lambda: _is_legacy_pipeline_folder(folder / SETTINGS_FILE),
    )


class EndToEndError(RuntimeError):
    """The pipeline cannot start with the inputs given; the message names the file or value."""


def split_own_text(path: Path) -> tuple[str, str]:
    """A learner's file as train (95 %) and validation (the last 5 % of documents, at least one) texts.

    Only reads: the split is written into the run folder once the folder is locked and its settings
    checked, so a refused run leaves the folder as it was.
    """
    try:
        documents = load_stories(path)  # clear errors for a missing, empty or non-UTF-8 file
    except (OSError, ValueError) as error:
        raise EndToEndError(str(error)) from error
    if len(documents) < 2:
        raise EndToEndError(
            f"{path}: need at least 2 documents (blocks separated by an empty line), found {len(documents)}"
        )
    n_val = max(1, len(documents) // 20)
    return "\n\n".join(documents[:-n_val]) + "\n", "\n\n".join(documents[-n_val:]) + "\n"


def _write_text(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds exactly it (a rerun leaves the file's time alone)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        path.write_text(text, encoding="utf-8")


def _phase_bodies() -> tuple[tuple[str, Callable[[Run], dict]], ...]:
    # looked up at call time, so tests can swap a phase for a fast stand-in
    bodies = {
        "tokenizer": tokenizer_phase,
        "pretrain": pretrain_phase,
        "sft": sft_phase,
        "align": align_phase,
        "eval": eval_phase,
    }
    return tuple((phase, bodies[phase]) for phase in PHASES)


def run_end_to_end(
    size: str = "course",
    run_dir: str | Path = "runs/pipeline",
    text: str | Path | None = None,
    algorithm: str = "dpo",
    device: str | None = None,
    seed: int = 0,
    threads: int | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> dict:
    """Run every phase into ``run_dir`` and write the report; returns each phase's metrics.

    Raises :class:`EndToEndError` for an unusable ``text`` and
    :class:`~minillm.run_folder.RunFolderError` for a locked folder or one that holds a run with other
    settings, both before any phase starts.
    """
    folder = Path(run_dir)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise EndToEndError(f"--threads must be a whole number of at least 1, got {threads!r}")
    if device is not None:
        try:
            check_device_name(device)
        except ValueError as error:
            raise EndToEndError(f"--device: {error}") from error
    if size not in RUN_SIZES:
        raise EndToEndError(f"unknown run size {size!r}; choose one of {', '.join(sorted(RUN_SIZES))}")
    try:
        run_size = get_run_size(size)
    except (FileNotFoundError, ValueError) as error:
        raise EndToEndError(f"--size {size}: {error}") from error
    own = None
    if text is not None and run_size.base is not None:
        raise EndToEndError(
            f"--size {size} post-trains the course's shipped base model, so it takes no --text; "
            "to pretrain on your own text use --size tiny or course"
        )
    if text is not None:
        text = Path(text)
        if not text.is_file():
            raise EndToEndError(f"--text {text}: file not found")
        own = split_own_text(text)
        source = text
        context = run_size.pretrain.get("context_length", TrainConfig.context_length)
        train_bytes = len(own[0].encode("utf-8"))
        if train_bytes < context + 1:  # a byte-level BPE token holds at least one byte
            raise EndToEndError(
                f"--text {text}: {train_bytes:,} bytes of training text (95 % of the documents), "
                f"fewer than one training window needs (context_length + 1 = {context + 1} tokens, each at least "
                "one byte); use a longer text"
            )
        val_bytes = len(own[1].encode("utf-8"))
        if val_bytes < context + 1:
            raise EndToEndError(
                f"--text {text}: {val_bytes:,} bytes of validation text (the last 5 % of the documents, at least "
                f"one), fewer than one validation window needs (context_length + 1 = {context + 1} tokens, each at "
                "least one byte); use a text with more (or longer) documents at its end"
            )
    else:
        source = data_dir() / "stories_train.txt"
    try:
        chosen = pick_device(device)
    except DeviceError as error:
        raise EndToEndError(f"--device: {error}") from error
    if threads is not None:
        torch.set_num_threads(threads)
    sft_file, prefs_file = data_dir() / "sft_train.jsonl", data_dir() / "prefs_train.jsonl"
    try:
        inputs = {"text": input_file(source), "sft_file": input_file(sft_file), "prefs_file": input_file(prefs_file)}
        if own is None:  # the course's validation text (own text's validation part is covered by its digest)
            inputs["val_file"] = input_file(data_dir() / "stories_val.txt")
        base = run_size.base_dir()
        if base is not None:  # the checkpoint a run starts from defines it as much as its data
            inputs["base_model"] = input_file(base / "model.safetensors")
    except FileNotFoundError as error:
        raise EndToEndError(
            f"{error}; the course data ships in data/ (python -m minillm.datagen --out data)"
        ) from error
    settings = {
        "run_size": size,
        "run_size_settings": run_size.to_dict(),
        "algorithm": algorithm,
        "seed": seed,
        "device": str(chosen),
        **inputs,
    }
    with locked(folder):
        settings_file, files = folder / SETTINGS_FILE, run_files(folder)
        refuse_foreign_files(files, "choose another --run-dir")
        if overwrite:
            removed = remove_run_files(files, "choose another --run-dir")
            if removed:
                names = ", ".join(sorted({p.relative_to(folder).parts[0] for p in removed}))
                print(f"--overwrite: removed the previous run's {names} from {folder}", file=sys.stderr)
        else:
            check_record(
                settings_file,
                _recorded_names(settings_file, settings),
                fix="Rerun with the recorded settings to continue it, pass --overwrite to replace it, "
                "or choose another --run-dir.",
            )
        write_record(settings_file, settings)
        if own is not None:
            train_file, val_file = folder / "data" / "train.txt", folder / "data" / "val.txt"
            _write_text(train_file, own[0])
            _write_text(val_file, own[1])
        else:
            train_file, val_file = source, Path(inputs["val_file"]["path"])
        run = Run(
            folder=folder,
            size=run_size,
            train_file=train_file,
            val_file=val_file,
            sft_file=sft_file,
            prefs_file=prefs_file,
            algorithm=algorithm,
            device=chosen,
            seed=seed,
            progress=progress,
        )
        metrics = {phase: run_phase(run, phase, body) for phase, body in _phase_bodies()}
        report = write_report(folder, metrics, settings)
    print(f"report: {report}")
    print(f"talk to what you trained: python -m minillm chat --model {folder / 'align'}")
    return metrics
