"""``python -m minillm``: argument parsing, up-front checks, and the phases in order."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from minillm.data import load_stories
from minillm.device import pick_device
from minillm.paths import data_dir
from minillm.pipeline.phases import (
    Run,
    align_phase,
    eval_phase,
    pretrain_phase,
    run_phase,
    sft_phase,
    tokenizer_phase,
)
from minillm.pipeline.presets import PRESETS
from minillm.pipeline.report import write_report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m minillm",
        description="Run the whole pipeline: tokenizer → pretraining → SFT → DPO/PPO → evaluation → report.",
    )
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), default="course", help="sizes of the run (default: course)"
    )
    parser.add_argument("--run-dir", default="runs/pipeline", help="folder for every phase's outputs and the report")
    parser.add_argument("--text", help="your own UTF-8 text file to pretrain on (documents separated by empty lines)")
    parser.add_argument("--algorithm", choices=("dpo", "ppo"), default="dpo", help="preference optimisation")
    parser.add_argument("--device", default=None, help="cpu, cuda, mps (default: a GPU when present)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def _split_own_text(path: Path, folder: Path) -> tuple[Path, Path]:
    """A learner's file becomes train (95 %) and validation (the last 5 % of documents, at least one)."""
    documents = load_stories(path)  # clear errors for a missing, empty or non-UTF-8 file
    if len(documents) < 2:
        raise ValueError(
            f"{path}: need at least 2 documents (blocks separated by an empty line), found {len(documents)}"
        )
    n_val = max(1, len(documents) // 20)
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    train, val = data / "train.txt", data / "val.txt"
    train.write_text("\n\n".join(documents[:-n_val]) + "\n", encoding="utf-8")
    val.write_text("\n\n".join(documents[-n_val:]) + "\n", encoding="utf-8")
    return train, val


def _check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        raise SystemExit(f"error: run folder {folder} is not writable: {error}") from error


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)  # unknown flags: argparse prints usage and exits with status 2
    folder = Path(args.run_dir)
    if args.text is not None and not Path(args.text).is_file():
        raise SystemExit(f"error: --text {args.text}: file not found")
    _check_writable(folder)
    if args.text is not None:
        try:
            train_file, val_file = _split_own_text(Path(args.text), folder)
        except ValueError as error:
            raise SystemExit(f"error: {error}") from error
    else:
        train_file, val_file = data_dir() / "stories_train.txt", data_dir() / "stories_val.txt"
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    run = Run(
        folder=folder,
        preset=PRESETS[args.preset],
        train_file=train_file,
        val_file=val_file,
        sft_file=data_dir() / "sft_train.jsonl",
        prefs_file=data_dir() / "prefs_train.jsonl",
        algorithm=args.algorithm,
        device=device,
        seed=args.seed,
        progress=not args.no_progress,
    )
    settings = {
        "preset": args.preset,
        "algorithm": args.algorithm,
        "train_file": str(train_file),
        "device": str(device),
    }
    settings_file = folder / "settings.json"
    if settings_file.is_file() and json.loads(settings_file.read_text()) != settings:
        raise SystemExit(f"error: {folder} holds a run with other settings ({settings_file}); choose another --run-dir")
    settings_file.write_text(json.dumps(settings, indent=2) + "\n")
    metrics = {}
    for phase, body in (
        ("tokenizer", tokenizer_phase),
        ("pretrain", pretrain_phase),
        ("sft", sft_phase),
        ("align", align_phase),
        ("eval", eval_phase),
    ):
        metrics[phase] = run_phase(run, phase, body)
    report = write_report(folder, metrics, settings)
    print(f"report: {report}")
    return metrics


def console() -> None:
    """The ``minillm`` console script (returns nothing, so the exit status is 0 on success)."""
    main()


if __name__ == "__main__":  # pragma: no cover
    console()
