"""``python -m minillm``: the tiny run size runs every phase and writes the report; reruns skip finished phases,
an interrupted pretraining resumes from its checkpoint, and bad input fails before any work starts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minillm.end_to_end.cli import main
from minillm.end_to_end.run_size import RunSize, SFTSize, get_run_size
from minillm.train.cli import main as train_main
from minillm.train.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--size", "tiny", "--no-progress", "--threads", "2"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("pipeline") / "run"
    return folder, main([*ARGS, "--run-dir", str(folder)])


@pytest.mark.slow
def test_tiny_run_size_runs_every_phase_and_writes_the_report(tiny_run) -> None:
    folder, metrics = tiny_run
    for phase in ("tokenizer", "pretrain", "sft", "align", "eval"):
        assert (folder / phase / "done.json").is_file(), phase
    for phase in ("pretrain", "sft", "align"):
        assert (folder / phase / "model" / "model.safetensors").is_file(), phase
    report = (folder / "report.md").read_text()
    for heading in ("## Summary", "## pretrain", "## sft", "## align", "## Samples", "## Plots"):
        assert heading in report
    for plot in ("loss_curves.png", "gold_and_kl.png"):
        assert (folder / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pre = metrics["pretrain"]
    assert pre["val_loss"] < 6.0 < 6.93  # well below ln(1024) ≈ 6.93, the loss of a uniform guess
    assert metrics["sft"]["last_loss"] < metrics["sft"]["first_loss"]
    assert metrics["align"]["algorithm"] == "dpo" and metrics["align"]["pairs"] > 1000
    evaluation = metrics["eval"]
    for phase in ("pretrain", "sft", "align"):
        e = evaluation[phase]
        assert 0.0 <= e["gold"] <= 1.0 and e["gold_se"] >= 0.0
        low, high = e["gold_interval_95"]
        assert low <= e["gold"] <= high
        assert 0.0 <= e["pass_at_k"]["1"] <= e["pass_at_k"]["2"] <= e["pass_at_k"]["4"] <= 1.0
        # a model that learned something from the stories needs far fewer than 8 bits per (ASCII) byte
        assert 0.5 < e["bits_per_byte"] < 4.0
    assert evaluation["sft"]["kl_to_sft"] == pytest.approx(0.0, abs=1e-4)  # the reference itself
    assert evaluation["align_vs_sft"]["gold_gain"] == pytest.approx(
        evaluation["align"]["gold"] - evaluation["sft"]["gold"], abs=1e-3
    )
    assert "| phase | gold score ± SE | 95 % bootstrap interval | pass@1 | pass@2 | pass@4 | bits per byte |" in report
    assert report.rstrip().splitlines()[-1].startswith(f"`python -m minillm chat --model {folder / 'align'}`")


@pytest.mark.slow
def test_overwrite_knows_every_file_a_run_writes(tiny_run) -> None:
    """--overwrite removes only the files of runner.run_files: every file a real run wrote must be among them."""
    from minillm.end_to_end.runner import run_files
    from minillm.run_folder import refuse_foreign_files

    folder, _ = tiny_run
    everything = {path for path in folder.rglob("*") if path.is_file()}
    assert len(everything) > 20
    assert set(refuse_foreign_files(run_files(folder), "fix")) == everything


@pytest.mark.slow
def test_demo_run_size_post_trains_the_shipped_base_and_sft_clearly_raises_gold(tmp_path) -> None:
    """The README's first pipeline command: no pretraining, about two minutes on 2 cores."""
    folder = tmp_path / "demo"
    metrics = main(
        ["--preset", "demo", "--no-progress", "--threads", "1", "--run-dir", str(folder)]
    )  # the earlier flag
    gold = {phase: metrics["eval"][phase]["gold"] for phase in ("pretrain", "sft", "align")}
    assert gold["sft"] > gold["pretrain"] + 0.2, gold  # measured: 0.109 → 0.536
    gain = metrics["eval"]["sft_vs_pretrain"]
    assert gain["gold_gain"] > 3 * gain["se"], gain  # paired by prompt, far beyond its noise
    pass_at = metrics["eval"]["sft"]["pass_at_k"]
    assert pass_at["4"] > pass_at["1"] > 0.0, pass_at  # four tries answer more questions than one
    assert gold["align"] != gold["sft"] and metrics["align"]["held_out_accuracy"] > 0.8
    assert metrics["pretrain"]["from"].endswith("base_long") and "steps" not in metrics["pretrain"]
    settings = json.loads((folder / "settings.json").read_text())
    shipped = ROOT / "data" / "base_long" / "model.safetensors"
    assert settings["base_model"]["path"] == str(shipped.resolve()) and len(settings["base_model"]["sha256"]) == 64
    assert (folder / "gold_and_kl.png").read_bytes()[:4] == b"\x89PNG"
    assert "| after SFT |" in (folder / "report.md").read_text()


def test_demo_run_size_refuses_own_text(tmp_path) -> None:
    text = tmp_path / "own.txt"
    text.write_text("Once upon a time. " * 500)
    with pytest.raises(SystemExit, match="post-trains the course's shipped base model, so it takes no --text"):
        main(["--size", "demo", "--text", str(text), "--run-dir", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_rerun_skips_finished_phases_and_resume_continues_pretraining(tiny_run, capsys) -> None:
    folder, first = tiny_run
    capsys.readouterr()
    # A run recorded before the run size had its name ("preset", "preset_settings") is the same run.
    record = json.loads((folder / "settings.json").read_text())
    old_names = {"run_size": "preset", "run_size_settings": "preset_settings"}
    (folder / "settings.json").write_text(json.dumps({old_names.get(k, k): v for k, v in record.items()}))
    again = main([*ARGS, "--run-dir", str(folder)])
    out = capsys.readouterr().out
    assert out.count("already complete") == 5
    assert again["eval"] == first["eval"]
    assert json.loads((folder / "settings.json").read_text()) == record  # rewritten under today's names
    # An interruption after the last checkpoint: pretraining resumes there instead of starting over.
    (folder / "pretrain" / "done.json").unlink()
    shutil.rmtree(folder / "pretrain" / "model")
    for later in ("sft", "align", "eval"):
        shutil.rmtree(folder / later)
    resumed = main([*ARGS, "--run-dir", str(folder)])
    out = capsys.readouterr().out
    assert "resuming from step 150" in out
    assert resumed["pretrain"]["val_loss"] == first["pretrain"]["val_loss"]
    assert resumed["eval"]["sft"]["gold"] == first["eval"]["sft"]["gold"]


@pytest.mark.slow
def test_ppo_is_one_flag_away(tiny_run, tmp_path) -> None:
    folder, _ = tiny_run
    ppo = tmp_path / "ppo"
    for phase in ("tokenizer", "pretrain", "sft"):
        shutil.copytree(folder / phase, ppo / phase)
    metrics = main([*ARGS, "--run-dir", str(ppo), "--algorithm", "ppo"])
    assert metrics["align"]["algorithm"] == "ppo"
    assert 0.0 <= metrics["align"]["reward_model_accuracy"] <= 1.0
    assert (ppo / "report.md").is_file()


def test_bad_input_fails_before_any_work(tmp_path) -> None:
    run = subprocess.run([sys.executable, "-m", "minillm", "--no-such-flag"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2 and "unrecognized arguments: --no-such-flag" in run.stderr
    with pytest.raises(SystemExit, match="missing.txt: file not found"):
        main([*ARGS, "--run-dir", str(tmp_path / "a"), "--text", str(tmp_path / "missing.txt")])
    assert not (tmp_path / "a").exists()
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(SystemExit, match="not writable"):
        main([*ARGS, "--run-dir", str(blocker / "run")])
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(SystemExit, match="empty.txt"):
        main([*ARGS, "--run-dir", str(tmp_path / "b"), "--text", str(empty)])


def test_own_text_whose_validation_part_is_two_words_is_refused_before_any_work(tmp_path) -> None:
    """It used to pass the up-front checks, train a tokenizer, then crash in pretraining with a traceback."""
    text = tmp_path / "own.txt"
    stories = [f"Story {i}: once upon a time there was a little boat on a lake." * 3 for i in range(38)]
    text.write_text("\n\n".join([*stories, "The end.", "Goodbye."]) + "\n")  # the last 2 of 40: validation
    # "The end.\n\nGoodbye.\n": 8 + 2 + 8 + 1 bytes
    with pytest.raises(SystemExit, match=r"own\.txt: 19 bytes of validation text .*context_length \+ 1 = 257"):
        main([*ARGS, "--run-dir", str(tmp_path / "run"), "--text", str(text)])
    assert not (tmp_path / "run").exists()


def test_a_learners_own_text_is_split_into_train_and_validation(tmp_path) -> None:
    from minillm.end_to_end.runner import split_own_text

    own = tmp_path / "mine.txt"
    own.write_text("\n\n".join(f"Document number {i} is here." for i in range(40)) + "\n")
    train, val = split_own_text(own)
    assert train.count("Document") == 38 and val.count("Document") == 2
    (tmp_path / "run").mkdir()
    settings = tmp_path / "run" / "settings.json"
    settings.write_text(json.dumps({"preset": "course"}))
    with pytest.raises(SystemExit, match="other settings"):
        main([*ARGS, "--run-dir", str(tmp_path / "run")])


def test_course_run_size_pretrains_with_the_course_config(tmp_path) -> None:
    """The pipeline's course run reads configs/course.json (the base checkpoint's recipe): every setting but the
    run's own files, seed, device, threads and progress bars comes from the file, so the two cannot drift."""
    from minillm.end_to_end.phases import Run
    from minillm.end_to_end.run_size import RUN_FIELDS, get_run_size
    from minillm.train import TrainConfig

    course = TrainConfig.from_json(ROOT / "configs" / "course.json").to_dict()
    files = {name: tmp_path / name for name in ("train_file", "val_file", "sft_file", "prefs_file")}
    built = Run(tmp_path / "run", get_run_size("course"), **files, seed=3).train_config().to_dict()
    assert {k: v for k, v in built.items() if k not in RUN_FIELDS} == {
        k: v for k, v in course.items() if k not in RUN_FIELDS
    }
    assert built["seed"] == 3 and built["out_dir"] == str(tmp_path / "run" / "pretrain" / "model")


def test_long_course_config_is_the_course_config_trained_longer() -> None:
    """configs/course_long.json (post-training's base) must differ from the course recipe only in its length."""
    course = json.loads((ROOT / "configs" / "course.json").read_text())
    longer = json.loads((ROOT / "configs" / "course_long.json").read_text())
    length = {"_comment", "out_dir", "work_dir", "max_steps", "decay_steps", "eval_interval", "checkpoint_interval"}
    assert set(course) == set(longer)
    assert {k: v for k, v in course.items() if k not in length} == {k: v for k, v in longer.items() if k not in length}
    assert longer["max_steps"] == 3 * course["max_steps"]
    # the cool-down keeps the same share of the run
    assert longer["decay_steps"] / longer["max_steps"] == course["decay_steps"] / course["max_steps"]
    saved = json.loads((ROOT / "data" / "base_long" / "config.json").read_text())["train"]
    assert {k: saved[k] for k in longer if k != "_comment"} == {k: v for k, v in longer.items() if k != "_comment"}


TEXT = "hello, world! the cat sat on the mat. the dog sat on the log. " * 10


def test_unknown_run_size_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown run size 'bogus'; choose one of \['course', .*'tiny'\]"):
        get_run_size("bogus")
    assert get_run_size("tiny") is get_run_size("tiny")  # built once
    with pytest.raises(ValueError, match=r"a run size does not set \['out_dir'\]: the run itself chooses them"):
        RunSize(pretrain={"out_dir": "x"}, sft=SFTSize(steps=1, lr=1e-3), align=get_run_size("tiny").align)
    with pytest.raises(ConfigError, match="n_head=3 does not divide d_model=32"):
        RunSize(pretrain={"n_head": 3, "d_model": 32}, sft=SFTSize(steps=1, lr=1e-3), align=get_run_size("tiny").align)


def test_run_sizes_are_the_json_files_and_a_bad_file_is_named(tmp_path) -> None:
    """The run sizes are data (one JSON file each): every file loads, the names are the files', and a malformed
    file is refused with its path and the field at fault."""
    from minillm.end_to_end.run_size import RUN_SIZE_DIR, RUN_SIZES, load_run_size

    assert set(RUN_SIZES) == {"course", "demo", "gpu-medium", "gpu-small", "tiny"}
    assert {p.stem for p in RUN_SIZE_DIR.glob("*.json")} == set(RUN_SIZES)
    tiny = json.loads((RUN_SIZE_DIR / "tiny.json").read_text())
    assert get_run_size("tiny").pretrain == tiny["pretrain"] and get_run_size("tiny").sft.lr == tiny["sft"]["lr"]
    # the course's DPO is notebook 10's (data/posttrain/dpo.json: beta 0.1, lr 1e-4)
    assert (get_run_size("course").align.dpo_lr, get_run_size("course").align.dpo_beta) == (1e-4, 0.1)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**tiny, "sft": {"steps": 10, "lr": 1e-3, "learning_rate": 1}}))
    with pytest.raises(ValueError, match=r"bad.json: sft: unknown fields \['learning_rate'\]"):
        load_run_size(bad)
    bad.write_text(json.dumps({**tiny, "sft": {"lr": 1e-3}}))
    with pytest.raises(ValueError, match=r"bad.json: sft: .*steps"):
        load_run_size(bad)
    bad.write_text(json.dumps({**tiny, "phases": 3}))
    with pytest.raises(ValueError, match=r"bad.json: a run size holds"):
        load_run_size(bad)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--threads", "0"], "--threads must be"),
        (["--device", "tpu"], "--device: device 'tpu'"),
        (["--device", "cuda"], "--device: device 'cuda' was requested but torch sees no CUDA GPU"),
    ],
)
def test_pipeline_refuses_bad_threads_and_devices_before_any_work(tmp_path, flags, message, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match=message):
        main(["--size", "tiny", "--run-dir", str(tmp_path / "run"), *flags])
    assert not (tmp_path / "run").exists()


def test_text_too_short_for_one_window_is_refused_with_its_numbers(tmp_path):
    """Used to pass the up-front checks, train a tokenizer, then crash inside RandomWindows with a traceback."""
    short = tmp_path / "short.txt"
    short.write_text("Hello there, a short story.\n\nAnother short one here.\n\nAnd a third.\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"short.txt: 53 bytes of training text .*context_length \+ 1 = 257"):
        main(["--size", "tiny", "--text", str(short), "--run-dir", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()
    # the train command line finds out after tokenising (tokens, not bytes, fill a window) and says so
    train = tmp_path / "train.txt"
    train.write_text(TEXT, encoding="utf-8")
    argv = ["--train-file", str(train), "--val-file", "none", "--out-dir", str(tmp_path / "out"), "--vocab-size",
            "300", "--n-layer", "1", "--d-model", "32", "--context-length", "1024", "--max-steps", "2",
            "--warmup-steps", "1", "--no-progress", "--device", "cpu"]  # fmt: skip
    with pytest.raises(SystemExit, match=r"train.txt: [0-9,]+ tokens after tokenisation, fewer than one train window"):
        train_main(argv)


def test_overwrite_recognises_a_run_recorded_under_the_earlier_names(tmp_path) -> None:
    """--overwrite may replace a pipeline folder whose settings.json predates the run-size rename, and only that."""
    from minillm.end_to_end.runner import run_files
    from minillm.run_folder import RunFolderError, remove_run_files

    folder = tmp_path / "run"
    (folder / "sft").mkdir(parents=True)
    (folder / "sft" / "done.json").write_text("{}")
    legacy = {"preset": "tiny", "preset_settings": {}, "algorithm": "dpo", "seed": 0, "text": {}}
    (folder / "settings.json").write_text(json.dumps(legacy))
    assert (folder / "sft" / "done.json") in remove_run_files(run_files(folder), "fix")
    (folder / "sft").mkdir()  # removed with its last file
    (folder / "sft" / "done.json").write_text("{}")
    (folder / "settings.json").write_text(json.dumps({"seed": 0}))  # no pipeline's record: nothing is removed
    with pytest.raises(RunFolderError):
        remove_run_files(run_files(folder), "fix")
    assert (folder / "sft" / "done.json").is_file()
