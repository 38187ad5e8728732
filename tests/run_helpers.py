"""Helpers shared by the tests of run folders (test_run_safety, test_overwrite_scope, test_resume_inputs,
test_disk_full): a tiny corpus and training flags, stand-ins for the pipeline's phases, a process that
really holds a lock, a snapshot of a folder's files, and a disk that fills up."""

from __future__ import annotations

import builtins
import contextlib
import errno
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from minillm.end_to_end import runner
from minillm.end_to_end.cli import main as pipeline_main

STORY = "Once upon a time, {n} had a {t}. {n} played with the {t} every day. The end."


def write_corpus(folder: Path, n: int = 60, names: tuple[str, ...] = ("Tom", "Lily", "Ben")) -> tuple[Path, Path]:
    """``train.txt`` (``n`` short stories) and ``val.txt`` (the first 8) in ``folder``."""
    stories = [STORY.format(n=names[i % len(names)], t=("ball", "cat", "boat")[i % 3]) for i in range(n)]
    train, val = folder / "train.txt", folder / "val.txt"
    train.write_text("\n\n".join(stories) + "\n", encoding="utf-8")
    val.write_text("\n\n".join(stories[:8]) + "\n", encoding="utf-8")
    return train, val


def train_args(folder: Path, steps: int, out: str = "out") -> list[str]:
    """Flags of a tiny ``python -m minillm.train`` run on :func:`write_corpus`'s files (about a second)."""
    return [
        "--train-file", str(folder / "train.txt"), "--val-file", str(folder / "val.txt"),
        "--out-dir", str(folder / out), "--vocab-size", "300", "--n-layer", "1", "--n-head", "2",
        "--d-model", "32", "--context-length", "16", "--batch-size", "2", "--max-steps", str(steps),
        "--warmup-steps", "1", "--eval-interval", "0", "--eval-batches", "1", "--sample-tokens", "4",
        "--no-progress", "--threads", "1", "--device", "cpu",
    ]  # fmt: skip


def steps_of(out: Path) -> int:
    """The steps a finished run in ``out`` recorded in its model folder."""
    return json.loads((out / "config.json").read_text())["metrics"]["steps"]


# ------------------------------------------------------------------------------------------ the pipeline


def install_fake_phases(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace every phase by a stand-in that records its name (and, for pretraining, the text it read)."""
    ran: list[str] = []

    def stand_in(name: str) -> Callable[[Any], dict]:
        def body(run: Any) -> dict:
            ran.append(name)
            return {"text": Path(run.train_file).read_text()[:20]} if name == "pretrain" else {}

        return body

    for phase in ("tokenizer", "pretrain", "sft", "align", "eval"):
        monkeypatch.setattr(runner, f"{phase}_phase", stand_in(phase))
    monkeypatch.setattr(runner, "write_report", lambda folder, metrics, settings: folder / "report.md")
    return ran


def write_texts(folder: Path) -> tuple[Path, Path]:
    """Two own texts of 40 stories, long enough that the validation part (the last 2) fills a tiny window."""
    a, b = folder / "a.txt", folder / "b.txt"
    a.write_text("\n\n".join(f"Alpha story {i}." + " It went on." * 25 for i in range(40)) + "\n")
    b.write_text("\n\n".join(f"Beta story {i}." + " It went on." * 25 for i in range(40)) + "\n")
    return a, b


def run_end_to_end_cli(folder: Path, *extra: str) -> dict:
    """``python -m minillm --size tiny`` into ``folder`` on the CPU, without progress bars."""
    return pipeline_main(["--size", "tiny", "--no-progress", "--device", "cpu", "--run-dir", str(folder), *extra])


# ------------------------------------------------------------------------------------------ folders and locks


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path → sha256): to show that nothing was deleted or changed."""
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


HOLD_LOCK = (
    "import sys, time\n"
    "from minillm.run_folder import locked\n"
    "held = [locked(folder) for folder in sys.argv[1:]]\n"
    "for lock in held:\n"
    "    lock.__enter__()\n"
    "print('locked', flush=True)\n"
    "time.sleep(60)\n"
)


@contextlib.contextmanager
def lock_held_by_another_process(*folders: Path) -> Iterator[subprocess.Popen]:
    """A live process that took the folders' locks the way every run does (with its start time)."""
    process = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, *map(str, folders)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "locked"
        yield process
    finally:
        process.kill()
        process.wait()


# ------------------------------------------------------------------------------------------ a full disk


class _FullDiskFile:
    """A file whose writes fail with ENOSPC once ``room`` bytes are written (the bytes that fit are written)."""

    def __init__(self, handle: Any, room: list[int]) -> None:
        self._handle, self._room = handle, room

    def write(self, data: bytes | str) -> int:
        if len(data) > self._room[0]:
            self._handle.write(data[: self._room[0]])
            self._room[0] = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self._room[0] -= len(data)
        return self._handle.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __enter__(self) -> _FullDiskFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


def full_disk(monkeypatch: pytest.MonkeyPatch, module: Any, room: int = 0, after_files: int = 0) -> None:
    """Make ``open(..., "w"/"x")`` inside ``module`` run out of space after ``room`` bytes.

    The first ``after_files`` files opened for writing still fit whole. Only that module's writes are hit
    (its global ``open`` shadows the built-in one), so pytest and everything else write as usual.
    """
    left = [after_files]
    space = [room]

    def open_on_full_disk(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = builtins.open(file, mode, *args, **kwargs)
        if not any(flag in mode for flag in "wxa"):
            return handle
        if left[0] > 0:
            left[0] -= 1
            return handle
        return _FullDiskFile(handle, space)

    monkeypatch.setattr(module, "open", open_on_full_disk, raising=False)


def interrupt_training(monkeypatch: pytest.MonkeyPatch, train: Callable[[], Any], at_step: int) -> None:
    """Run ``train()`` with a Ctrl-C raised as step ``at_step`` begins (a killed run), then restore the trainer."""
    from minillm.train.loop import Trainer

    real_step = Trainer.train_step

    def interrupted(self):
        if self.step == at_step:
            raise KeyboardInterrupt
        return real_step(self)

    monkeypatch.setattr(Trainer, "train_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train()
    monkeypatch.undo()
