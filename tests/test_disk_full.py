"""A full disk is reported as "disk full while writing <file>", and leaves no state that blocks the next run.

The full disk is simulated (:func:`run_helpers.full_disk`): the ``open`` of one module returns files whose
writes fail with ``ENOSPC`` after a given number of bytes, as the operating system's would; the bytes that
fit are written, so a writer that does not clean up leaves a truncated file behind.
"""

from __future__ import annotations

import os
import time

import pytest
import torch
from run_helpers import full_disk, snapshot, steps_of, train_args, write_corpus

from minillm import checkpoint, datagen, run_folder
from minillm.checkpoint import load_checkpoint, save_checkpoint
from minillm.run_folder import LOCK_FILE, DiskFullError, RunFolderLocked, locked, write_all_atomically, write_record
from minillm.train.cli import main as train_main

# ------------------------------------------------------------------------------ the lock


def test_a_lock_that_cannot_be_written_is_removed_and_blocks_no_later_run(tmp_path, monkeypatch) -> None:
    write_corpus(tmp_path)
    (tmp_path / "out").mkdir()
    full_disk(monkeypatch, run_folder)
    with pytest.raises(SystemExit, match=f"disk full while writing the lock {tmp_path / 'out' / LOCK_FILE}"):
        train_main(train_args(tmp_path, 2))
    assert not (tmp_path / "out" / LOCK_FILE).exists()
    monkeypatch.undo()  # space freed
    train_main(train_args(tmp_path, 2))
    assert steps_of(tmp_path / "out") == 2


def test_an_empty_lock_is_taken_over_only_once_no_writer_can_still_be_filling_it(tmp_path, capsys) -> None:
    """An empty lock, left by an older minillm on a full disk, used to refuse every run until deleted by hand."""
    lock = tmp_path / LOCK_FILE
    lock.write_text("")
    with pytest.raises(RunFolderLocked, match="names no process"):  # just created: a run may be starting
        with locked(tmp_path):
            pass
    old = time.time() - 600
    os.utime(lock, (old, old))
    with locked(tmp_path):
        pass
    assert "taking over a stale lock" in capsys.readouterr().err and not lock.exists()


# ------------------------------------------------------------------------------ checkpoints


def _state(value: float) -> dict:
    return {"step": 3, "weights": torch.full((64, 64), value)}


def test_a_checkpoint_save_on_a_full_disk_says_so_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch) -> None:
    path = save_checkpoint(_state(1.0), tmp_path / "checkpoint.pt")
    full_disk(monkeypatch, checkpoint, room=3000)
    with pytest.raises(DiskFullError) as stopped:
        save_checkpoint(_state(2.0), path)
    message = str(stopped.value)
    assert f"disk full while writing {path}" in message and "the previous checkpoint" in message
    monkeypatch.undo()
    assert torch.equal(load_checkpoint(path)["weights"], torch.full((64, 64), 1.0))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temporary file left


def test_a_training_run_stopped_by_a_full_disk_resumes_once_there_is_space(tmp_path, monkeypatch) -> None:
    write_corpus(tmp_path)
    args = [*train_args(tmp_path, 4), "--checkpoint-interval", "2"]
    full_disk(monkeypatch, checkpoint, after_files=1)  # the step-2 checkpoint fits, the step-4 one does not
    with pytest.raises(SystemExit, match=r"error: disk full while writing .*checkpoint\.pt"):
        train_main(args)
    monkeypatch.undo()
    work = tmp_path / "out" / "work"
    assert not (tmp_path / "out" / LOCK_FILE).exists() and not list(work.glob(".checkpoint.pt.tmp-*"))
    assert load_checkpoint(work / "checkpoint.pt")["step"] == 2
    train_main([*args, "--resume"])
    assert steps_of(tmp_path / "out") == 4


# ------------------------------------------------------------------------------ records and data files


def test_files_written_together_are_all_replaced_or_none(tmp_path, monkeypatch) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    write_all_atomically({first: b"old a", second: b"old b"})
    full_disk(monkeypatch, run_folder, room=100, after_files=1)
    with pytest.raises(DiskFullError, match=f"disk full while writing {second}"):
        write_all_atomically({first: b"new a", second: b"new b" * 100})
    with pytest.raises(DiskFullError, match=f"disk full while writing {first}"):
        write_record(first, {"big": "x" * 1000})
    assert first.read_bytes() == b"old a" and second.read_bytes() == b"old b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]


def test_datagen_on_a_full_disk_leaves_no_truncated_file_and_no_stale_manifest(tmp_path, monkeypatch, capsys) -> None:
    """It used to leave a truncated sft_train.jsonl (the file being written) and no manifest."""
    files = {"stories_train.txt": b"Once upon a time.\n" * 10, "sft_train.jsonl": b'{"messages": []}\n' * 500}
    monkeypatch.setattr(datagen, "generate_files", lambda seed: files)
    full_disk(monkeypatch, run_folder, room=1000, after_files=1)
    with pytest.raises(SystemExit, match=r"error: disk full while writing .*sft_train\.jsonl"):
        datagen.main(["--out", str(tmp_path)])
    assert snapshot(tmp_path) == {}  # nothing half-written, nothing without its manifest
    monkeypatch.setattr(datagen, "describe", lambda files: "")
    full_disk(monkeypatch, run_folder, room=10**6)
    datagen.main(["--out", str(tmp_path)])
    assert datagen.read_manifest(tmp_path / datagen.MANIFEST).keys() == files.keys()
    assert all((tmp_path / name).read_bytes() == content for name, content in files.items())
