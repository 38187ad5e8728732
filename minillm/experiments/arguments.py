"""The command-line flags every experiment shares, defined once so they mean the same thing everywhere.

``--out`` (the results folder), ``--threads`` (torch threads; 1 is fastest for the course's tiny models),
``--overwrite`` (replace results already in ``--out``; without it an experiment refuses to touch them) and
``--quick`` (tiny sizes that check the code path end to end — never results). ``--force``, the scaling
sweep's old spelling of ``--overwrite``, is still accepted there.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from minillm.run_folder import write_record


def experiment_parser(
    prog: str, description: str, out_help: str, legacy_force: bool = False
) -> argparse.ArgumentParser:
    """An argument parser with the shared flags; the experiment adds its own (``--runs``, ``--stage``…)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--out", type=Path, required=True, help=out_help)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for tiny models)")
    flags = ["--overwrite", "--force"] if legacy_force else ["--overwrite"]
    parser.add_argument(*flags, dest="overwrite", action="store_true", help="replace results already in --out")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check the code path end to end")
    return parser


def parse_experiment_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse, check the shared flags once, and set torch's thread count."""
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    return args


def command_line(module: str, quick: bool) -> str:
    """The command recorded in a result's provenance (``--quick`` named, so quick results can't pass as real)."""
    return f"python -m minillm.experiments.{module}" + (" --quick" if quick else "")


def run_one_file_experiment(
    module: str,
    doc: str,
    result: str,
    out_help: str,
    run: Callable[[bool, str], dict[str, Any]],
    argv: list[str] | None,
) -> None:
    """The whole command line of an experiment that writes one JSON file: refuse to replace it without
    ``--overwrite``, run (``run(quick, command)`` returns the payload) and write it atomically."""
    parser = experiment_parser(f"python -m minillm.experiments.{module}", doc.split("\n")[0], out_help)
    args = parse_experiment_args(parser, argv)
    path = Path(args.out) / result
    if path.exists() and not args.overwrite:
        parser.error(f"{path} exists; pass --overwrite to replace it")
    payload = run(args.quick, command_line(module, args.quick))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_record(path, payload, indent=1)
    print(f"wrote {path}")
