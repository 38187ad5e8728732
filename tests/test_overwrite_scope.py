"""``--overwrite`` removes only what a minillm run wrote, and only where its record shows a run wrote it.

Each case that used to lose data is rebuilt in a temporary folder: a home folder with the user's own
``data/`` and ``eval/``, a clone's root (the course data, base models and notebooks), a model exported for
Hugging Face. Every one is refused with the files named, and a snapshot of every file's content shows that
nothing was deleted or changed. Pipeline phases are stand-ins (the folder handling is what is tested);
training runs are tiny (about a second).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from run_helpers import (
    install_fake_phases,
    interrupt_training,
    lock_held_by_another_process,
    run_end_to_end_cli,
    snapshot,
    steps_of,
    train_args,
    write_corpus,
    write_texts,
)

from minillm.checkpoint import remove_stale_temp_files
from minillm.end_to_end.runner import run_files
from minillm.run_folder import refuse_foreign_files
from minillm.train.cli import build_parser, config_from_args
from minillm.train.cli import main as train_main
from minillm.train.run import run_files as train_run_files


@pytest.fixture
def fake_phases(monkeypatch) -> list[str]:
    return install_fake_phases(monkeypatch)


def _files(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")


# ------------------------------------------------------------------------------ python -m minillm


@pytest.mark.parametrize("overwrite", [True, False])
def test_a_home_folder_with_the_users_data_and_eval_is_refused_untouched(tmp_path, fake_phases, overwrite) -> None:
    a, _ = write_texts(tmp_path)
    home = tmp_path / "home"
    _files(home, {"data/thesis_corpus.txt": "years of work", "eval/my_results.csv": "a,b\n1,2\n", "notes.md": "x"})
    before = snapshot(home)
    with pytest.raises(SystemExit) as stopped:
        run_end_to_end_cli(home, "--text", str(a), *(["--overwrite"] if overwrite else []))
    message = str(stopped.value)
    assert str(home) in message and "data/thesis_corpus.txt" in message and "eval/my_results.csv" in message
    assert "nothing was removed" in message
    assert snapshot(home) == before and fake_phases == []  # no file removed, none written, no phase ran


def test_a_clones_root_is_refused_untouched(tmp_path, fake_phases) -> None:
    """``--run-dir . --overwrite`` from a clone's root used to delete 44 committed files, then crash."""
    clone = tmp_path / "clone"
    _files(
        clone,
        {
            "README.md": "# course",
            "data/README.md": "data card",
            "data/MANIFEST.sha256": "0" * 64 + "  stories_train.txt\n",
            "data/stories_train.txt": "Once upon a time.\n",
            "data/stories_val.txt": "The end.\n",
            "data/base/model.safetensors": "weights",
            "data/base/config.json": "{}",
            "data/posttrain/sft_sweep.json": "{}",
            "notebooks/01_tokenization.ipynb": "{}",
            "minillm/__init__.py": "",
        },
    )
    before = snapshot(clone)
    with pytest.raises(SystemExit, match=r"data/MANIFEST\.sha256.*nothing was removed"):
        run_end_to_end_cli(clone, "--overwrite")
    assert snapshot(clone) == before and fake_phases == []


def test_phase_folders_without_settings_json_are_not_removed(tmp_path, fake_phases) -> None:
    """Files with a run's names are not a run: without the settings.json every run writes first, they stay."""
    home = tmp_path / "home"
    _files(home, {"eval/done.json": "{}", "tokenizer/tokenizer.json": "{}", "report.md": "my report"})
    before = snapshot(home)
    with pytest.raises(SystemExit) as stopped:
        run_end_to_end_cli(home, "--overwrite")
    message = str(stopped.value)
    assert "no settings.json" in message and "nothing was removed" in message and "--run-dir" in message
    assert snapshot(home) == before and fake_phases == []


def test_overwrite_removes_the_runs_own_files_and_nothing_else(tmp_path, fake_phases) -> None:
    a, b = write_texts(tmp_path)
    run = tmp_path / "run"
    run_end_to_end_cli(run, "--text", str(a))
    _files(
        run, {"notes.txt": "mine", "pretrain/work/checkpoint.pt": "ckpt", "pretrain/work/.checkpoint.pt.tmp-77": "x"}
    )
    run_end_to_end_cli(run, "--text", str(b), "--overwrite")
    after = snapshot(run)
    assert (run / "notes.txt").read_text() == "mine"  # the user's file beside the run is left alone
    assert not (run / "pretrain" / "work").exists()  # the old run's checkpoint and its stale temp file are gone
    assert (run / "data" / "train.txt").read_text().startswith("Beta story")
    # what is there now is exactly the new run's files (the stand-in phases write only done.json) and the notes
    phases = {f"{phase}/done.json" for phase in ("tokenizer", "pretrain", "sft", "align", "eval")}
    assert set(after) == {"notes.txt", "settings.json", "data/train.txt", "data/val.txt", *phases}


def test_overwrite_refuses_a_run_folder_with_a_users_file_inside_its_phase_folders(tmp_path, fake_phases) -> None:
    a, _ = write_texts(tmp_path)
    run = tmp_path / "run"
    run_end_to_end_cli(run, "--text", str(a))
    _files(run, {"sft/my_analysis.ipynb": "{}"})
    (run / "pretrain" / "model").mkdir()
    (run / "pretrain" / "model" / "link").symlink_to(tmp_path)  # never followed, never removed
    before = snapshot(run)
    fake_phases.clear()
    with pytest.raises(SystemExit, match=r"sft/my_analysis\.ipynb, pretrain/model/link|pretrain/model/link, sft/my"):
        run_end_to_end_cli(run, "--text", str(a), "--overwrite")
    assert snapshot(run) == before and fake_phases == [] and (run / "pretrain" / "model" / "link").is_symlink()


# ------------------------------------------------------------------------------ python -m minillm.train


def _export_folder(folder: Path) -> None:
    """What a model exported for Hugging Face transformers holds (no run.json: no minillm run wrote it)."""
    _files(
        folder,
        {
            "config.json": json.dumps({"model_type": "gpt2"}),
            "model.safetensors": "weights",
            "tokenizer.json": "{}",
            "tokenizer_config.json": "{}",
            "special_tokens_map.json": "{}",
            "generation_config.json": "{}",
        },
    )


@pytest.mark.parametrize("flag", ["--overwrite", None])
def test_train_into_a_hugging_face_export_folder_is_refused_untouched(tmp_path, flag) -> None:
    write_corpus(tmp_path)
    export = tmp_path / "out"
    _export_folder(export)
    before = snapshot(export)
    with pytest.raises(SystemExit) as stopped:
        train_main([*train_args(tmp_path, 2), *([flag] if flag else [])])
    message = str(stopped.value)
    assert str(export) in message and "no run.json" in message and "model.safetensors" in message
    assert snapshot(export) == before


def test_a_committed_model_folder_without_its_run_json_may_be_overwritten(tmp_path) -> None:
    """As the README regenerates data/base (committed without run.json): its config.json and checksums.sha256
    record the run that saved it. Once its files no longer match their checksums, nothing shows that."""
    write_corpus(tmp_path)
    train_main(train_args(tmp_path, 2))
    out = tmp_path / "out"
    for name in ("run.json", "history.json", "work/checkpoint.pt", "work/tokenizer.json", "work/train.bin"):
        (out / name).unlink()  # what data/base does not keep (its work folder is elsewhere)
    (out / "work" / "val.bin").unlink()
    (out / "work").rmdir()
    weights = (out / "model.safetensors").read_bytes()
    (out / "model.safetensors").write_bytes(b"replaced by hand")
    tampered = snapshot(out)
    with pytest.raises(SystemExit, match="no run.json"):
        train_main([*train_args(tmp_path, 3), "--overwrite"])
    assert snapshot(out) == tampered
    (out / "model.safetensors").write_bytes(weights)
    train_main([*train_args(tmp_path, 3), "--overwrite"])
    assert steps_of(out) == 3


def test_train_overwrite_refuses_a_users_file_in_the_work_folder(tmp_path) -> None:
    write_corpus(tmp_path)
    train_main(train_args(tmp_path, 2))
    _files(tmp_path / "out", {"work/my_tokens.npy": "mine"})
    before = snapshot(tmp_path / "out")
    with pytest.raises(SystemExit, match=r"work/my_tokens\.npy; nothing was removed or written"):
        train_main([*train_args(tmp_path, 3), "--overwrite"])
    assert snapshot(tmp_path / "out") == before


def test_train_overwrite_leaves_files_beside_the_run_alone(tmp_path) -> None:
    write_corpus(tmp_path)
    train_main(train_args(tmp_path, 2))
    _files(tmp_path / "out", {"notes.txt": "mine"})
    train_main([*train_args(tmp_path, 3), "--overwrite"])
    assert steps_of(tmp_path / "out") == 3 and (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_the_train_layout_covers_every_file_a_run_writes(tmp_path, monkeypatch) -> None:
    """An interrupted run (checkpoint, token files), then a finished one: --overwrite must know all their files."""
    write_corpus(tmp_path)
    args = [*train_args(tmp_path, 4), "--checkpoint-interval", "1"]
    interrupt_training(monkeypatch, lambda: train_main(args), at_step=2)
    train_main([*args, "--resume"])
    config = config_from_args(build_parser().parse_args(args))
    everything = {p for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert len(everything) >= 11  # model folder (4), history (2), run.json, checkpoint, tokenizer, 2 token files
    assert set(refuse_foreign_files(train_run_files(config), "fix")) == everything


def test_the_pipeline_layout_names_every_phase_folder(tmp_path) -> None:
    """A phase added to the pipeline must get its place in the layout (else --overwrite refuses its folder)."""
    from minillm.end_to_end.phases import PHASES

    owned = {path.relative_to(tmp_path).parts[0] for path in run_files(tmp_path).owned}
    assert owned == {*PHASES, "data"}


# ------------------------------------------------------------------------------ stale checkpoint temp files


def test_only_stale_temp_files_of_the_checkpoints_own_naming_are_removed(tmp_path) -> None:
    names = [
        ".checkpoint.pt.tmp-123",  # a killed save of checkpoint.pt
        ".checkpoint.pt.tmp-9",
        ".checkpoint.pt.tmp-abc",  # not a pid
        ".checkpoint.pt.tmp-1.bak",
        ".other.pt.tmp-5",  # another file's
        "checkpoint.pt",
        "notes.txt",
    ]
    for name in names:
        (tmp_path / name).write_text("x")
    removed = remove_stale_temp_files(tmp_path / "checkpoint.pt")
    assert sorted(p.name for p in removed) == [".checkpoint.pt.tmp-123", ".checkpoint.pt.tmp-9"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(set(names) - {p.name for p in removed})
    shard = re.escape("checkpoint") + r"\.step\d+\.rank\d+-of-\d+\.pt"
    (tmp_path / ".checkpoint.step00000004.rank1-of-2.pt.tmp-44").write_text("x")
    assert [p.name for p in remove_stale_temp_files(tmp_path / "checkpoint.pt", shard)] == [
        ".checkpoint.step00000004.rank1-of-2.pt.tmp-44"
    ]


def test_resume_removes_stale_checkpoint_temp_files_but_not_while_another_run_holds_the_lock(tmp_path, capsys) -> None:
    write_corpus(tmp_path)
    train_main([*train_args(tmp_path, 2), "--checkpoint-interval", "1"])
    work = tmp_path / "out" / "work"
    stale = [work / f".checkpoint.pt.tmp-{pid}" for pid in (4001, 4002)]
    for path in stale:
        path.write_bytes(b"\0" * 1000)  # what a save killed half way leaves
    with lock_held_by_another_process(tmp_path / "out"):
        with pytest.raises(SystemExit, match="is locked by a running process"):
            train_main([*train_args(tmp_path, 3), "--resume"])
        assert all(path.exists() for path in stale)  # a live writer's folder is left alone
    train_main([*train_args(tmp_path, 3), "--resume"])
    assert not any(path.exists() for path in stale) and steps_of(tmp_path / "out") == 3
    assert "removed 2 temporary file(s) of interrupted checkpoint saves" in capsys.readouterr().err
