"""``python -m minillm``: argument parsing only; :func:`minillm.end_to_end.runner.run_end_to_end` does the run."""

from __future__ import annotations

import argparse

from minillm.checkpoint import CheckpointError
from minillm.end_to_end.run_size import RUN_SIZES
from minillm.end_to_end.runner import EndToEndError, run_end_to_end
from minillm.run_folder import DiskFullError, RunFolderError
from minillm.train.config import ConfigError
from minillm.train.loop import DataError


def build_parser() -> argparse.ArgumentParser:
    """The pipeline's flags; what a run folder holds and when it is reused is in the ``--run-dir`` help."""
    parser = argparse.ArgumentParser(
        prog="python -m minillm",
        description="Run the whole pipeline: tokenizer → pretraining → SFT → DPO/PPO → evaluation → report.",
    )
    parser.add_argument(
        "--size",
        "--preset",  # the flag's earlier name, still accepted
        dest="size",
        choices=sorted(RUN_SIZES),
        default="course",
        help="the run size: how long each phase trains (default: course, i.e. configs/course.json then SFT and DPO; "
        "demo: post-train the shipped base model, about two minutes on 2 CPU cores; the files are in "
        "minillm/end_to_end/run_sizes/). --preset is its earlier name",
    )
    parser.add_argument(
        "--run-dir",
        default="runs/pipeline",
        help="folder for every phase's outputs and the report; rerun with the same settings, finished phases "
        "are skipped, with others the run is refused (see --overwrite); locked while a run writes to it",
    )
    parser.add_argument("--text", help="your own UTF-8 text file to pretrain on (documents separated by empty lines)")
    parser.add_argument("--algorithm", choices=("dpo", "ppo"), default="dpo", help="preference optimisation")
    parser.add_argument("--device", default=None, help="cpu, cuda, mps (default: a GPU when present)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in --run-dir (the files it wrote in its phase folders and data/, its report and "
        "settings.json are deleted; refused where no settings.json shows a pipeline run, or where those folders "
        "hold files the run did not write)",
    )
    return parser


def main(argv: list[str] | None = None) -> dict:
    """Parse flags (unknown ones: usage and exit status 2) and run; a refused run exits with ``error: ...``."""
    args = build_parser().parse_args(argv)
    try:
        return run_end_to_end(
            size=args.size,
            run_dir=args.run_dir,
            text=args.text,
            algorithm=args.algorithm,
            device=args.device,
            seed=args.seed,
            threads=args.threads,
            progress=not args.no_progress,
            overwrite=args.overwrite,
        )
    except (EndToEndError, RunFolderError, ConfigError, DataError, CheckpointError, DiskFullError) as error:
        raise SystemExit(f"error: {error}") from error


def console() -> None:
    """The ``minillm`` console script: ``minillm chat ...`` talks to a model, anything else runs the pipeline."""
    import sys

    if sys.argv[1:2] == ["chat"]:
        from minillm.chat_terminal import main as chat

        raise SystemExit(chat(sys.argv[2:]))
    main()


if __name__ == "__main__":  # pragma: no cover
    console()
