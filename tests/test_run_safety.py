"""Runs never silently destroy or misreport a user's files (issue #16, findings 1, 2, 3, 6 and 7).

* ``python -m minillm.train`` refuses an ``--out-dir`` that holds a run unless given ``--resume`` or
  ``--overwrite``, and ``--resume`` refuses changed settings except the resumable ones (``max_steps`` ...).
* ``python -m minillm`` records the text's SHA-256 and the seed, and refuses a rerun with other ones instead
  of skipping every phase; an identical rerun still skips.
* ``python -m minillm.datagen`` needs ``--out`` and does not change files without ``--overwrite``.
* A run folder is locked while a run writes to it; the lock goes away even when the run fails.

Training runs here are tiny (vocabulary 300, one layer, a few steps); the pipeline's phases are swapped for
stand-ins that only record that they ran, since what is tested is the folder handling around them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import (
    install_fake_phases,
    interrupt_training,
    lock_held_by_another_process,
    run_end_to_end_cli,
    steps_of,
    train_args,
    write_corpus,
    write_texts,
)

from minillm import datagen
from minillm.end_to_end import runner
from minillm.end_to_end.cli import main as pipeline_main
from minillm.run_folder import LOCK_FILE, RunFolderError, RunFolderLocked, differences, locked
from minillm.train import Trainer
from minillm.train.cli import main as train_main


@pytest.fixture
def trained(tmp_path) -> Path:
    """A finished 4-step run in ``tmp_path/out``."""
    write_corpus(tmp_path)
    train_main(train_args(tmp_path, 4))
    return tmp_path


@pytest.fixture
def sleeper():
    """A live process that is not us, to hold a lock."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def _lock_as(folder: Path, pid: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    holder = {"pid": pid, "host": os.uname().nodename, "started": "earlier", "command": "another run"}
    (folder / LOCK_FILE).write_text(json.dumps(holder))


# ------------------------------------------------------------------------------ finding 1: train CLI reruns


def test_train_refuses_to_replace_a_finished_run(trained) -> None:
    out = trained / "out"
    weights = (out / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit) as stopped:
        train_main(train_args(trained, 2))
    message = str(stopped.value)
    assert str(out) in message and "finished run of 4 steps" in message and "model.safetensors" in message
    assert "--resume" in message and "--overwrite" in message
    assert steps_of(out) == 4 and (out / "model.safetensors").read_bytes() == weights
    assert not (out / LOCK_FILE).exists()
    # a work folder elsewhere is locked (and so created) before the refusal: it must not be left behind empty
    elsewhere = trained / "elsewhere_work"
    with pytest.raises(SystemExit, match="finished run of 4 steps"):
        train_main([*train_args(trained, 2), "--work-dir", str(elsewhere)])
    assert not elsewhere.exists()


def test_overwrite_replaces_the_run(trained, capsys) -> None:
    train_main([*train_args(trained, 2), "--overwrite"])
    out = trained / "out"
    assert steps_of(out) == 2 and json.loads((out / "run.json").read_text())["max_steps"] == 2
    assert "--overwrite: removed a finished run of 4 steps" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="pass only one"):
        train_main([*train_args(trained, 2), "--overwrite", "--resume"])


def test_train_refuses_an_unfinished_run_without_resume(tmp_path, monkeypatch) -> None:
    """A checkpoint of an interrupted run is work too: starting over needs --overwrite."""
    write_corpus(tmp_path)
    interrupt_training(
        monkeypatch, lambda: train_main([*train_args(tmp_path, 4), "--checkpoint-interval", "1"]), at_step=2
    )
    with pytest.raises(SystemExit, match=r"already holds an unfinished run \(.*checkpoint\.pt"):
        train_main(train_args(tmp_path, 4))
    train_main([*train_args(tmp_path, 4), "--resume"])
    assert steps_of(tmp_path / "out") == 4


# ------------------------------------------------------------------------------ finding 7: resume checks


def test_resume_refuses_another_learning_rate_or_text(trained) -> None:
    out = trained / "out"
    with pytest.raises(SystemExit) as stopped:
        train_main([*train_args(trained, 6), "--resume", "--lr", "0.5"])
    message = str(stopped.value)
    assert str(out) in message and "lr: 0.003 → 0.5" in message
    assert "only max_steps" in message and "--overwrite" in message
    assert steps_of(out) == 4 and json.loads((out / "run.json").read_text())["lr"] == 0.003
    write_corpus(trained, names=("Zed", "Ann"))  # the same file name, other content
    with pytest.raises(SystemExit, match=r"train_file: .*train\.txt \(sha256 [0-9a-f]{12}…\) → .*train\.txt"):
        train_main([*train_args(trained, 6), "--resume"])


def test_resume_may_train_longer(trained, capsys) -> None:
    train_main([*train_args(trained, 6), "--resume"])
    out = trained / "out"
    assert steps_of(out) == 6
    assert [r["step"] for r in json.loads((out / "history.json").read_text())] == list(range(6))
    record = json.loads((out / "run.json").read_text())
    assert record["max_steps"] == 6 and record["resumed"][0]["changed"] == {"max_steps": "4 → 6"}
    assert "--resume: max_steps 4 → 6" in capsys.readouterr().err


# ------------------------------------------------------------------------------ finding 6: the lock


def test_a_lock_held_by_a_live_process_blocks_both_command_lines(tmp_path) -> None:
    write_corpus(tmp_path)
    with lock_held_by_another_process(tmp_path / "out", tmp_path / "run") as holder:
        with pytest.raises(SystemExit) as stopped:
            train_main(train_args(tmp_path, 2))
        message = str(stopped.value)
        assert f"{tmp_path / 'out'} is locked by a running process: pid {holder.pid}" in message
        assert f"(kill {holder.pid})" in message  # the lock proves that process is its writer
        assert not (tmp_path / "out" / "model.safetensors").exists()
        with pytest.raises(SystemExit, match=f"is locked by a running process: pid {holder.pid}"):
            pipeline_main(["--size", "tiny", "--no-progress", "--run-dir", str(tmp_path / "run")])
        assert (tmp_path / "run" / LOCK_FILE).exists()  # never taken from a live process


def test_a_stale_lock_is_reported_and_taken_over(tmp_path, sleeper, capsys) -> None:
    sleeper.kill()
    sleeper.wait()  # its pid no longer exists
    _lock_as(tmp_path, sleeper.pid)
    with locked(tmp_path) as lock:
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert f"taking over a stale lock of pid {sleeper.pid}" in capsys.readouterr().err
    assert not lock.exists()


def _write_lock(folder: Path, **holder: object) -> Path:
    path = folder / LOCK_FILE
    path.write_text(json.dumps({"host": os.uname().nodename, "started": "earlier", "command": "a run", **holder}))
    return path


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="process start times are read from Linux /proc")
def test_a_lock_whose_pid_now_belongs_to_another_process_is_stale(tmp_path, sleeper, capsys) -> None:
    """pid reuse: the lock's writer ended and an unrelated process got its pid. It used to say "kill PID"."""
    lock = _write_lock(tmp_path, pid=sleeper.pid, process_start="another-boot/12345")
    with locked(tmp_path):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert f"taking over a stale lock of pid {sleeper.pid}" in capsys.readouterr().err
    assert sleeper.poll() is None  # the unrelated process was not touched


def test_a_lock_that_cannot_prove_its_writer_never_suggests_killing(tmp_path, sleeper) -> None:
    """A lock of an older minillm (no start time) naming a live pid: maybe the writer, maybe a reused pid."""
    lock = _write_lock(tmp_path, pid=sleeper.pid)
    with pytest.raises(RunFolderLocked) as stopped, locked(tmp_path):
        pass
    message = str(stopped.value)
    assert f"pid {sleeper.pid}" in message and "kill" not in message and f"delete {lock}" in message
    assert lock.exists()


@pytest.mark.parametrize("pid", [0, -1, 1, "1234", "abc", 10**30, True, 2.5, None])
def test_a_lock_naming_no_single_process_is_refused_without_kill_or_traceback(tmp_path, pid) -> None:
    """pids 0 and -1 name process groups (kill 0, kill -1 signal many), 1 is init; none is proven the writer."""
    lock = _write_lock(tmp_path, pid=pid)
    with pytest.raises(RunFolderLocked) as stopped, locked(tmp_path):
        pass
    message = str(stopped.value)
    assert "kill" not in message and f"delete {lock}" in message
    assert lock.exists()


def test_a_second_writer_is_refused_and_the_lock_goes_even_on_an_error(tmp_path) -> None:
    with pytest.raises(ZeroDivisionError), locked(tmp_path) as lock:
        with pytest.raises(RunFolderLocked, match=f"pid {os.getpid()}"), locked(tmp_path):
            pass
        assert lock.exists()
        1 / 0  # noqa: B018
    assert not lock.exists()


def test_a_failing_training_run_removes_its_lock(tmp_path, monkeypatch) -> None:
    write_corpus(tmp_path)

    def fail(self):
        raise RuntimeError("boom")

    monkeypatch.setattr(Trainer, "train_step", fail)
    with pytest.raises(RuntimeError, match="boom"):
        train_main(train_args(tmp_path, 2))
    assert (tmp_path / "out" / "run.json").exists() and not (tmp_path / "out" / LOCK_FILE).exists()


# ------------------------------------------------------------------------------ finding 2: pipeline reruns


@pytest.fixture
def fake_phases(monkeypatch) -> list[str]:
    """Every phase replaced by a stand-in that records its name (and, for pretraining, the text it read)."""
    return install_fake_phases(monkeypatch)


def test_pipeline_refuses_another_text_or_seed_and_skips_an_identical_rerun(tmp_path, fake_phases, capsys) -> None:
    a, b = write_texts(tmp_path)
    run = tmp_path / "run"
    first = run_end_to_end_cli(run, "--text", str(a))
    assert fake_phases == ["tokenizer", "pretrain", "sft", "align", "eval"]
    settings = json.loads((run / "settings.json").read_text())
    assert settings["text"]["path"] == str(a.resolve()) and settings["seed"] == 0
    assert len(settings["text"]["sha256"]) == 64
    train_text = (run / "data" / "train.txt").read_text()
    with pytest.raises(SystemExit) as stopped:
        run_end_to_end_cli(run, "--text", str(b))
    message = str(stopped.value)
    assert str(run) in message and f"text: {a.resolve()} (sha256" in message and f"→ {b.resolve()}" in message
    assert "--overwrite" in message
    assert (run / "data" / "train.txt").read_text() == train_text  # the folder still matches its models
    with pytest.raises(SystemExit, match="seed: 0 → 1"):
        run_end_to_end_cli(run, "--text", str(a), "--seed", "1")
    with pytest.raises(SystemExit, match='algorithm: "dpo" → "ppo"'):
        run_end_to_end_cli(run, "--text", str(a), "--algorithm", "ppo")
    a.write_text(a.read_text().replace("Alpha", "Gamma"))  # edited in place: same path, other content
    with pytest.raises(SystemExit, match="text: .*a.txt \\(sha256 .*\\) → .*a.txt"):
        run_end_to_end_cli(run, "--text", str(a))
    a.write_text(a.read_text().replace("Gamma", "Alpha"))
    capsys.readouterr()
    fake_phases.clear()
    assert run_end_to_end_cli(run, "--text", str(a)) == first
    assert fake_phases == [] and capsys.readouterr().out.count("already complete") == 5
    assert not (run / LOCK_FILE).exists()


def test_pipeline_overwrite_replaces_the_run(tmp_path, fake_phases, capsys) -> None:
    a, b = write_texts(tmp_path)
    run = tmp_path / "run"
    run_end_to_end_cli(run, "--text", str(a))
    (run / "notes.txt").write_text("mine")
    fake_phases.clear()
    metrics = run_end_to_end_cli(run, "--text", str(b), "--overwrite")
    assert fake_phases == ["tokenizer", "pretrain", "sft", "align", "eval"]
    assert metrics["pretrain"]["text"].startswith("Beta story")
    assert json.loads((run / "settings.json").read_text())["text"]["path"] == str(b.resolve())
    assert "removed the previous run's" in capsys.readouterr().err
    assert (run / "notes.txt").read_text() == "mine"  # only what the pipeline writes is removed


def test_pipeline_failure_removes_the_lock(tmp_path, fake_phases, monkeypatch) -> None:
    def broken(run):
        raise RuntimeError("phase failed")

    monkeypatch.setattr(runner, "sft_phase", broken)
    with pytest.raises(RuntimeError, match="phase failed"):
        run_end_to_end_cli(tmp_path / "run")
    assert not (tmp_path / "run" / LOCK_FILE).exists()
    assert (tmp_path / "run" / "pretrain" / "done.json").exists()


# ------------------------------------------------------------------------------ finding 3: datagen


def test_datagen_needs_out_and_says_so(capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        datagen.main([])  # before generating anything
    assert stopped.value.code == 2 and "--out is required: pass --out data" in capsys.readouterr().err


def test_datagen_changes_existing_files_only_with_overwrite(tmp_path) -> None:
    """The shipped data/ is rewritten only byte for byte; other content (another seed) needs --overwrite."""
    shipped = Path(__file__).resolve().parents[1] / "data"
    committed = {name: (shipped / name).read_bytes() for name in ("stories_val.txt", "sft_val.jsonl")}
    for name, content in committed.items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / datagen.MANIFEST).write_text(datagen.manifest(committed), encoding="ascii")
    datagen.write_files(tmp_path, committed)  # reproduces every byte: allowed
    other = {**committed, "stories_val.txt": b"another seed\n"}
    with pytest.raises(RunFolderError) as stopped:
        datagen.write_files(tmp_path, other)
    message = str(stopped.value)
    assert str(tmp_path) in message and "stories_val.txt, MANIFEST.sha256" in message and "--overwrite" in message
    assert "sft_val.jsonl" not in message
    assert (tmp_path / "stories_val.txt").read_bytes() == committed["stories_val.txt"]
    datagen.write_files(tmp_path, other, overwrite=True)
    assert (tmp_path / "stories_val.txt").read_bytes() == b"another seed\n"


# ------------------------------------------------------------------------------ the record's comparison


def test_differences_compare_files_by_content_and_name_nested_fields() -> None:
    old = {"seed": 0, "text": {"path": "/a/t.txt", "sha256": "1" * 64}, "preset_settings": {"lr": 0.1}}
    moved = {"seed": 0, "text": {"path": "/b/t.txt", "sha256": "1" * 64}, "preset_settings": {"lr": 0.1}}
    assert differences(old, moved) == {}
    changed = {"seed": 1, "text": {"path": "/a/t.txt", "sha256": "2" * 64}, "preset_settings": {"lr": 0.2}}
    assert set(differences(old, changed)) == {"seed", "text", "preset_settings.lr"}
    assert differences(old, {**old, "extra": 1}) == {"extra": "(not recorded) → 1"}


@pytest.mark.slow
def test_torchrun_ranks_stop_together_when_rank_0_refuses(trained) -> None:
    """Only rank 0 checks the folder; rank 1 must stop with it instead of waiting at a barrier."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "-m", "minillm.train", *train_args(trained, 2),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "already holds a finished run of 4 steps" in result.stderr
    assert "rank 0 stopped the run" in result.stderr
    assert steps_of(trained / "out") == 4
