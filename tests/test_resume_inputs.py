"""``--resume`` trains on exactly what its checkpoint was trained on, or refuses, naming what differs.

A run records the SHA-256 of its working files (``work/tokenizer.json``, ``train.bin``, ``val.bin``) in
``run.json``; a resume checks them, needs its ``run.json``, and refuses a checkpoint copied in from another
run. The pipeline records the validation text it uses. Every run is tiny (about a second).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from run_helpers import install_fake_phases, run_end_to_end_cli, steps_of, train_args, write_corpus

from minillm.end_to_end import runner
from minillm.tokenizer import COURSE_SPECIAL_TOKENS, BPETokenizer
from minillm.train.cli import main as train_main


@pytest.fixture
def trained(tmp_path) -> Path:
    """A finished 4-step run in ``tmp_path/out`` (its checkpoint at step 4 in ``out/work``)."""
    write_corpus(tmp_path)
    train_main(train_args(tmp_path, 4))
    return tmp_path


def _record(folder: Path) -> dict:
    return json.loads((folder / "out" / "run.json").read_text())


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_run_records_the_digests_of_its_tokenizer_and_token_files(trained) -> None:
    work = trained / "out" / "work"
    recorded = _record(trained)["work_files"]
    for key, name in (("tokenizer", "tokenizer.json"), ("train_tokens", "train.bin"), ("val_tokens", "val.bin")):
        assert recorded[key]["sha256"] == _sha256(work / name), key


def test_resume_refuses_a_truncated_token_file(trained) -> None:
    train_bin = trained / "out" / "work" / "train.bin"
    data = train_bin.read_bytes()
    train_bin.write_bytes(data[: len(data) // 2])
    with pytest.raises(SystemExit) as stopped:
        train_main([*train_args(trained, 6), "--resume"])
    message = str(stopped.value)
    assert f"{train_bin} has sha256 {_sha256(train_bin)[:12]}" in message and "recorded" in message
    assert "run.json" in message and steps_of(trained / "out") == 4


def test_resume_refuses_a_swapped_tokenizer(trained) -> None:
    tokenizer_file = trained / "out" / "work" / "tokenizer.json"
    other = BPETokenizer.train(["the dog sat on a log"] * 50, 300, special_tokens=COURSE_SPECIAL_TOKENS)
    other.save(tokenizer_file)
    weights = (trained / "out" / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit, match=f"{tokenizer_file} has sha256"):
        train_main([*train_args(trained, 6), "--resume"])
    assert (trained / "out" / "model.safetensors").read_bytes() == weights  # not saved with the wrong tokenizer


@pytest.mark.parametrize("size", [4001, 4000])  # odd: not whole uint16 ids; even: ids outside the vocabulary
def test_resume_refuses_random_bytes_in_a_token_file_naming_it(trained, size) -> None:
    train_bin = trained / "out" / "work" / "train.bin"
    train_bin.write_bytes(os.urandom(size))
    with pytest.raises(SystemExit, match=f"{train_bin} has sha256"):
        train_main([*train_args(trained, 6), "--resume"])
    # a run recorded before digests were kept still names the file, not a traceback from numpy or torch
    record = _record(trained)
    del record["work_files"]
    (trained / "out" / "run.json").write_text(json.dumps(record))
    with pytest.raises(SystemExit, match=str(train_bin)):
        train_main([*train_args(trained, 6), "--resume"])


def test_resume_encodes_a_deleted_token_file_again_and_continues(trained) -> None:
    (trained / "out" / "work" / "train.bin").unlink()
    train_main([*train_args(trained, 6), "--resume"])
    assert steps_of(trained / "out") == 6


def test_resume_refuses_a_missing_tokenizer(trained) -> None:
    """It used to train a new tokenizer and continue the checkpoint with it."""
    tokenizer_file = trained / "out" / "work" / "tokenizer.json"
    tokenizer_file.unlink()
    with pytest.raises(SystemExit, match=f"{tokenizer_file} is missing"):
        train_main([*train_args(trained, 6), "--resume"])
    assert not tokenizer_file.exists()


def test_resume_refuses_a_run_whose_run_json_was_deleted(trained) -> None:
    """It used to continue with whatever flags were given and write a run.json claiming them."""
    record = trained / "out" / "run.json"
    record.unlink()
    with pytest.raises(SystemExit) as stopped:
        train_main([*train_args(trained, 6), "--resume", "--lr", "0.5"])
    assert f"{record} is missing" in str(stopped.value)
    assert not record.exists() and steps_of(trained / "out") == 4


def test_resume_refuses_a_checkpoint_copied_in_from_another_run(trained) -> None:
    train_main([*train_args(trained, 4, out="other"), "--seed", "1"])
    checkpoint = trained / "out" / "work" / "checkpoint.pt"
    shutil.copy(trained / "other" / "work" / "checkpoint.pt", checkpoint)
    with pytest.raises(SystemExit) as stopped:
        train_main([*train_args(trained, 6), "--resume"])
    message = str(stopped.value)
    assert f"{checkpoint} was not written by the run recorded in" in message and "seed: 1 → 0" in message
    assert steps_of(trained / "out") == 4


def test_resume_refuses_the_checkpoint_of_a_run_with_the_same_settings(trained) -> None:
    """Same flags, another run: only the run id recorded in run.json and in the checkpoint tells them apart."""
    train_main(train_args(trained, 4, out="twin"))
    shutil.copy(trained / "twin" / "work" / "checkpoint.pt", trained / "out" / "work" / "checkpoint.pt")
    own_id = _record(trained)["run_id"]
    with pytest.raises(SystemExit, match=f"run id [0-9a-f]{{32}} in the checkpoint, {own_id} in run.json"):
        train_main([*train_args(trained, 6), "--resume"])


def test_resume_of_a_run_recorded_before_digests_records_them(trained, capsys) -> None:
    record = _record(trained)
    del record["work_files"]
    (trained / "out" / "run.json").write_text(json.dumps(record))
    train_main([*train_args(trained, 6), "--resume"])
    assert steps_of(trained / "out") == 6
    assert _record(trained)["work_files"]["train_tokens"]["sha256"] == _sha256(trained / "out" / "work" / "train.bin")
    assert "records no digest of" in capsys.readouterr().err


# ------------------------------------------------------------------------------ the pipeline's validation text


def test_the_pipeline_records_its_validation_text(tmp_path, monkeypatch) -> None:
    """Editing the validation text used to leave a rerun skipping every phase (it was not in settings.json)."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("stories_train.txt", "stories_val.txt", "sft_train.jsonl", "prefs_train.jsonl"):
        (data / name).write_text(f"{name}\n")
    monkeypatch.setattr(runner, "data_dir", lambda: data)
    install_fake_phases(monkeypatch)
    run = tmp_path / "run"
    run_end_to_end_cli(run)
    settings = json.loads((run / "settings.json").read_text())
    assert settings["val_file"]["sha256"] == _sha256(data / "stories_val.txt")
    (data / "stories_val.txt").write_text("another validation text\n")
    with pytest.raises(SystemExit, match=r"val_file: .*stories_val\.txt \(sha256"):
        run_end_to_end_cli(run)
